"""What a client may take of the listener before and after sign-in (docs/security.md, the
settings in portal/settings.py), and the refusals counted for /metrics through the shared
cache (replication/counters.py), since the listener and the portal never import each other.

Kafka's names: sasl.server.max.receive.size (frames before sign-in), max.connections.per.ip,
connection.failed.authentication.delay.ms; the sign-in and frame deadlines have none (Kafka
leans on connections.max.idle.ms alone, which a client trickling a byte at a time defeats).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import structlog
from django.conf import settings
from django.core.cache import cache

from broker.errors import CloseConnection
from replication.counters import count_refusal

log = structlog.get_logger(__name__)
FAILED_SIGN_IN_DELAY = 0.1  # seconds, Kafka's connection.failed.authentication.delay.ms


class Refused(CloseConnection):
    """The connection is closed for going past a limit; `reason` is the /metrics label."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Limits:
    preauth_bytes: int
    auth_seconds: float
    frame_seconds: float
    connections_per_ip: int

    @classmethod
    def from_settings(cls) -> Limits:
        return cls(settings.KAFKA_MAX_PREAUTH_BYTES, settings.KAFKA_AUTH_SECONDS,
                   settings.KAFKA_FRAME_SECONDS, settings.KAFKA_CONNECTIONS_PER_IP)


class ConnectionGate:
    """Open connections per client address: one past the limit is closed at once."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open: Counter[str] = Counter()

    def admit(self, address: str) -> bool:
        if self.open[address] >= self.limit:
            return False
        self.open[address] += 1
        return True

    def release(self, address: str) -> None:
        self.open[address] -= 1
        if self.open[address] <= 0:
            del self.open[address]


def address_of(peer: str) -> str:
    """The client address of a session's `host:port` peer."""
    return peer.rpartition(":")[0] or peer


def _failures_key(address: str) -> str:
    return f"kafka-sasl-failures:{address}"


def sign_in_blocked(address: str) -> bool:
    """Whether `address` has failed SASL sign-in too often lately (the shared cache, so every
    listener process sees every failure); blocking, for the thread pool. Without the cache
    (Redis down) sign-ins go on, unthrottled, as the portal's throttles fail open."""
    try:
        blocked = cache.get(_failures_key(address), 0) >= settings.KAFKA_SASL_FAILURE_LIMIT
    except Exception as error:
        log.warning("sasl_throttle_unavailable", error=str(error))
        return False
    if blocked:
        count_refusal("sasl_throttled")
    return blocked


def sign_in_failed(address: str) -> None:
    key = _failures_key(address)
    try:
        cache.add(key, 0, timeout=settings.KAFKA_SASL_FAILURE_WINDOW)
        cache.incr(key)
    except Exception as error:  # the key expired in between, or no cache: one failure lost
        log.warning("sasl_failure_count_failed", error=str(error))
    count_refusal("sasl_failed")
