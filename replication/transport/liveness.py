"""Which gateways are live. A gateway is live while its key `sg:gw:<cluster>:<name>` exists;
it refreshes the key well within its TTL, so a killed gateway reads DOWN a TTL later without
anyone noticing its death. The key holds the gateway process's incarnation, so a restarted
gateway is told apart from the one that stopped answering."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import Protocol

import redis

GatewayId = tuple[str, str]  # (cluster name, gateway name)


class GatewayLiveness(Protocol):
    def beat(self, gateway: GatewayId, ttl: float, incarnation: str = "") -> None: ...

    def forget(self, gateway: GatewayId) -> None: ...

    def live(self, gateways: Iterable[GatewayId]) -> dict[GatewayId, str]:
        """The live ones among `gateways`, each with its incarnation (which process beats)."""
        ...


class RedisLiveness:
    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self.client, self.prefix = client, prefix

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


class LocalLiveness:
    """Embedded mode: the in-process gateways' beats, in this process's memory."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._expiry: dict[GatewayId, tuple[float, str]] = {}

    def beat(self, gateway: GatewayId, ttl: float, incarnation: str = "") -> None:
        with self._lock:
            self._expiry[gateway] = (time.monotonic() + ttl, incarnation)

    def forget(self, gateway: GatewayId) -> None:
        with self._lock:
            self._expiry.pop(gateway, None)

    def live(self, gateways: Iterable[GatewayId]) -> dict[GatewayId, str]:
        now = time.monotonic()
        with self._lock:
            found = {g: self._expiry.get(g, (0.0, "")) for g in gateways}
        return {g: incarnation for g, (until, incarnation) in found.items() if until > now}
