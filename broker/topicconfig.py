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
from replication.services.topiccompaction import INHERIT, INHERIT_POLICY, clean_policy
from replication.services.topicflush import KAFKA_DEFAULT, LOWEST

COMPRESSION = {"off": "uncompressed", "lz4": "lz4", "zlib": "gzip", "lzf": "lzf"}
TIMESTAMP = {TimestampType.CREATETIME: "CreateTime", TimestampType.LOGAPPENDTIME: "LogAppendTime"}
DOCS = {
    "retention.ms": "the stream's -ttl in milliseconds (-1: kept forever); setting it on a "
                    "topic sets it for every topic of the stream",
    "compression.type": "the stream's -compression; setting it on a topic sets it for every "
                        "topic of the stream",
    "message.timestamp.type": "the topic's -timestamptype",
    "retention.bytes": "-1: no size limit (a stream's retention is its -ttl; quota and plan "
                       "limits bound its size)",
    "max.message.bytes": "the largest message the listener accepts (STREAMGATE_MAX_MESSAGE_BYTES)",
    "cleanup.policy": "the topic's -cleanuppolicy (compact: the latest message per key kept, "
                      "the stream's -ttl not applied; compact,delete: both; delete: no "
                      "compaction); without one, the stream's -compact (compact,delete when "
                      "it has a -ttl)",
    "min.compaction.lag.ms": "the topic's -mincompactionlag, else the stream's",
    "delete.retention.ms": "the topic's -deleteretention, else the stream's",
    "min.cleanable.dirty.ratio": "the topic's -mincleanabledirtyratio, else the stream's",
    "flush.ms": "kept as set and always more than honoured: the store commits every write to "
                "disk before acknowledging it",
    "flush.messages": "kept as set and always more than honoured: the store commits every "
                      "write to disk before acknowledging it",
}
# Kafka's per-topic configs that are a stream's settings here.
STREAM_WIDE = {"retention.ms": "ttl", "compression.type": "compression"}
# Compaction configs a topic overrides (its stream's settings when it has none: issue 31).
TOPIC_OVERRIDES = {"cleanup.policy": "cleanuppolicy", "min.compaction.lag.ms": "mincompactionlag",
                   "delete.retention.ms": "deleteretention",
                   "min.cleanable.dirty.ratio": "mincleanabledirtyratio",
                   # kept on the topic, always honoured (replication/services/topicflush.py)
                   "flush.ms": "flushms", "flush.messages": "flushmessages"}
SETTABLE = {*STREAM_WIDE, *TOPIC_OVERRIDES, "message.timestamp.type"}
# Kafka 3.x ignores message.format.version (KIP-724: records stay in the format v2 the clients
# send); it is accepted, as Kafka 3.x accepts it, when it names a Kafka version.
IGNORED = {"message.format.version"}
KAFKA_VERSION = re.compile(r"\d+\.\d+(\.\d+)*(-IV\d+)?")
# DescribeConfigs' config_source values (Kafka's ConfigSource): a topic's override is
# DYNAMIC_TOPIC, a stream's setting other than a new stream's DYNAMIC_DEFAULT_BROKER (the
# default its topics take, as a broker's is in Kafka).
DYNAMIC_TOPIC, DYNAMIC_DEFAULT_BROKER, STATIC_BROKER, DEFAULT = 1, 3, 4, 5


def topic_configs(stream: Stream, topic: Topic | None) -> dict[str, str]:
    kind = topic.timestamptype if topic else stream.defaulttimestamptype
    lag, retention, ratio = (stream.mincompactionlag, stream.deleteretention,
                             stream.mincleanabledirtyratio)
    if topic is not None:
        topic.stream = stream  # the stream as read now, not a cached copy
        lag, retention, ratio = topic.compaction()
    flushes = [KAFKA_DEFAULT if value is None else value
               for value in ((topic.flushms, topic.flushmessages) if topic else (None, None))]
    return {
        "retention.ms": str(stream.ttl * 1000 if stream.ttl else -1),
        "retention.bytes": "-1",
        "compression.type": COMPRESSION.get(stream.compression, stream.compression),
        "message.timestamp.type": TIMESTAMP[TimestampType(kind)],
        "max.message.bytes": str(settings.MAX_MESSAGE_BYTES),
        "cleanup.policy": topic.policy if topic else stream.cleanuppolicy,
        "min.compaction.lag.ms": str(lag),
        "delete.retention.ms": str(retention),
        "min.cleanable.dirty.ratio": _ratio(ratio),
        "flush.ms": str(flushes[0]),
        "flush.messages": str(flushes[1]),
    }


def _ratio(value: float) -> str:
    return repr(float(value))


def default_configs(stream: Stream) -> dict[str, str | None]:
    """What AlterConfigs reverts an omitted config to and IncrementalAlterConfigs' DELETE sets:
    a new stream's ttl and compression, the stream's default timestamp type, and for the
    compaction configs None: the topic's override dropped, the stream's setting in force."""
    fields = ("ttl", "compression")
    fresh = Stream(defaulttimestamptype=stream.defaulttimestamptype,
                   **{name: Stream._meta.get_field(name).default for name in fields})
    configs: dict[str, str | None] = dict(topic_configs(fresh, None))
    configs.update(dict.fromkeys(TOPIC_OVERRIDES))
    return configs


