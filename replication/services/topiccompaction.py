"""Per-topic compaction settings (issue 31): Kafka applications (quixstreams, faust, Kafka
Streams) create compacted changelog topics beside delete-policy topics in one stream, so a topic
may override its stream's -compact, -mincompactionlag, -deleteretention and
-mincleanabledirtyratio. Every interface (CLI, /rest, the API, Kafka's CreateTopics and
AlterConfigs) passes its values here: `-cleanuppolicy stream` and -1 go back to the stream's."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from replication.errors import InvalidInput
from replication.models import CleanupPolicy, Stream, Topic

COMPACTION = ("cleanuppolicy", "mincompactionlag", "deleteretention", "mincleanabledirtyratio")
INHERIT_POLICY, INHERIT = "stream", -1
WHOLE_NUMBER = re.compile(r"[+-]?[0-9]+")  # ASCII digits only: int() also takes "1_000"
MAX_MILLIS = 2**63 - 1


def clean_policy(value: str, *, field: str = "cleanuppolicy") -> str:
    """A cleanup.policy as stored ("" for the stream's), its items in Kafka's order."""
    items = sorted(item.strip() for item in value.split(",") if item.strip())
    policy = ",".join(items)
    if policy == INHERIT_POLICY:
        return ""
    if policy not in CleanupPolicy.values:
        known = ", ".join(sorted(CleanupPolicy.values))
        raise InvalidInput(f"-cleanuppolicy {value!r} is not one of {known}, or "
                           f"{INHERIT_POLICY} for the stream's setting", field=field)
    return policy


def _millis(name: str, value: Any) -> int | None:
    if value == INHERIT:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**63:
        raise InvalidInput(f"-{name} must be a whole number of milliseconds, 0 or more, or -1 "
                           "for the stream's setting", field=name)
    return value


def _ratio(value: Any) -> float | None:
    if value == INHERIT:
        return None
    if (not isinstance(value, int | float) or isinstance(value, bool)
            or not 0 <= value <= 1):
        raise InvalidInput("-mincleanabledirtyratio must be a number from 0 to 1 (the share "
                           "of a partition not yet compacted before compaction runs), or -1 "
                           "for the stream's setting", field="mincleanabledirtyratio")
    return float(value)


def compaction_overrides(options: Mapping[str, Any]) -> dict[str, Any]:
    """The Topic fields the options set (None: back to the stream's), those given only."""
    out: dict[str, Any] = {}
    if (policy := options.get("cleanuppolicy")) is not None:
        out["cleanuppolicy"] = clean_policy(policy)
    for name in ("mincompactionlag", "deleteretention"):
        if (value := options.get(name)) is not None:
            out[name] = _millis(name, value)
    if (ratio := options.get("mincleanabledirtyratio")) is not None:
        out["mincleanabledirtyratio"] = _ratio(ratio)
    return out


def compaction_typed(typed: Mapping[str, str]) -> dict[str, Any]:
    """The compaction options a form typed as text (blank: not given) as the CLI reads them,
    refused in the CLI's words (`stream topic create|edit`, portal/rest/options.py), for
    compaction_overrides to check as every interface's."""
    out: dict[str, Any] = {}
    if policy := typed.get("cleanuppolicy", "").strip():
        known = (*CleanupPolicy.values, INHERIT_POLICY)
        if policy.lower() not in known:
            raise InvalidInput(f"-cleanuppolicy {policy!r} is not one of {', '.join(known)}",
                               field="cleanuppolicy")
        out["cleanuppolicy"] = policy.lower()
    for name in ("mincompactionlag", "deleteretention"):
        if text := typed.get(name, "").strip():
            if not WHOLE_NUMBER.fullmatch(text):
                raise InvalidInput(f"-{name} {text!r} is not a whole number", field=name)
            if not INHERIT <= int(text) <= MAX_MILLIS:
                raise InvalidInput(f"-{name} {int(text)} is out of range: give {INHERIT} to "
                                   f"{MAX_MILLIS}", field=name)
            out[name] = int(text)
    if text := typed.get("mincleanabledirtyratio", "").strip():
        try:
            ratio = float(text)
        except ValueError:
            ratio = -2.0
        if ratio != INHERIT and not 0 <= ratio <= 1:
            raise InvalidInput(f"-mincleanabledirtyratio {text!r} is not a number from 0 to 1",
                               field="mincleanabledirtyratio")
        out["mincleanabledirtyratio"] = ratio
    return out


def origin_topics(stream: Stream) -> dict[str, Topic]:
    """Each topic of the stream as its origin has it (itself at its origin): a replica's copy
    is compacted, and kept from its stream's ttl, by the origin topic's policy, so the copies
    end with the same latest value per key."""
    topics = list(stream.topics.values_list("name", "origin_uuid"))
    found = Topic.objects.select_related("stream").filter(
        stream__uuid__in={origin for _, origin in topics},
        name__in={name for name, _ in topics})
    by_origin = {(t.stream.uuid, t.name): t for t in found}
    return {name: t for name, origin in topics if (t := by_origin.get((origin, name)))}
