"""Gateway presence, wake-ups and acknowledgements: the engine's signals between processes.

In production they live in Redis (DESIGN.md: Redis for gateway presence):
- a gateway is live while its key `sg:gw:<cluster>:<name>` exists; it refreshes the key well
  within its TTL, so a killed gateway reads DOWN a TTL later without anyone noticing its death.
  The key holds the gateway process's incarnation, so a restarted gateway is told apart from
  the one that stopped answering;
- a wake-up adds a stream to each live replicator's `sg:dirty:<id>` set and pushes its
  one-slot `sg:signal:<id>` list (replication/leases.py keeps who is live);
- the replicator sends a gateway its batches on the gateway's own list (replication/
  batchqueue.py);
- a gateway acknowledges a batch by pushing its result on the sender's `sg:acks:<inbox>`, so
  two replicators (say, while one is being replaced) never take each other's acknowledgements.
- a gateway that applied a batch publishes the link's id on `sg:applied:<link>`, so producers
  waiting for synchronous replicas (replication/services/sync.py) re-read the replica's ends
  at once rather than polling. Each process listens with one pattern subscription
  (`AppliedListener`), whatever the number of producers waiting in it.
The replicator blocks on both lists with one BLMPOP (Redis 7), so an idle deployment costs
one blocked connection, and a burst of produces costs one signal. Sets and lists rather than
pub/sub: a wake-up sent while the replicator restarts is still there when it comes back (or
expires, and the start-up sweep covers it).

Embedded mode has no Redis: `LocalPresence` keeps the same state in process memory, where
the replicator thread and the in-process gateways live.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Protocol

import redis
import structlog
from django.conf import settings

from replication.batchqueue import GatewayId, RedisBatches
from replication.leases import LocalLeases, RedisLeases, ReplicatorState

log = structlog.get_logger(__name__)
SIGNAL_TTL = 300  # seconds; a replicator that is down that long re-plans everything anyway
# Redis times blocking commands out on its timer, 100 ms a tick at its default hz 10: waits
# shorter than that poll instead (RedisPresence._poll).
REDIS_TICK = 0.1
POLL_SECONDS = 0.002


@dataclass
class Signals:
    """What woke the replicator: batch results, and streams with new data."""

    acks: list[dict[str, Any]] = field(default_factory=list)
    streams: set[str] = field(default_factory=set)


class Presence(Protocol):
    def beat(self, gateway: GatewayId, ttl: float, incarnation: str = "") -> None: ...

    def forget(self, gateway: GatewayId) -> None: ...

    def live(self, gateways: Iterable[GatewayId]) -> dict[GatewayId, str]:
        """The live ones among `gateways`, each with its incarnation (which process beats)."""
        ...

    def wake(self, streams: Iterable[str]) -> None: ...

    def links_changed(self) -> None:
        """A link, upstream, topic or cluster changed: gateways read their links again
        (replication/batchqueue.py)."""
        ...

    def ack(self, result: dict[str, Any], inbox: str = "") -> None: ...

    def wait(self, timeout: float, inbox: str = "") -> Signals: ...

    def applied(self, links: Iterable[int]) -> None:
        """Batches of these links were applied: wake the producers waiting for them."""
        ...

    def applied_board(self) -> AppliedBoard:
        """Where this process learns of applied batches, ready to be watched."""
        ...

    def done(self, acks: list[dict[str, Any]], inbox: str, applied: list[int],
             wake: list[str]) -> None:
        """A gateway's batch is done: `ack` each result, `applied` the links, `wake` the
        streams, all at once (one round trip to Redis)."""
        ...

    # Replicators and their link leases (replication/leases.py).
    def replicator_beat(self, replicator: str, ttl: float, links: int) -> list[str]:
        """Alive `ttl` seconds more, holding `links`; returns the live replicators' ids."""
        ...

    def replicator_forget(self, replicator: str) -> None: ...

    def replicators(self) -> list[ReplicatorState]:
        """Every replicator heard of in the last hour, alive or not."""
        ...

    def lease(self, replicator: str, want: Iterable[int], release: Iterable[int],
              ttl: float) -> set[int]:
        """Take or renew the leases of `want` (those no other replicator holds) for `ttl`
        seconds, give back `release`; returns the links of `want` now held."""
        ...

    def lease_holders(self, links: Iterable[int]) -> dict[int, str]:
        """Which replicator holds each of `links` now (those leased)."""
        ...