def _fresh_stream_configs() -> dict[str, str]:
    fields = ("ttl", "compression", "compact", "mincompactionlag", "deleteretention",
              "mincleanabledirtyratio")
    return topic_configs(Stream(**{n: Stream._meta.get_field(n).default for n in fields}), None)


def config_source(name: str, value: str, stream: Stream,
                  topic: Topic | None = None) -> tuple[int, bool]:
    """(config_source, read_only) of a config as DescribeConfigs reports it."""
    if name == "max.message.bytes":
        return STATIC_BROKER, True
    if name not in SETTABLE:
        return DEFAULT, True
    if name in TOPIC_OVERRIDES:
        field_ = TOPIC_OVERRIDES[name]
        if topic is not None and getattr(topic, field_) not in (None, ""):
            return DYNAMIC_TOPIC, False
        fresh = _fresh_stream_configs()[name]
        return (DEFAULT if topic_configs(stream, None)[name] == fresh
                else DYNAMIC_DEFAULT_BROKER), False
    return (DEFAULT if default_configs(stream)[name] == value else DYNAMIC_TOPIC), False


@dataclass
class Settings:
    """What a set of topic configs asks of the stream (stream_edit's arguments) and of the
    topic (its -timestamptype), only where that differs from what they are."""

    stream: dict[str, Any] = field(default_factory=dict)
    timestamptype: str | None = None
    topic: dict[str, Any] = field(default_factory=dict)  # topic_edit's compaction overrides


def settings_for(stream: Stream, topic: Topic | None,
                 configs: dict[str, str | None]) -> Settings:
    """Map topic configs onto the stream's and the topic's settings; InvalidInput naming the
    reason for the first config that cannot be set as asked."""
    current = topic_configs(stream, topic)
    wanted = Settings()
    for name, value in configs.items():
        if name in TOPIC_OVERRIDES:
            _override(wanted, topic, name, value, current[name])
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


def _override(wanted: Settings, topic: Topic | None, name: str, value: str | None,
              current: str) -> None:
    """A compaction config as the topic's override: None drops it, a value the topic has in
    force already changes nothing (an inherited one stays inherited)."""
    field_ = TOPIC_OVERRIDES[name]
    if value is None:
        if topic is not None and getattr(topic, field_) not in (None, ""):
            wanted.topic[field_] = INHERIT_POLICY if field_ == "cleanuppolicy" else INHERIT
        return
    if name == "cleanup.policy":
        wanted.topic[field_] = clean_policy(value, field="configs") or INHERIT_POLICY
        if wanted.topic[field_] == current and not (topic and topic.cleanuppolicy):
            del wanted.topic[field_]
    elif value != current:
        wanted.topic[field_] = _stream_value(name, value)


def create_settings(configs: dict[str, str | None], stream: Stream) -> Settings:
    """A new topic's settings from CreateTopics configs; InvalidInput for a config the stream
    does not honour, naming the stream setting that decides it (a new topic does not change
    its stream)."""
    current = topic_configs(stream, None)
    for name in STREAM_WIDE:
        if name in configs and configs[name] != current[name]:
            raise InvalidInput(f"{name}={configs[name]} differs from {stream.path}'s "
                               f"{current[name]}: it is {DOCS[name]}; change the stream's "
                               "setting first, or leave it out", field="configs")
    return settings_for(stream, None, configs)


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


def _stream_value(name: str, value: str) -> Any:
    if name in ("min.compaction.lag.ms", "delete.retention.ms"):
        return _millis(name, value)
    if name == "min.cleanable.dirty.ratio":
        return _dirty_ratio(value)
    if name in ("flush.ms", "flush.messages"):
        return _flush(name, value)
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


def _flush(name: str, value: str) -> int:
    lowest = LOWEST[TOPIC_OVERRIDES[name]]
    try:
        number = int(value)
    except ValueError:
        number = -1
    if not lowest <= number <= KAFKA_DEFAULT:
        raise InvalidInput(f"{name}={value}: give a whole number, {lowest} or more (every write "
                           "is committed to disk before it is acknowledged, whatever the value)",
                           field="configs")
    return number


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
CONFIG_TYPES = {"retention.ms": 5, "retention.bytes": 5, "max.message.bytes": 3,
                "cleanup.policy": 7,
                "min.compaction.lag.ms": 5, "delete.retention.ms": 5,
                "min.cleanable.dirty.ratio": 6, "flush.ms": 5,
                "flush.messages": 5}  # else STRING


def config_entries(stream: Stream, configs: dict[str, str], documented: bool = False,
                   topic: Topic | None = None) -> list[dict[str, Any]]:
    """Configs as DescribeConfigs and CreateTopics answer them."""
    entries = []
    for name, value in configs.items():
        source, read_only = config_source(name, value, stream, topic)
        entries.append({"name": name, "value": value, "read_only": read_only,
                        "config_source": source, "is_default": source == DEFAULT,
                        "is_sensitive": False, "config_type": CONFIG_TYPES.get(name, 2),
                        "documentation": DOCS[name] if documented else None})
    return entries
