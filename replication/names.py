"""Topic names as clients write them, resolved once, behind the tenant choke point.

Three spellings reach a topic:
- MapR's `/mapr/<cluster>/<stream path>:<topic>`;
- a plain Kafka name (`orders`), in the default stream of the user's tenant on the cluster
  (replication.models.DefaultStream, or a listener's `-defaultstream` for a single-tenant site);
- the Kafka-legal spelling of a MapR name, for clients that accept only `[a-zA-Z0-9._-]`:
  `__mapr.` followed by the MapR name without its leading `/mapr/`, where `_` is an escape:
  `_s` is `/`, `_c` is `:` and `__` is `_`. `/mapr/c1/apps/orders:t_1` is
  `__mapr.c1_sapps_sorders_ct__1`. Kafka reserves names starting with `__` for itself, and a
  plain name starting with `__mapr.` is refused, so a name is never read two ways.
"""

from __future__ import annotations

from dataclasses import dataclass

from replication.errors import InvalidInput
from replication.paths import parse_topic_path, validate_topic_name

LEGAL_PREFIX = "__mapr."
_ESCAPES = {"s": "/", "c": ":", "_": "_"}
_UNESCAPES = {"/": "_s", ":": "_c", "_": "__"}


@dataclass(frozen=True)
class TopicName:
    """A client's topic name, parsed: `stream_path` None for a plain name."""

    client_name: str
    stream_path: str | None
    topic: str


def kafka_legal_name(stream_path: str, topic: str) -> str:
    """The Kafka-legal spelling of `<stream_path>:<topic>`."""
    text = f"{stream_path.removeprefix('/mapr/')}:{topic}"
    return LEGAL_PREFIX + "".join(_UNESCAPES.get(char, char) for char in text)


def _unescape(text: str, name: str) -> str:
    out, chars = [], iter(text)
    for char in chars:
        if char != "_":
            out.append(char)
            continue
        escaped = _ESCAPES.get(next(chars, ""))
        if escaped is None:
            raise InvalidInput(f"invalid topic name {name!r}: after {LEGAL_PREFIX} an '_' "
                               "must be followed by 's' (/), 'c' (:) or '_' (_)", field="topic")
        out.append(escaped)
    return "".join(out)


def parse_topic_name(name: str) -> TopicName:
    """Which spelling `name` is; InvalidInput naming the problem when it is none of them."""
    if not isinstance(name, str) or not name:
        raise InvalidInput("a topic name is required", field="topic")
    if name.startswith("/"):
        stream, topic = parse_topic_path(name)
        return TopicName(name, str(stream), topic)
    if name.startswith(LEGAL_PREFIX):
        stream, topic = parse_topic_path("/mapr/" + _unescape(name[len(LEGAL_PREFIX):], name))
        return TopicName(name, str(stream), topic)
    if name.startswith("__mapr"):
        raise InvalidInput(f"topic name {name!r} is reserved: names starting with __mapr "
                           f"spell MapR names ({LEGAL_PREFIX}<cluster>_s<stream>_c<topic>)",
                           field="topic")
    return TopicName(name, None, validate_topic_name(name))
