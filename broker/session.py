"""One Session per client connection, and the Listener it belongs to.

Handlers reach everything through the session: the authenticated user, name resolution (the
tenant choke point, cached briefly per connection) and `run_sync`, the only way they run
Django ORM or store code (in the listener's thread pool, never on the event loop).

A session's SASL sign-in lasts until `expires` (KIP-368: the client re-authenticates on the
open connection before then); `revoke` ends the connection at once (broker/revocation.py
calls it when the token behind `grant` is revoked)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import AsyncIterator, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import structlog
from django.db import InterfaceError, OperationalError, close_old_connections

from replication import listings
from replication.grants import cached_perms, perms_held
from replication.listeners import Node
from replication.quotas import (
    cached_request_rates,
    cached_wait,
    quotas_wait,
    request_rates,
    requests_charge,
)
from replication.services.names import ResolvedTopic, topic_resolve, topic_target

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

    from accounts.tokens import TokenGrant
    from replication.models import Stream

log = structlog.get_logger(__name__)
T = TypeVar("T")
RESOLVE_CACHE_SECONDS = 2.0


@dataclass
class Listener:
    """What every connection of one listener process shares."""

    node: Node
    cluster: str | None = None  # serve only this cluster's streams
    default_stream: str | None = None  # the single-tenant site's stream for plain names
    max_request_bytes: int = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes
    idle_seconds: float = 600.0  # Kafka's connections.max.idle.ms
    executor: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(16, thread_name_prefix="kafka-sync"))
    nodes: Callable[[], list[Node]] | None = None  # the live listeners (nodes.py)
    noted: set[str] = field(default_factory=set)  # what this listener has logged once
    # The open connections, each with the task serving it (revocation.py cancels it).
    sessions: dict[Session, asyncio.Task] = field(default_factory=dict)
    # Tenant id -> its lane: the one append at a time of its throttled connections
    # (Session.lane).
    lanes: dict[int, asyncio.Lock] = field(default_factory=dict)

    @property
    def node_id(self) -> int:
        return self.node.node_id

    @property
    def host(self) -> str:
        return self.node.host

    @property
    def port(self) -> int:
        return self.node.port

    def live_nodes(self) -> list[Node]:
        """The live listeners serving what this one serves, sorted, this one always among them."""
        found = set(self.nodes()) if self.nodes else set()
        found.add(self.node)
        return sorted(found)


def forget_connection(error: BaseException) -> None:
    """After a database error the thread's connection may be dead (a database restart): the
    next call gets a fresh one rather than failing for ever. For handlers that answer such an
    error themselves instead of letting it reach `run_sync`."""
    if isinstance(error, (InterfaceError, OperationalError)):
        close_old_connections()
        from django.db import connection

        connection.close()


def _sync_call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    try:
        return fn(*args, **kwargs)
    except (InterfaceError, OperationalError) as error:
        forget_connection(error)
        raise


class Session:
    def __init__(self, listener: Listener, peer: str) -> None:
        self.listener = listener
        self.peer = peer
        self.user: AbstractBaseUser | None = None
        self.client_id = ""
        self.raw_sasl = False  # after SaslHandshake v0 the next frame is a bare SASL token
        self.close_after: str | None = None  # close once this answer is sent, and why
        # The SASL exchange between SaslHandshake and its last SaslAuthenticate round
        # (broker/apis/sasl.py); None outside one.
        self.sasl_exchange: Any = None
        self.signed_in_with = ""  # the mechanism of the sign-in; re-authentication keeps it
        self.grant: TokenGrant | None = None
        self.lifetime = 0.0  # seconds the last sign-in lasts
        self.expires = float("inf")  # time.monotonic() when the SASL session ends
        # name and create -> (when, the listings' generation then, what it resolved to)
        self._resolved: dict[tuple[str, bool], tuple[float, Any, ResolvedTopic | None]] = {}
        # Plain names this user cannot place (no default stream applies), and why.
        self._unplaceable: dict[str, str] = {}
        self._noted: set[str] = set()
        self.log = log.bind(peer=peer)
        # Whether the client closed the connection; the server sets it (safe from any thread).
        self.peer_left: Callable[[], bool] = lambda: False
        # Seconds the tenants' quotas hold this connection back after the request being
        # served (its answer's throttle_time_ms; nothing more is read meanwhile).
        self.throttle_seconds = 0.0
        # Whether a quota has throttled this connection: from then on its requests are read
        # and served one at a time, muted after each, as Kafka serves every connection (never
        # a client's pipelined Produce requests at once, which would admit several times a
        # quota's worth in one lump: server.py `_received_with`).
        self.throttled = False

    def throttle(self, seconds: float) -> None:
        self.throttle_seconds = max(self.throttle_seconds, seconds)
        self.throttled = self.throttled or seconds > 0

    @contextlib.asynccontextmanager
    async def lane(self, tenant_ids: Iterable[int]) -> AsyncIterator[None]:
        """Held around a produce's appends. A connection a quota has throttled appends in
        its tenants' lanes, one append at a time per tenant across this listener: a tenant at
        its quota holds at most one pool thread, one store connection and one large append in
        the store at once however many connections it opens, where each of its connections
        could otherwise append a megabyte together (two took two cores from the others' small
        appends: docs/benchmarks.md, Quota isolation). Other connections append freely."""
        async with contextlib.AsyncExitStack() as held:
            if self.throttled:
                for tenant_id in sorted(set(tenant_ids)):  # one order: no deadlock
                    lane = self.listener.lanes.setdefault(tenant_id, asyncio.Lock())
                    await held.enter_async_context(lane)
            yield

    async def charge_request(self) -> None:
        """Count this request against its user's tenants' request quotas (their rates read
        in the thread pool when this process holds none fresh; the count does no I/O)."""
        if self.user is None:
            return
        rates = cached_request_rates(self.user.pk)
        if rates is None:
            rates = await self.run_sync(request_rates, self.user.pk)
        self.throttle(requests_charge(rates))

    async def throttle_for(self, tenant_ids: set[int], kind: str) -> None:
        """Hold the connection back while one of these tenants is over its `kind` quota."""
        wait = cached_wait(tenant_ids, kind)
        if wait is None:
            wait = await self.run_sync(quotas_wait, tenant_ids, kind)
        self.throttle(wait)

    async def run_sync(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        call = functools.partial(_sync_call, fn, *args, **kwargs)
        return await loop.run_in_executor(self.listener.executor, call)

    async def resolve(self, name: str, *, create: bool = False) -> ResolvedTopic | None:
        """The topic `name` means to this connection's user (None: absent or invisible). A
        resolution is kept for RESOLVE_CACHE_SECONDS, unless a topic, ACE or identity changed
        in this process since (another connection made the topic, or added partitions)."""
        key, now, generation = (name, create), time.monotonic(), listings.generation()
        cached = self._resolved.get(key)
        if cached and now - cached[0] < RESOLVE_CACHE_SECONDS and cached[1] == generation:
            return cached[2]
        missing: list[str] = []
        found = await self.run_sync(
            topic_resolve, actor=self.user, name=name, cluster=self.listener.cluster,
            default_stream=self.listener.default_stream, create=create,
            on_missing=lambda reason: (missing.append(reason), self._missing_default(reason)))
        self._resolved[key] = (now, generation, found)
        if missing:
            self._unplaceable[name] = missing[0]
        else:
            self._unplaceable.pop(name, None)
        if found is not None:
            self._resolved[(name, False)] = (now, generation, found)
        return found

    async def listing(self, perms: tuple[str, ...]) -> list[ResolvedTopic]:
        """Every topic this connection's user sees and holds one of `perms` on, through the
        listings kept for every connection (replication/listings.py). A listing due to be
        read afresh is answered while one read runs beside the request."""
        key = listings.key_of(self.user, self.listener.cluster, self.listener.default_stream,
                              perms)
        topics, due = listings.kept(key)
        if topics is None:
            return await self.run_sync(listings.read, key, actor=self.user)
        if due:
            loop = asyncio.get_running_loop()
            call = functools.partial(_sync_call, listings.read, key, actor=self.user, ahead=True)
            loop.run_in_executor(self.listener.executor, call).add_done_callback(self._read_ahead)
        return topics

    def _read_ahead(self, done: asyncio.Future) -> None:
        if not done.cancelled() and done.exception() is not None:
            self.log.warning("kafka_listing_read_failed", error=str(done.exception()))

    def unplaceable(self, name: str) -> str | None:
        """Why the plain name `name` reaches no stream for this user (no default stream
        applies), as its last resolution found; None when it does, or is not plain."""
        return self._unplaceable.get(name)

    async def perms(self, stream: Stream) -> frozenset[str]:
        """The permissions this connection's user holds on `stream`, through the one
        authorization cache (replication/grants.py): no thread hop while it is fresh."""
        held = cached_perms(self.user, stream)
        if held is None:
            held = await self.run_sync(perms_held, self.user, stream)
        return held

    async def target(self, name: str) -> tuple[Stream, str] | None:
        """The stream `name` points into and the topic's name there, existing or not (for
        CreateTopics); not cached."""
        return await self.run_sync(
            topic_target, actor=self.user, name=name, cluster=self.listener.cluster,
            default_stream=self.listener.default_stream, on_missing=self._missing_default)

    def _missing_default(self, reason: str) -> None:
        # Once per listener and user: every plain name of every connection would repeat it.
        key = f"default_stream_missing:{self.user.pk if self.user else ''}"
        if key not in self.listener.noted:
            self.listener.noted.add(key)
            self.log.warning("kafka_default_stream_missing", reason=reason)

    def forget(self, name: str | None = None) -> None:
        """Drop cached resolutions (all, or of one name) after this session changed topics."""
        if name is None:
            self._resolved.clear()
        else:
            self._resolved.pop((name, False), None)
            self._resolved.pop((name, True), None)

    def expired(self) -> bool:
        return time.monotonic() >= self.expires

    def revoke(self, reason: str) -> None:
        """Close the connection now, whatever it is doing (a long-polling fetch included)."""
        task = self.listener.sessions.get(self)
        if task is not None and not task.done():
            self.log.warning("kafka_session_revoked", client_id=self.client_id, reason=reason)
            task.cancel()

    def note(self, event: str, **fields: Any) -> None:
        """Log `event` once per connection (a client repeating a bad request is one line)."""
        if event in self._noted:
            return
        self._noted.add(event)
        self.log.warning(event, client_id=self.client_id, **fields)
