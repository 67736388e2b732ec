"""Resolving a client's topic name to a stream and topic, for every interface alike.

The stream is looked up through `Stream.objects.restrict(actor)` (the tenant choke point), so
another tenant's streams read as absent, whatever the spelling."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import structlog
from django.contrib.auth.models import AbstractBaseUser

from replication import ace
from replication.errors import AlreadyExists, StreamgateError
from replication.models import Stream, Topic
from replication.names import parse_topic_name
from replication.services.defaultstreams import default_stream_for, default_stream_open
from replication.services.topics import topic_autocreate

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class ListedTopic:
    """A topic row as a listing reads it: what its users (Kafka Metadata, subscriptions, group
    listings) look at, without a model instance per topic (10,000 of them cost a Metadata
    for every topic more than all the rest, issue 33)."""

    pk: int
    name: str
    partitions: int
    stream: Stream


@dataclass(frozen=True)
class ResolvedTopic:
    """A topic as a client named it: `topic` is its name inside `stream`, `client_name` the
    name to answer with; `record` the Topic row (None: the stream has no such topic yet), or
    what a listing reads of it."""

    stream: Stream
    topic: str
    client_name: str
    record: Topic | ListedTopic | None

    @property
    def partitions(self) -> int:
        return self.record.partitions if self.record else 0


def _visible_stream(actor: AbstractBaseUser, path: str, cluster: str | None) -> Stream | None:
    streams = Stream.objects.restrict(actor).select_related("cluster", "tenant")
    if cluster is not None:
        streams = streams.filter(cluster__name=cluster)
    return streams.filter(path=path).first()


def topic_target(
    *,
    actor: AbstractBaseUser,
    name: str,
    cluster: str | None = None,
    default_stream: str | None = None,
    on_missing: Callable[[str], None] | None = None,
) -> tuple[Stream, str] | None:
    """The stream `name` points into and the topic's name there, whether or not the topic
    exists (for creating it); None when the name is malformed or the stream invisible. A
    plain name goes to `default_stream` (a listener's -defaultstream) or else the user's
    default stream on `cluster`, created on first use; when there is none, `on_missing`
    hears which setting is missing."""
    try:
        parsed = parse_topic_name(name)
    except StreamgateError:
        return None
    if parsed.stream_path is not None:
        stream = _visible_stream(actor, parsed.stream_path, cluster)
    else:
        stream = _default_stream(actor, cluster, default_stream, on_missing)
    return None if stream is None else (stream, parsed.topic)


def topic_resolve(
    *,
    actor: AbstractBaseUser,
    name: str,
    cluster: str | None = None,
    default_stream: str | None = None,
    create: bool = False,
    on_missing: Callable[[str], None] | None = None,
) -> ResolvedTopic | None:
    """The stream and topic `name` means to `actor` (see topic_target); None also when the
    topic does not exist and cannot be autocreated (`create`, the stream's autocreate, and
    produceperm or topicperm)."""
    target = topic_target(actor=actor, name=name, cluster=cluster,
                          default_stream=default_stream, on_missing=on_missing)
    if target is None:
        return None
    stream, topic = target
    record = stream.topics.filter(name=topic).first()
    if record is None and create:
        record = _autocreate(actor, stream, topic)
    if record is None:
        return None
    return ResolvedTopic(stream, topic, name, record)


def _default_stream(actor: AbstractBaseUser, cluster: str | None, given: str | None,
                    on_missing: Callable[[str], None] | None) -> Stream | None:
    path = given
    if path is None:
        choice = default_stream_for(actor=actor, cluster=cluster)
        if choice.path is None:
            if on_missing:
                on_missing(choice.missing)
            return None
        path = choice.path
    stream = default_stream_open(actor=actor, path=path)
    if stream is None or (cluster is not None and stream.cluster.name != cluster):
        return None
    return stream


def _autocreate(actor: AbstractBaseUser, stream: Stream, topic: str) -> Topic | None:
    """Autocreate as a producer's first write does: the stream allows it, and the user may
    write to it or create topics in it (auto-creation is no side door around the ACEs)."""
    if not stream.autocreate:
        return None
    if not (stream.allows(actor, "produceperm") or stream.allows(actor, "topicperm")):
        return None
    try:
        return topic_autocreate(stream=stream, name=topic)
    except AlreadyExists:
        return stream.topics.filter(name=topic).first()


def topic_listing(
    *,
    actor: AbstractBaseUser,
    cluster: str | None = None,
    default_stream: str | None = None,
    perms: tuple[str, ...] = ("produceperm", "consumeperm", "topicperm"),
) -> list[ResolvedTopic]:
    """Every topic `actor` sees and holds one of `perms` on; named plainly in the default
    stream, by MapR name elsewhere, so each topic is listed once.

    Two queries whatever the size (a Kafka Metadata for every topic of a cluster of 10,000,
    issue 33): the visible streams, then their topics; the user's identity is looked up once
    per tenant, and each topic is read as a ListedTopic sharing its stream's instance."""
    default_stream = default_stream or default_stream_for(actor=actor, cluster=cluster).path
    streams = Stream.objects.restrict(actor).select_related("cluster", "tenant")
    if cluster is not None:
        streams = streams.filter(cluster__name=cluster)
    identities: dict[int, ace.Identity] = {}
    allowed: dict[int, Stream] = {}
    for stream in streams.order_by("path"):
        if stream.tenant_id not in identities:
            identities[stream.tenant_id] = stream.identity_of(actor)
        if any(ace.allows(getattr(stream, p), identities[stream.tenant_id]) for p in perms):
            allowed[stream.pk] = stream
    topics: dict[int, list[ListedTopic]] = {pk: [] for pk in allowed}
    rows = Topic.objects.filter(stream_id__in=allowed).order_by("name").values_list(
        "pk", "stream_id", "name", "partitions")
    for pk, stream_id, name, partitions in rows:
        topics[stream_id].append(ListedTopic(pk, name, partitions, allowed[stream_id]))
    listing = []
    for pk, stream in allowed.items():
        plain = stream.path == default_stream
        for record in topics[pk]:
            name = record.name if plain else f"{stream.path}:{record.name}"
            listing.append(ResolvedTopic(stream, record.name, name, record))
    return listing
