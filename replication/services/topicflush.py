"""Kafka's flush.ms and flush.messages on a topic (issue 29): how long, and after how many
messages, a broker may hold written messages before forcing them to disk. The store commits
(fsyncs) every write before it is acknowledged, so any value is always more than honoured: a
topic keeps the value given, so that it is described as set (tools that compare what they set
with what they read see no drift), and it changes nothing else (invariant 8 is kept: the
promise the setting makes holds for every value)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from replication.errors import InvalidInput

FLUSH = ("flushms", "flushmessages")
INHERIT = -1
# Kafka 3.x's defaults (Long.MAX_VALUE): no forced flush beyond the operating system's.
KAFKA_DEFAULT = 2**63 - 1
LOWEST = {"flushms": 0, "flushmessages": 1}  # Kafka's own bounds (LogConfig)


def flush_overrides(options: Mapping[str, Any]) -> dict[str, Any]:
    """The Topic fields the options set (None: back to Kafka's default), those given only."""
    out: dict[str, Any] = {}
    for name in FLUSH:
        value = options.get(name)
        if value is None:
            continue
        if value == INHERIT:
            out[name] = None
            continue
        if (not isinstance(value, int) or isinstance(value, bool)
                or not LOWEST[name] <= value <= KAFKA_DEFAULT):
            unit = "milliseconds" if name == "flushms" else "messages"
            raise InvalidInput(f"-{name} must be a whole number of {unit}, {LOWEST[name]} or "
                               "more, or -1 for the default (every write is committed to disk "
                               "before it is acknowledged, whatever the value)", field=name)
        out[name] = value
    return out
