"""Produce and consume counters for /metrics, kept in the shared cache (Redis in production) so
every web worker adds to the same totals and a scrape of any of them sees all traffic.

One INCRBY per figure per request (both in one round trip on Redis), never per message; a
cache outage costs the figures, never the produce or consume."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from uuid import UUID

import structlog
from django.core.cache import cache

from replication.engine.store import Message

log = structlog.get_logger(__name__)

# Replicated: what gateways applied to a stream as a replica (replication/services/apply.py).
PRODUCED, CONSUMED, REPLICATED = "produced", "consumed", "replicated"
DIRECTIONS = (PRODUCED, CONSUMED, REPLICATED)
FIGURES = ("messages", "bytes")


def _key(direction: str, figure: str, stream: UUID) -> str:
    return f"metrics:{direction}:{figure}:{stream}"


def count_traffic(*, direction: str, stream: UUID, messages: int, nbytes: int) -> None:
    if not messages:
        return
    amounts = {_key(direction, figure, stream): amount
               for figure, amount in zip(FIGURES, (messages, nbytes), strict=True)}
    try:
        _add(amounts)
    except Exception as error:
        log.warning("traffic_count_failed", direction=direction, error=str(error))


def _add(amounts: dict[str, int]) -> None:
    """Each amount added to its counter: in one round trip when the cache can (Redis,
    portal/cache.py), else one counter after the other."""
    incr_many = getattr(cache, "incr_many", None)
    if incr_many is not None:
        incr_many(amounts)
        return
    for key, amount in amounts.items():
        try:
            cache.incr(key, amount)
        except ValueError:  # first count of this stream: create the key, then add
            cache.add(key, 0, timeout=None)
            cache.incr(key, amount)


# Why the Kafka listener refused a connection or a batch (docs/security.md), for /metrics.
KAFKA_REFUSALS = ("connections_per_address", "frame_before_sign_in", "sign_in_timeout",
                  "frame_timeout", "sasl_failed", "sasl_throttled", "batch_too_large")


def _refusal_key(reason: str) -> str:
    return f"metrics:kafka_refused:{reason}"


def count_refusal(reason: str) -> None:
    """One more refusal of the Kafka listener; like the traffic counts, never its caller's
    failure."""
    try:
        _add({_refusal_key(reason): 1})
    except Exception as error:
        log.warning("refusal_count_failed", reason=reason, error=str(error))


def refusal_totals() -> dict[str, int]:
    found = cache.get_many([_refusal_key(r) for r in KAFKA_REFUSALS])
    return {r: int(found.get(_refusal_key(r), 0)) for r in KAFKA_REFUSALS}


def traffic_totals(direction: str, streams: Iterable[UUID]) -> dict[UUID, tuple[int, int]]:
    """(messages, bytes) counted per stream since the cache began."""
    streams = list(streams)
    keys = {_key(direction, figure, s): (s, figure) for s in streams for figure in FIGURES}
    found = cache.get_many(list(keys))
    totals: dict[UUID, dict[str, int]] = {s: {"messages": 0, "bytes": 0} for s in streams}
    for key, value in found.items():
        stream, figure = keys[key]
        totals[stream][figure] = int(value)
    return {s: (t["messages"], t["bytes"]) for s, t in totals.items()}


def count_consumed(*, stream: UUID, messages: Sequence[Message]) -> int:
    """Count the messages read; their bytes (keys and values)."""
    nbytes = sum(len(m.value or b"") + len(m.key or b"") for m in messages)
    count_traffic(direction=CONSUMED, stream=stream, messages=len(messages), nbytes=nbytes)
    return nbytes
