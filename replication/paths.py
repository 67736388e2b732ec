"""Stream and topic paths as MapR writes them: `/mapr/<cluster>/<name...>` and
`/mapr/<cluster>/<name...>:<topic>`. Pure functions, no Django."""

from __future__ import annotations

import re
from dataclasses import dataclass

from replication.errors import InvalidInput

# Matched whole (fullmatch): `$` also matches before a final newline, which let `acme\n`
# through as a lookalike of `acme`.
SEGMENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
CLUSTER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
TOPIC_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,248}")
MAX_PATH = 1024
EXAMPLE = "/mapr/sanfrancisco/activity"


@dataclass(frozen=True)
class StreamPath:
    cluster: str
    name: str

    def __str__(self) -> str:
        return f"/mapr/{self.cluster}/{self.name}"


def parse_stream_path(text: str, *, field: str = "path") -> StreamPath:
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput(
            f"-{field} is required: give a stream path such as {EXAMPLE}", field=field
        )
    raw = text.strip()
    if len(raw) > MAX_PATH:
        raise InvalidInput(f"-{field} is longer than {MAX_PATH} characters", field=field)
    # The seeds themselves write `mapr/sanfrancisco/activity` without the leading slash once.
    parts = raw.lstrip("/").split("/")
    if len(parts) < 3 or parts[0] != "mapr":
        raise InvalidInput(
            f"invalid stream path {raw!r}: write it as /mapr/<cluster>/<stream>, e.g. {EXAMPLE}",
            field=field,
        )
    cluster, segments = parts[1], parts[2:]
    if not CLUSTER_NAME.fullmatch(cluster):
        raise InvalidInput(f"invalid cluster name {cluster!r} in path {raw!r}", field=field)
    for segment in segments:
        if not SEGMENT.fullmatch(segment) or segment in {".", ".."}:
            raise InvalidInput(
                f"invalid path segment {segment!r} in {raw!r}: use letters, digits, '_', '.' "
                "or '-', with no empty segments",
                field=field,
            )
    return StreamPath(cluster, "/".join(segments))


def validate_cluster_name(name: str, *, field: str = "name") -> str:
    if not isinstance(name, str) or not CLUSTER_NAME.fullmatch(name):
        raise InvalidInput(f"invalid cluster name {name!r}: use 1-63 letters, digits, '.', '_' "
                           "or '-', starting with a letter or digit", field=field)
    return name


def validate_topic_name(name: str, *, field: str = "topic") -> str:
    if not isinstance(name, str) or not TOPIC_NAME.fullmatch(name):
        raise InvalidInput(
            f"invalid topic name {name!r}: use 1-249 letters, digits, '_', '.' or '-'",
            field=field,
        )
    return name


def parse_topic_path(text: str, *, field: str = "topic") -> tuple[StreamPath, str]:
    stream, sep, topic = (text or "").rpartition(":")
    if not sep:
        raise InvalidInput(
            f"invalid topic path {text!r}: write it as {EXAMPLE}:<topic>", field=field
        )
    return parse_stream_path(stream, field=field), validate_topic_name(topic, field=field)