class AppliedBoard:
    """A counter per link, bumped for each "applied" notification this process hears.

    A waiter takes a snapshot before it reads the replica's ends and sleeps until a counter
    moves past it, so a batch applied between the read and the sleep is never missed."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._counts: dict[str, int] = {}
        self._generation = 0  # bumped on a listener reconnect: anything may have been missed

    def bump(self, links: Iterable[str]) -> None:
        with self._cond:
            for link in links:
                self._counts[link] = self._counts.get(link, 0) + 1
            self._cond.notify_all()

    def bump_all(self) -> None:
        with self._cond:
            self._generation += 1
            self._cond.notify_all()

    def snapshot(self, links: Iterable[str]) -> tuple[int, ...]:
        with self._cond:
            return (self._generation, *(self._counts.get(link, 0) for link in links))

    def wait(self, links: list[str], seen: tuple[int, ...], timeout: float) -> bool:
        """Until a link's counter moves past `seen` (True) or `timeout` seconds pass."""
        with self._cond:
            return self._cond.wait_for(lambda: self._moved(links, seen), timeout)

    def _moved(self, links: list[str], seen: tuple[int, ...]) -> bool:
        return (self._generation, *(self._counts.get(link, 0) for link in links)) != seen


class AppliedListener:
    """One thread per process holding a pattern subscription to the "applied" channels and
    bumping the board; it reconnects by itself (waiters fall back on their re-checks meanwhile).
    """

    def __init__(self, client: redis.Redis, pattern: str) -> None:
        self.client, self.pattern = client, pattern
        self.board = AppliedBoard()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, name="applied-listener", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        prefix = len(self.pattern) - 1  # the channel name up to the "*"
        while True:
            try:
                with self.client.pubsub() as pubsub:
                    pubsub.psubscribe(self.pattern)
                    for message in pubsub.listen():
                        if message["type"] == "psubscribe":
                            self.ready.set()
                        elif message["type"] == "pmessage":
                            self.board.bump([message["channel"].decode()[prefix:]])
            except Exception as error:  # Redis restarting: subscribe again
                self.ready.clear()
                self.board.bump_all()
                log.warning("applied_listener_failed", error=str(error))
                time.sleep(0.5)


_listeners: dict[tuple[int, str], AppliedListener] = {}
_listeners_lock = threading.Lock()


def namespace() -> str:
    return settings.STREAMGATE_NAMESPACE


def gateway_queue(cluster: str, name: str) -> str:
    """The Celery queue a gateway consumes beside its batch list (replication/batchqueue.py):
    apply_batch_task sent to that one gateway by any other sender."""
    return f"{namespace()}gw.{cluster}.{name}"


class RedisPresence(RedisLeases, RedisBatches):
    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self.client = client
        self.dirty, self.signal, self.acks = (
            f"{prefix}sg:{k}" for k in ("dirty", "signal", "acks")
        )
        self.prefix = prefix

    def _key(self, gateway: GatewayId) -> str:
        return f"{self.prefix}sg:gw:{gateway[0]}:{gateway[1]}"

    def beat(self, gateway: GatewayId, ttl: float, incarnation: str = "") -> None:
        self.client.set(self._key(gateway), incarnation, px=int(ttl * 1000))

    def forget(self, gateway: GatewayId) -> None:
        self.client.delete(self._key(gateway))

    def live(self, gateways: Iterable[GatewayId]) -> dict[GatewayId, str]:
        gateways = list(gateways)
        if not gateways:
            return {}
        values = self.client.mget([self._key(g) for g in gateways])
        return {g: v.decode() for g, v in zip(gateways, values, strict=True) if v is not None}

    def wake(self, streams: Iterable[str]) -> None:
        streams = list(streams)
        if streams:
            # One slot per replicator: a thousand produces between two rounds wake it once.
            self._wake_replicators(streams, SIGNAL_TTL)

    def _inbox(self, inbox: str) -> str:
        return f"{self.acks}:{inbox}" if inbox else self.acks

    def _own(self, key: str, inbox: str) -> str:
        return f"{key}:{inbox}" if inbox else key

    def ack(self, result: dict[str, Any], inbox: str = "") -> None:
        self.done([result], inbox, [], [])

    def applied(self, links: Iterable[int]) -> None:
        self.done([], "", list(links), [])

    def done(self, acks: list[dict[str, Any]], inbox: str, applied: list[int],
             wake: list[str]) -> None:
        pipe = self.client.pipeline(transaction=False)
        if wake:
            self._wake_replicators(wake, SIGNAL_TTL, client=pipe)
        for link in applied:
            pipe.publish(f"{self.prefix}sg:applied:{link}", 1)
        if acks:
            key = self._inbox(inbox)
            pipe.rpush(key, *(json.dumps(a) for a in acks)).expire(key, SIGNAL_TTL)
        pipe.execute()

    def applied_board(self) -> AppliedBoard:
        pattern = f"{self.prefix}sg:applied:*"
        key = (os.getpid(), pattern)  # a forked child needs a listener thread of its own
        with _listeners_lock:
            listener = _listeners.get(key)
            if listener is None:
                listener = _listeners[key] = AppliedListener(self.client, pattern)
        # Subscribed before the first read of the replica's ends, or a notification could
        # fall between the two; if Redis is slow to answer, the waiter's re-checks cover it.
        listener.ready.wait(1.0)
        return listener.board

    def wait(self, timeout: float, inbox: str = "",
             sending: Iterable[tuple[GatewayId, dict[str, Any]]] = ()) -> Signals:
        """Also queues the batches `sending` (send_batches) before waiting, in the same
        round trip."""
        signals, acks = Signals(), self._inbox(inbox)
        signal, dirty = self._own(self.signal, inbox), self._own(self.dirty, inbox)
        # One round trip whatever comes: the wake-ups' streams and the rest of the
        # acknowledgements are popped right after the blocking pop returns. Streams popped
        # with acknowledgements leave their signal behind: the next wait returns at once,
        # with nothing new.
        pipe, sending = self.client.pipeline(transaction=False), list(sending)
        self.queue_batches(pipe, sending, SIGNAL_TTL)
        if timeout >= REDIS_TICK:
            pipe.blmpop(timeout, 2, signal, acks, direction="LEFT", count=10_000)
            popped, streams, acked = pipe.spop(dirty, 100_000).lpop(acks, 10_000).execute()[-3:]
        else:
            popped, streams, acked = self._poll(pipe, time.monotonic() + timeout, signal, dirty,
                                                acks, at_once=bool(sending))
        if popped and popped[0].decode() == acks:
            acked = [*popped[1], *(acked or ())]
        signals.acks = [json.loads(a) for a in acked or ()]
        signals.streams = {s.decode() for s in streams or ()}
        return signals

    def _poll(self, pipe: Any, deadline: float, signal: str, dirty: str, acks: str, *,
              at_once: bool) -> tuple[Any, Any, Any]:
        """A wait shorter than Redis's timer tick (the linger): Redis times a blocking pop out
        only at its next tick, so a BLMPOP of 2 ms returned after up to 100 ms. Sleeps here
        instead and pops without blocking, every POLL_SECONDS until something comes or the
        time is up; the pipeline goes at once when it carries batches (`at_once`)."""
        while True:
            if (left := deadline - time.monotonic()) > 0 and not at_once:
                time.sleep(min(left, POLL_SECONDS))
            at_once = False
            pipe.lmpop(2, signal, acks, direction="LEFT", count=10_000)
            popped, streams, acked = pipe.spop(dirty, 100_000).lpop(acks, 10_000).execute()[-3:]
            if popped or streams or acked or deadline <= time.monotonic():
                return popped, streams, acked
            pipe = self.client.pipeline(transaction=False)


