"""Which Kafka listeners are live: presence as the gateways keep it (replication/transport/).

Each listener beats every KAFKA_HEARTBEAT_SECONDS into one Redis sorted set per scope (the
cluster it serves, or every cluster), its entry scored with the time it expires; the live
ones are the entries not yet expired. A listener that is killed stops beating and drops out a
TTL later; one that stops cleanly removes itself at once. Embedded mode (no Redis) keeps the
set in process memory. The beat also refreshes the listener's cached view, so Metadata reads
live nodes without any I/O.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from typing import Any

import structlog
from django.conf import settings

from replication.transport.client import namespace, redis_client
from workers.kafka.session import Listener, Node

log = structlog.get_logger(__name__)
_local: dict[str, dict[Node, float]] = {}
_local_lock = threading.Lock()


def _scope_key(scope: str) -> str:
    return f"{namespace()}sg:kafka:{scope}"


def _key(listener: Listener) -> str:
    return _scope_key(listener.cluster or "*")


def beat(listener: Listener, ttl: float) -> list[Node]:
    """Refresh this listener's entry; the live nodes of its scope."""
    now = time.time()
    if not settings.REDIS_URL:
        with _local_lock:
            entries = _local.setdefault(_key(listener), {})
            entries[listener.node] = now + ttl
            return sorted(n for n, until in entries.items() if until > now)
    key, member = _key(listener), json.dumps(list(vars(listener.node).values()))
    pipe = redis_client(settings.REDIS_URL).pipeline(transaction=False)
    pipe.zadd(key, {member: now + ttl}).zremrangebyscore(key, "-inf", now)
    pipe.expire(key, int(ttl * 10) + 1).zrangebyscore(key, now, "+inf")
    members = pipe.execute()[-1]
    return sorted(Node(*json.loads(m)) for m in members)


def live_listeners(scopes: list[str]) -> dict[str, list[Node]]:
    """The live listeners of each scope (a cluster name, or "*" for those serving every
    cluster), for the pages that tell users where to connect."""
    now = time.time()
    if not settings.REDIS_URL:
        with _local_lock:
            return {scope: sorted(n for n, until in _local.get(_scope_key(scope), {}).items()
                                  if until > now) for scope in scopes}
    pipe = redis_client(settings.REDIS_URL).pipeline(transaction=False)
    for scope in scopes:
        pipe.zrangebyscore(_scope_key(scope), now, "+inf")
    found = pipe.execute()
    return {scope: sorted(Node(*json.loads(m)) for m in members)
            for scope, members in zip(scopes, found, strict=True)}


def leave(listener: Listener) -> None:
    if not settings.REDIS_URL:
        with _local_lock:
            _local.get(_key(listener), {}).pop(listener.node, None)
        return
    member = json.dumps(list(vars(listener.node).values()))
    redis_client(settings.REDIS_URL).zrem(_key(listener), member)


class Beacon:
    """Beats for `listener` while the listener serves, keeping `listener.nodes` current."""

    def __init__(self, listener: Listener) -> None:
        self.listener = listener
        self.live: list[Node] = [listener.node]
        self.task: asyncio.Task | None = None
        listener.nodes = lambda: self.live

    async def _beat_once(self) -> None:
        ttl = settings.KAFKA_PRESENCE_TTL
        try:
            self.live = await asyncio.to_thread(beat, self.listener, ttl)
        except Exception as error:  # Redis restarting: serve alone until it is back
            log.warning("kafka_presence_failed", error=str(error))
            self.live = [self.listener.node]

    async def _loop(self) -> None:
        while True:
            await self._beat_once()
            await asyncio.sleep(settings.KAFKA_HEARTBEAT_SECONDS)

    async def __aenter__(self) -> Beacon:
        await self._beat_once()
        self.task = asyncio.create_task(self._loop())
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if self.task:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        with contextlib.suppress(Exception):
            await asyncio.to_thread(leave, self.listener)
