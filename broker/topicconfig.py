"""Kafka topic configs as streamgate has them: each one Kafka's name for a setting of the stream
(`retention.ms` is its -ttl, `compression.type` its -compression) or of the topic
(`message.timestamp.type` its -timestamptype), or a fixed fact of the deployment. Read for
DescribeConfigs; mapped back onto those settings for AlterConfigs, IncrementalAlterConfigs and
CreateTopics, each refused with the reason when it asks for what cannot be (every accepted
config has its effect, invariant 8)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from replication.errors import InvalidInput
from replication.models import Stream, TimestampType, Topic

COMPRESSION = {"off": "uncompressed", "lz4": "lz4", "zlib": "gzip", "lzf": "lzf"}
TIMESTAMP = {TimestampType.CREATETIME: "CreateTime", TimestampType.LOGAPPENDTIME: "LogAppendTime"}
DOCS = {
    "retention.ms": "the stream's -ttl in milliseconds (-1: kept forever); setting it on a "
                    "topic sets it for every topic of the stream",
    "compression.type": "the stream's -compression; setting it on a topic sets it for every "
                        "topic of the stream",
    "message.timestamp.type": "the topic's -timestamptype",
    "max.message.bytes": "the largest message the listener accepts (STREAMGATE_MAX_MESSAGE_BYTES)",
    "cleanup.policy": "the stream's -compact (compact: the latest message per key kept, "
                      "and -ttl 0; compact,delete: with the stream's -ttl; delete: no "
                      "compaction); setting it on a topic sets it for every topic of the stream",
    "min.compaction.lag.ms": "the stream's -mincompactionlag; setting it on a topic sets it "
                             "for every topic of the stream",
    "delete.retention.ms": "the stream's -deleteretention; setting it on a topic sets it for "
                           "every topic of the stream",
    "min.cleanable.dirty.ratio": "the stream's -mincleanabledirtyratio; setting it on a topic "
                                 "sets it for every topic of the stream",
}
# Kafka's per-topic configs that are a stream's settings here (MapR-ES compacts per stream).
STREAM_WIDE = {"retention.ms": "ttl", "compression.type": "compression",
               "cleanup.policy": "compact", "min.compaction.lag.ms": "mincompactionlag",
               "delete.retention.ms": "deleteretention",
               "min.cleanable.dirty.ratio": "mincleanabledirtyratio"}
SETTABLE = {*STREAM_WIDE, "message.timestamp.type"}
POLICIES = ("compact", "compact,delete", "delete")
# Kafka 3.x ignores message.format.version (KIP-724: records stay in the format v2 the clients
# send); it is accepted, as Kafka 3.x accepts it, when it names a Kafka version.
IGNORED = {"message.format.version"}
KAFKA_VERSION = re.compile(r"\d+\.\d+(\.\d+)*(-IV\d+)?")
# DescribeConfigs' config_source values (Kafka's ConfigSource).
DYNAMIC_TOPIC, STATIC_BROKER, DEFAULT = 1, 4, 5


def topic_configs(stream: Stream, topic: Topic | None) -> dict[str, str]:
    kind = topic.timestamptype if topic else stream.defaulttimestamptype
    return {
        "retention.ms": str(stream.ttl * 1000 if stream.ttl else -1),
        "compression.type": COMPRESSION.get(stream.compression, stream.compression),
        "message.timestamp.type": TIMESTAMP[TimestampType(kind)],
        "max.message.bytes": str(settings.MAX_MESSAGE_BYTES),
        "cleanup.policy": _policy(stream),
        "min.compaction.lag.ms": str(stream.mincompactionlag),
        "delete.retention.ms": str(stream.deleteretention),
        "min.cleanable.dirty.ratio": _ratio(stream.mincleanabledirtyratio),
    }


def _policy(stream: Stream) -> str:
    if not stream.compact:
        return "delete"
    return "compact,delete" if stream.ttl else "compact"


def _ratio(value: float) -> str:
    return repr(float(value))


def default_configs(stream: Stream) -> dict[str, str]:
    """What AlterConfigs reverts an omitted config to and IncrementalAlterConfigs' DELETE sets:
    a new stream's ttl and compression, the stream's default timestamp type."""
    fields = ("ttl", "compression", "compact", "mincompactionlag", "deleteretention",
              "mincleanabledirtyratio")
    fresh = Stream(defaulttimestamptype=stream.defaulttimestamptype,
                   **{name: Stream._meta.get_field(name).default for name in fields})
    return topic_configs(fresh, None)


def config_source(name: str, value: str, stream: Stream) -> tuple[int, bool]:
    """(config_source, read_only) of a config as DescribeConfigs reports it."""
    if name == "max.message.bytes":
        return STATIC_BROKER, True
    if name not in SETTABLE:
        return DEFAULT, True
    return (DEFAULT if default_configs(stream)[name] == value else DYNAMIC_TOPIC), False


@dataclass
class Settings:
    """What a set of topic configs asks of the stream (stream_edit's arguments) and of the
    topic (its -timestamptype), only where that differs from what they are."""

    stream: dict[str, Any] = field(default_factory=dict)
    timestamptype: str | None = None


def settings_for(stream: Stream, topic: Topic | None,
                 configs: dict[str, str | None]) -> Settings:
    """Map topic configs onto the stream's and the topic's settings; InvalidInput naming the
    reason for the first config that cannot be set as asked."""
    current = topic_configs(stream, topic)
    wanted = Settings()
    # cleanup.policy last, even unchanged: compact decides the ttl whatever retention.ms says.
    for name, value in sorted(configs.items(), key=lambda item: item[0] == "cleanup.policy"):
        if name == "cleanup.policy":
            wanted.stream.update(_policy_settings(stream, value, configs))
        elif name in IGNORED:
            _check_version(name, value)
        elif name not in current:
            raise InvalidInput(f"config {name} is not supported: topics here take "
                               f"{', '.join(sorted(current))}", field="configs")
        elif value == current[name]:
            continue
        elif name in STREAM_WIDE:
            wanted.stream[STREAM_WIDE[name]] = _stream_value(name, value or "")
        elif name == "message.timestamp.type":
            wanted.timestamptype = _timestamptype(value)
        else:
            raise InvalidInput(f"{name}={value} cannot be set: it is {DOCS[name]}, "
                               f"{current[name]}", field="configs")
    return wanted


def timestamptype_from(configs: dict[str, str | None], stream: Stream) -> str | None:
    """The topic's -timestamptype from CreateTopics configs; InvalidInput for a config the
    stream does not honour, naming the stream setting that decides it (a new topic does not
    change its stream)."""
    current = topic_configs(stream, None)
    for name in STREAM_WIDE:
        if name in configs and configs[name] != current[name]:
            raise InvalidInput(f"{name}={configs[name]} differs from {stream.path}'s "
                               f"{current[name]}: it is {DOCS[name]}; change the stream's "
                               "setting first, or leave it out", field="configs")
    return settings_for(stream, None, configs).timestamptype


def _check_version(name: str, value: str | None) -> None:
    if not KAFKA_VERSION.fullmatch(value or ""):
        raise InvalidInput(f"{name}={value} is not a Kafka version such as 3.0-IV1",
                           field="configs")


def _timestamptype(value: str | None) -> str:
    chosen = {v: k for k, v in TIMESTAMP.items()}.get(value or "")
    if chosen is None:
        raise InvalidInput(f"message.timestamp.type {value!r} is not CreateTime or "
                           "LogAppendTime", field="configs")
    return str(chosen)


def _policy_settings(stream: Stream, value: str | None,
                     configs: dict[str, str | None]) -> dict[str, Any]:
    """cleanup.policy as the stream's -compact (and its -ttl: a compact-only topic keeps
    messages until compaction removes them, Kafka's retention ignored)."""
    policy = ",".join(sorted(item.strip() for item in (value or "").split(",") if item.strip()))
    if policy not in POLICIES:
        raise InvalidInput(f"cleanup.policy {value!r} is not one of {', '.join(POLICIES)}",
                           field="configs")
    if policy == "delete":
        return {"compact": False} if stream.compact else {}
    if policy == "compact":
        return {"compact": True, "ttl": 0}
    if "retention.ms" in configs:  # compact,delete with the retention asked
        return {"compact": True}
    return {"compact": True, "ttl": stream.ttl or Stream._meta.get_field("ttl").default}


def _stream_value(name: str, value: str) -> Any:
    if name in ("min.compaction.lag.ms", "delete.retention.ms"):
        return _millis(name, value)
    if name == "min.cleanable.dirty.ratio":
        return _dirty_ratio(value)
    if name == "compression.type":
        chosen = {v: k for k, v in COMPRESSION.items()}.get(value)
        if chosen is None:
            raise InvalidInput(f"compression.type {value!r} is not one a stream keeps: give "
                               f"{', '.join(COMPRESSION.values())}", field="configs")
        return chosen
    try:
        ms = int(value)
    except ValueError:
        ms = 0
    if ms == -1:
        return 0  # a ttl of 0 keeps messages forever (MapR's rule)
    if ms <= 0 or ms % 1000:
        raise InvalidInput(f"retention.ms={value}: a stream's -ttl is whole seconds; give a "
                           "positive multiple of 1000, or -1 to keep messages forever",
                           field="configs")
    return ms // 1000


def _millis(name: str, value: str) -> int:
    try:
        ms = int(value)
    except ValueError:
        ms = -1
    if ms < 0:
        raise InvalidInput(f"{name}={value}: give a whole number of milliseconds, 0 or more",
                           field="configs")
    return ms


def _dirty_ratio(value: str) -> float:
    try:
        ratio = float(value)
    except ValueError:
        ratio = -1.0
    if not 0 <= ratio <= 1:
        raise InvalidInput(f"min.cleanable.dirty.ratio={value}: give a number from 0 to 1",
                           field="configs")
    return ratio


# DescribeConfigs' config_type (Kafka's ConfigType): LONG 5, INT 3, LIST 7, DOUBLE 6.
CONFIG_TYPES = {"retention.ms": 5, "max.message.bytes": 3, "cleanup.policy": 7,
                "min.compaction.lag.ms": 5, "delete.retention.ms": 5,
                "min.cleanable.dirty.ratio": 6}  # else STRING


def config_entries(stream: Stream, configs: dict[str, str],
                   documented: bool = False) -> list[dict[str, Any]]:
    """Configs as DescribeConfigs and CreateTopics answer them."""
    entries = []
    for name, value in configs.items():
        source, read_only = config_source(name, value, stream)
        entries.append({"name": name, "value": value, "read_only": read_only,
                        "config_source": source, "is_default": source == DEFAULT,
                        "is_sensitive": False, "config_type": CONFIG_TYPES.get(name, 2),
                        "documentation": DOCS[name] if documented else None})
    return entries
