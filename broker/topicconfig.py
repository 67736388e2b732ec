"""Kafka topic configs as streamgate has them: read from the stream and topic (DescribeConfigs),
and checked when a client gives them to CreateTopics (every accepted config has its effect;
what the stream decides is refused unless it asks for what the stream already does)."""

from __future__ import annotations

from django.conf import settings

from replication.errors import InvalidInput
from replication.models import Stream, TimestampType, Topic

COMPRESSION = {"off": "uncompressed", "lz4": "lz4", "zlib": "gzip", "lzf": "lzf"}
TIMESTAMP = {TimestampType.CREATETIME: "CreateTime", TimestampType.LOGAPPENDTIME: "LogAppendTime"}
DOCS = {
    "retention.ms": "the stream's -ttl in milliseconds (-1: kept forever)",
    "compression.type": "the stream's -compression",
    "message.timestamp.type": "the topic's -timestamptype",
    "max.message.bytes": "the largest message the listener accepts",
    "cleanup.policy": "messages are deleted after the retention time; no compaction",
}


def topic_configs(stream: Stream, topic: Topic | None) -> dict[str, str]:
    kind = topic.timestamptype if topic else stream.defaulttimestamptype
    return {
        "retention.ms": str(stream.ttl * 1000 if stream.ttl else -1),
        "compression.type": COMPRESSION.get(stream.compression, stream.compression),
        "message.timestamp.type": TIMESTAMP[TimestampType(kind)],
        "max.message.bytes": str(settings.MAX_MESSAGE_BYTES),
        "cleanup.policy": "delete",
    }


def timestamptype_from(configs: dict[str, str | None], stream: Stream) -> str | None:
    """The topic's -timestamptype from CreateTopics configs; InvalidInput for a config the
    stream does not honour, naming the stream setting that decides it."""
    current = topic_configs(stream, None)
    chosen = None
    for name, value in configs.items():
        if name == "message.timestamp.type":
            chosen = {v: k for k, v in TIMESTAMP.items()}.get(value or "")
            if chosen is None:
                raise InvalidInput(f"message.timestamp.type {value!r} is not CreateTime or "
                                   "LogAppendTime", field="configs")
        elif name not in current:
            raise InvalidInput(f"config {name} is not supported: topics here take "
                               f"{', '.join(sorted(current))}", field="configs")
        elif value != current[name]:
            raise InvalidInput(f"{name}={value} differs from {stream.path}'s {current[name]}: "
                               f"it is {DOCS[name]}; change it with 'streamgate stream edit' "
                               "or leave it out", field="configs")
    return chosen
