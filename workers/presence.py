"""Gateway presence, wake-ups and acknowledgements: the engine's signals between processes.

In production they live in Redis (DESIGN.md: Redis for gateway presence):
- a gateway is live while its key `sg:gw:<cluster>:<name>` exists; it refreshes the key well
  within its TTL, so a killed gateway reads DOWN a TTL later without anyone noticing its death.
  The key holds the gateway process's incarnation, so a restarted gateway is told apart from
  the one that stopped answering;
- a wake-up adds a stream to the `sg:dirty` set and pushes a one-slot `sg:signal` list;
- a gateway acknowledges a batch by pushing its result on the sender's `sg:acks:<inbox>`, so
  two replicators (say, while one is being replaced) never take each other's acknowledgements.
The replicator blocks on both lists with one BLPOP, so an idle deployment costs one blocked
connection, and a burst of produces costs one signal. Sets and lists rather than pub/sub: a
wake-up sent while the replicator restarts is still there when it comes back (or expires,
and the start-up sweep covers it).

Embedded mode has no Redis: `LocalPresence` keeps the same state in process memory, where
the replicator thread and the in-process gateways live.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Protocol

import redis
from django.conf import settings

GatewayId = tuple[str, str]  # (cluster name, gateway name)
SIGNAL_TTL = 300  # seconds; a replicator that is down that long re-plans everything anyway


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

    def ack(self, result: dict[str, Any], inbox: str = "") -> None: ...

    def wait(self, timeout: float, inbox: str = "") -> Signals: ...


def namespace() -> str:
    return settings.STREAMGATE_NAMESPACE


def gateway_queue(cluster: str, name: str) -> str:
    """The Celery queue a gateway consumes: one per gateway, so a batch goes to the one chosen."""
    return f"{namespace()}gw.{cluster}.{name}"


class RedisPresence:
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
        if not streams:
            return
        pipe = self.client.pipeline(transaction=False)
        pipe.sadd(self.dirty, *streams).expire(self.dirty, SIGNAL_TTL)
        # One slot: a thousand produces between two replicator rounds wake it once.
        pipe.lpush(self.signal, 1).ltrim(self.signal, 0, 0).expire(self.signal, SIGNAL_TTL)
        pipe.execute()

    def _inbox(self, inbox: str) -> str:
        return f"{self.acks}:{inbox}" if inbox else self.acks

    def ack(self, result: dict[str, Any], inbox: str = "") -> None:
        key = self._inbox(inbox)
        pipe = self.client.pipeline(transaction=False)
        pipe.rpush(key, json.dumps(result)).expire(key, SIGNAL_TTL)
        pipe.execute()

    def wait(self, timeout: float, inbox: str = "") -> Signals:
        signals, acks = Signals(), self._inbox(inbox)
        popped = self.client.blpop([acks, self.signal], timeout=max(timeout, 0.01))
        if popped and popped[0].decode() == acks:
            signals.acks.append(json.loads(popped[1]))
        pipe = self.client.pipeline(transaction=False)
        pipe.lpop(acks, 10_000).spop(self.dirty, 100_000).delete(self.signal)
        acks, dirty, _ = pipe.execute()
        signals.acks += [json.loads(a) for a in acks or ()]
        signals.streams = {s.decode() for s in dirty or ()}
        return signals


class LocalPresence:
    """Embedded mode: the same signals, in this process."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._expiry: dict[GatewayId, tuple[float, str]] = {}
        self._acks: dict[str, list[dict[str, Any]]] = {}
        self._dirty: set[str] = set()

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
        with self._cond:
            self._dirty.update(streams)
            self._cond.notify_all()

    def ack(self, result: dict[str, Any], inbox: str = "") -> None:
        with self._cond:
            self._acks.setdefault(inbox, []).append(result)
            self._cond.notify_all()

    def wait(self, timeout: float, inbox: str = "") -> Signals:
        with self._cond:
            if not self._acks.get(inbox) and not self._dirty:
                self._cond.wait(timeout)
            signals = Signals(self._acks.pop(inbox, []), self._dirty)
            self._dirty = set()
            return signals


_local = LocalPresence()


@cache
def _client(url: str) -> redis.Redis:
    # A connect timeout, so a produce never hangs on an unreachable Redis (it logs and goes on);
    # no read timeout, which would cut the replicator's long BLPOP.
    return redis.Redis.from_url(url, health_check_interval=30, socket_connect_timeout=2)


def presence() -> Presence:
    """Redis when REDIS_URL is set (production, tests), this process's memory otherwise."""
    if settings.REDIS_URL:
        return RedisPresence(_client(settings.REDIS_URL), namespace())
    return _local