class LocalPresence(LocalLeases):
    """Embedded mode: the same signals, in this process."""

    def __init__(self) -> None:
        super().__init__()
        self._cond = threading.Condition()
        self._expiry: dict[GatewayId, tuple[float, str]] = {}
        self._acks: dict[str, list[dict[str, Any]]] = {}
        self._dirty: dict[str, set[str]] = {}  # per live replicator
        self._board = AppliedBoard()

    def beat(self, gateway: GatewayId, ttl: float, incarnation: str = "") -> None:
        with self._cond:
            self._expiry[gateway] = (time.monotonic() + ttl, incarnation)

    def forget(self, gateway: GatewayId) -> None:
        with self._cond:
            self._expiry.pop(gateway, None)

    def live(self, gateways: Iterable[GatewayId]) -> dict[GatewayId, str]:
        now = time.monotonic()
        with self._cond:
            found = {g: self._expiry.get(g, (0.0, "")) for g in gateways}
        return {g: incarnation for g, (until, incarnation) in found.items() if until > now}

    def wake(self, streams: Iterable[str]) -> None:
        streams = set(streams)
        live = self._live_replicators()
        with self._cond:
            for replicator in live:
                self._dirty.setdefault(replicator, set()).update(streams)
            self._cond.notify_all()

    def ack(self, result: dict[str, Any], inbox: str = "") -> None:
        with self._cond:
            self._acks.setdefault(inbox, []).append(result)
            self._cond.notify_all()

    def wait(self, timeout: float, inbox: str = "") -> Signals:
        with self._cond:
            if not self._acks.get(inbox) and not self._dirty.get(inbox):
                self._cond.wait(timeout)
            return Signals(self._acks.pop(inbox, []), self._dirty.pop(inbox, set()))

    def applied(self, links: Iterable[int]) -> None:
        self._board.bump(str(link) for link in links)

    def done(self, acks: list[dict[str, Any]], inbox: str, applied: list[int],
             wake: list[str]) -> None:
        if wake:
            self.wake(wake)
        self.applied(applied)
        for result in acks:
            self.ack(result, inbox)

    def applied_board(self) -> AppliedBoard:
        return self._board

    def links_changed(self) -> None:
        pass  # embedded gateways read their link for every batch


_local = LocalPresence()


@cache
def _client(url: str) -> redis.Redis:
    # A connect timeout, so a produce never hangs on an unreachable Redis (it logs and goes on);
    # no read timeout, which would cut the replicator's long BLMPOP.
    return redis.Redis.from_url(url, health_check_interval=30, socket_connect_timeout=2)


def presence() -> Presence:
    """Redis when REDIS_URL is set (production, tests), this process's memory otherwise."""
    if settings.REDIS_URL:
        return RedisPresence(_client(settings.REDIS_URL), namespace())
    return _local
