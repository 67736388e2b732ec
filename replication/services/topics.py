from __future__ import annotations

from typing import TypedDict, Unpack

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from replication.errors import AlreadyExists, ChangeAtOrigin, Hint, InvalidInput, NotFound
from replication.models import Stream, TimestampType, Topic
from replication.paths import validate_topic_name
from replication.plans import partitions_require_room
from replication.services.common import (
    check_origins,
    component,
    propagate_topics,
    topology_lock,
)
from replication.services.streams import clean_partitions, compaction_possible
from replication.services.topiccompaction import COMPACTION, compaction_overrides
from replication.services.topicflush import flush_overrides
from replication.stores import store_for


class TopicOptions(TypedDict, total=False):
    """What a topic is created with or changed to; None (or absent) keeps the stream's
    default at creation, the topic's value at an edit."""

    partitions: int | None
    timestamptype: str | None
    # Per-topic compaction overrides (issue 31): "stream" and -1 go back to the stream's.
    cleanuppolicy: str | None
    mincompactionlag: int | None
    deleteretention: int | None
    mincleanabledirtyratio: float | None
    # Kafka's flush.ms and flush.messages (topicflush.py): -1 goes back to Kafka's default.
    flushms: int | None
    flushmessages: int | None


def topic_of(stream: Stream, name: str) -> Topic:
    topic = stream.topics.filter(name=validate_topic_name(name)).first()
    if topic is None:
        raise NotFound(f"topic {stream.path}:{name} does not exist", field="topic",
                       hint=Hint("topic.list", "list the stream's topics",
                                 {"path": stream.path}, cli="list topics with {command}"))
    return topic


def _origin_only(topic: Topic, action: str) -> None:
    if not topic.is_origin:
        origin = Stream.objects.filter(uuid=topic.origin_uuid).values_list("path", flat=True)
        where = origin.first() or str(topic.origin_uuid)
        raise ChangeAtOrigin(
            f"topic {topic} is replicated from {where}: {action} it there, at its origin",
            field="topic",
        )


def _timestamptype(value: str | None, default: str) -> str:
    if value is None:
        return default
    if value not in TimestampType.values:
        raise InvalidInput(f"-timestamptype {value!r} is not one of createtime, logappendtime",
                           field="timestamptype")
    return value


@transaction.atomic
def topic_create(*, actor: AbstractBaseUser, stream: Stream, name: str,
                 **options: Unpack[TopicOptions]) -> Topic:
    stream.require(actor, "topicperm", action="create topics")
    return topic_autocreate(stream=stream, name=name, **options)


@transaction.atomic
def topic_autocreate(*, stream: Stream, name: str, within_plan: bool = True,
                     **options: Unpack[TopicOptions]) -> Topic:
    """Create a topic with every rule but the topicperm check, which a producer's first write
    to an autocreate stream does not need (the stream's owner allowed it with -autocreate).
    `within_plan=False` only for a topic that keeps acknowledged messages (a failback's
    divergent tail): a plan's partition limit never costs data (invariant 10)."""
    validate_topic_name(name)
    partitions = options.get("partitions")
    count = clean_partitions(stream.defaultpartitions if partitions is None else partitions)
    kind = _timestamptype(options.get("timestamptype"), stream.defaulttimestamptype)
    topology_lock()
    if stream.topics.filter(name=name).exists():
        raise AlreadyExists(f"topic {stream.path}:{name} already exists", field="topic")
    if within_plan:
        partitions_require_room(stream.tenant_id, count)
    check_origins([stream.id], extra_topics={stream.id: {name: stream.uuid}})
    topic = Topic(stream=stream, name=name, partitions=count, timestamptype=kind,
                  origin_uuid=stream.uuid, **compaction_overrides(options),
                  **flush_overrides(options))
    if topic.compacted:
        compaction_possible(stream.cluster)
    topic.save()
    propagate_topics([stream.id])
    return topic


@transaction.atomic
def topic_edit(*, actor: AbstractBaseUser, stream: Stream, name: str,
               **options: Unpack[TopicOptions]) -> Topic:
    stream.require(actor, "topicperm", action="edit topics")
    partitions, timestamptype = options.get("partitions"), options.get("timestamptype")
    topology_lock()
    topic = topic_of(stream, name)
    _origin_only(topic, "edit")
    overrides = compaction_overrides(options)
    flushes = flush_overrides(options)
    if partitions is None and timestamptype is None and not overrides and not flushes:
        raise InvalidInput("nothing to change: give -partitions, -timestamptype, "
                           f"{', '.join('-' + name for name in COMPACTION)}")
    if partitions is not None:
        clean_partitions(partitions)
        if partitions < topic.partitions:
            raise InvalidInput(
                f"-partitions can only grow: {topic} has {topic.partitions}; give "
                f"{topic.partitions} or more", field="partitions"
            )
        partitions_require_room(stream.tenant_id, partitions - topic.partitions)
        topic.partitions = partitions
    topic.timestamptype = _timestamptype(timestamptype, topic.timestamptype)
    for name, value in {**overrides, **flushes}.items():
        setattr(topic, name, value)
    if overrides.get("cleanuppolicy") and topic.compacted:
        compaction_possible(stream.cluster)
    topic.save()
    propagate_topics([stream.id])
    return topic


@transaction.atomic
def topic_delete(*, actor: AbstractBaseUser, stream: Stream, name: str) -> None:
    stream.require(actor, "topicperm", action="delete topics")
    topology_lock()
    topic = topic_of(stream, name)
    _origin_only(topic, "delete")
    # Replicas hold copies with the same name and origin; they go with the original, and so
    # do their messages, once this commits: a topic created later under the name is new.
    streams, _ = component([stream.id])
    copies = Topic.objects.filter(stream__in=streams, name=name, origin_uuid=stream.uuid)
    holders = [(t.stream.cluster, t.stream.uuid) for t in copies.select_related("stream__cluster")]
    copies.delete()
    transaction.on_commit(lambda: [store_for(c).drop_topic(uuid, name) for c, uuid in holders])
