"""Resolving a client's topic name to a stream and topic, for every interface alike.

The stream is looked up through `Stream.objects.restrict(actor)` (the tenant choke point), so
another tenant's streams read as absent, whatever the spelling."""

from __future__ import annotations

from dataclasses import dataclass

import structlog
from django.contrib.auth.models import AbstractBaseUser

from replication import ace
from replication.errors import AlreadyExists, StreamgateError
from replication.models import Stream, Topic
from replication.names import TopicName, parse_topic_name
from replication.services.topics import topic_autocreate

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class ResolvedTopic:
    """A topic as a client named it: `topic` is its name inside `stream`, `client_name` the
    name to answer with; `record` the Topic row (None: the stream has no such topic yet)."""

    stream: Stream
    topic: str
    client_name: str
    record: Topic | None

    @property
    def partitions(self) -> int:
        return self.record.partitions if self.record else 0


def _visible_stream(actor: AbstractBaseUser, path: str, cluster: str | None) -> Stream | None:
    streams = Stream.objects.restrict(actor).select_related("cluster", "tenant")
    if cluster is not None:
        streams = streams.filter(cluster__name=cluster)
    return streams.filter(path=path).first()


def topic_resolve(
    *,
    actor: AbstractBaseUser,
    name: str,
    cluster: str | None = None,
    default_stream: str | None = None,
    create: bool = False,
) -> ResolvedTopic | None:
    """The stream and topic `name` means to `actor`; None when the name is malformed, the
    stream is invisible (another tenant's, another cluster's) or, unless `create` and the
    stream allows autocreate, the topic does not exist."""
    try:
        parsed = parse_topic_name(name)
    except StreamgateError:
        return None
    path = parsed.stream_path or default_stream
    if path is None:
        return None
    stream = _visible_stream(actor, path, cluster)
    if stream is None:
        return None
    record = stream.topics.filter(name=parsed.topic).first()
    if record is None and create:
        record = _autocreate(actor, stream, parsed)
    if record is None:
        return None
    return ResolvedTopic(stream, parsed.topic, name, record)


def _autocreate(actor: AbstractBaseUser, stream: Stream, parsed: TopicName) -> Topic | None:
    """Autocreate as a producer's first write does: the stream allows it, and the user may
    write to it or create topics in it (auto-creation is no side door around the ACEs)."""
    if not stream.autocreate:
        return None
    if not (stream.allows(actor, "produceperm") or stream.allows(actor, "topicperm")):
        return None
    try:
        return topic_autocreate(stream=stream, name=parsed.topic)
    except AlreadyExists:
        return stream.topics.filter(name=parsed.topic).first()


def topic_listing(
    *,
    actor: AbstractBaseUser,
    cluster: str | None = None,
    default_stream: str | None = None,
    perms: tuple[str, ...] = ("produceperm", "consumeperm", "topicperm"),
) -> list[ResolvedTopic]:
    """Every topic `actor` sees and holds one of `perms` on; named plainly in the default
    stream, by MapR name elsewhere, so each topic is listed once."""
    topics = Topic.objects.restrict(actor).select_related("stream__cluster", "stream__tenant")
    if cluster is not None:
        topics = topics.filter(stream__cluster__name=cluster)
    allowed: dict[int, bool] = {}
    listing = []
    for record in topics.order_by("stream__path", "name"):
        stream = record.stream
        if stream.pk not in allowed:
            identity = stream.identity_of(actor)
            allowed[stream.pk] = any(ace.allows(getattr(stream, p), identity) for p in perms)
        if allowed[stream.pk]:
            plain = stream.path == default_stream
            name = record.name if plain else f"{stream.path}:{record.name}"
            listing.append(ResolvedTopic(stream, record.name, name, record))
    return listing
