"""Produce, consume and consumer cursors, on the message store of the stream's cluster."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser

from replication.counters import count_consumed, count_produced
from replication.engine.store import (
    Message,
    OffsetOutOfRange,
    PartitionOutOfRange,
    Record,
    UnknownTopic,
)
from replication.errors import InvalidInput, NotFound
from replication.models import Stream, TimestampType, Topic
from replication.paths import validate_topic_name
from replication.services.engine import stream_wake
from replication.services.sync import replicas_await
from replication.services.topics import topic_autocreate, topic_of
from replication.signals import stream_expiring
from replication.stores import store_for

MAX_BATCH = 10_000
MAX_WAIT_MS = 30_000
T = TypeVar("T")


def _on_store(topic: Topic, call: Callable[[], T]) -> T:
    """Run a store call, first telling the store about the topic if it has not heard of it
    (topics are created in the control plane; the store learns them on first use)."""
    try:
        return call()
    except (UnknownTopic, PartitionOutOfRange):
        store_for(topic.stream.cluster).ensure_topic(topic.stream.uuid, topic.name,
                                                     topic.partitions)
        return call()


def _producible_topic(stream: Stream, name: str) -> Topic:
    validate_topic_name(name)
    topic = stream.topics.filter(name=name).first()
    if topic is None:
        if not stream.autocreate:
            raise NotFound(f"topic {stream.path}:{name} does not exist and the stream's "
                           "autocreate is false: create it with 'streamgate stream topic "
                           f"create -path {stream.path} -topic {name}'", field="topic")
        topic = topic_autocreate(stream=stream, name=name)
    if not topic.is_origin:
        # DESIGN.md invariant 4: offsets of a replicated topic belong to its origin.
        origin = Stream.objects.filter(uuid=topic.origin_uuid).values_list("path", flat=True)
        raise InvalidInput(f"topic {stream.path}:{name} is replicated from "
                           f"{origin.first() or topic.origin_uuid}: produce to it there",
                           field="topic")
    return topic


def _check_records(records: Sequence[Record], topic: Topic) -> None:
    if not records:
        raise InvalidInput("no records to produce: send at least one", field="records")
    if len(records) > MAX_BATCH:
        raise InvalidInput(f"{len(records)} records in one batch; at most {MAX_BATCH}",
                           field="records")
    limit = settings.MAX_MESSAGE_BYTES
    sizes = [len(r.value) + len(r.key or b"") + sum(len(k) + len(v) for k, v in r.headers)
             for r in records]
    largest = max(sizes)
    if largest > limit:
        raise InvalidInput(f"record {sizes.index(largest)} is {largest} bytes, over the "
                           f"maximum message size of {limit} bytes", field="records")
    wrong = [r.partition for r in records
             if r.partition is not None and not 0 <= r.partition < topic.partitions]
    if wrong:
        raise InvalidInput(f"partition {wrong[0]} does not exist: {topic} has partitions 0 to "
                           f"{topic.partitions - 1}", field="partition")


def messages_produce(
    *, actor: AbstractBaseUser, stream: Stream, topic: str, records: Sequence[Record],
    producer: str | None = None,
) -> list[tuple[int, int]]:
    """Append a batch in one transaction; (partition, offset) per record, in order. Returns
    once the stream's synchronous replicas hold the batch too (replication/services/sync.py)."""
    stream.require(actor, "produceperm", action="produce")
    target = _producible_topic(stream, topic)
    _check_records(records, target)
    store = store_for(stream.cluster)
    offsets = _on_store(target, lambda: store.append(
        stream.uuid, target.name, records, origin=stream.uuid, producer=producer,
        log_append_time=target.timestamptype == TimestampType.LOGAPPENDTIME,
    ))
    stream_wake(stream=stream.uuid)  # the replicator cuts batches now, not at its next sweep
    replicas_await(stream=stream, topic=target.name, offsets=offsets)
    count_produced(stream=stream.uuid, records=records)  # /metrics (replication/counters.py)
    return offsets


def _readable_topic(actor: AbstractBaseUser, stream: Stream, name: str, partition: int) -> Topic:
    stream.require(actor, "consumeperm", action="consume")
    topic = topic_of(stream, name)
    if not 0 <= partition < topic.partitions:
        raise InvalidInput(f"partition {partition} does not exist: {topic} has partitions 0 to "
                           f"{topic.partitions - 1}", field="partition")
    return topic


def messages_consume(
    *, actor: AbstractBaseUser, stream: Stream, topic: str, partition: int = 0,
    offset: int = 0, limit: int = 1000, max_bytes: int = 1 << 20, wait_ms: int = 0,
) -> list[Message]:
    """Read from `offset` on; with wait_ms, wait that long for data when none is there yet."""
    target = _readable_topic(actor, stream, topic, partition)
    if not 1 <= limit <= MAX_BATCH or max_bytes < 1 or not 0 <= wait_ms <= MAX_WAIT_MS:
        raise InvalidInput(f"limit must be 1 to {MAX_BATCH}, max_bytes positive, wait_ms 0 to "
                           f"{MAX_WAIT_MS}")
    store = store_for(stream.cluster)
    deadline = time.monotonic() + wait_ms / 1000

    def read() -> list[Message]:
        return store.read(stream.uuid, target.name, partition, offset, limit=limit,
                          max_bytes=max_bytes)

    while True:
        try:
            messages = _on_store(target, read)
        except OffsetOutOfRange as err:
            raise InvalidInput(f"offset {offset} is out of range for {target} partition "
                               f"{partition}: {err}", field="offset") from err
        if messages or time.monotonic() >= deadline:
            count_consumed(stream=stream.uuid, messages=messages)
            return messages
        time.sleep(0.02)


def cursor_commit(
    *, actor: AbstractBaseUser, stream: Stream, group: str, topic: str, partition: int,
    offset: int,
) -> None:
    target = _readable_topic(actor, stream, topic, partition)
    _check_group(group)
    store = store_for(stream.cluster)
    _low, high = _on_store(target, lambda: store.watermarks(stream.uuid, target.name))[partition]
    if not 0 <= offset <= high:
        raise InvalidInput(f"offset {offset} is out of range for {target} partition "
                           f"{partition}: commit 0 to {high}", field="offset")
    store.commit_cursor(stream.uuid, group, target.name, partition, offset)
    stream_wake(stream=stream.uuid)  # the replicator copies the cursor to the replicas now


def cursor_list(
    *, actor: AbstractBaseUser, stream: Stream, topic: str, group: str | None = None,
) -> list[dict]:
    """Committed cursors of a topic, of every group or of one."""
    stream.require(actor, "consumeperm", action="read consumer cursors")
    target = topic_of(stream, topic)
    rows = store_for(stream.cluster).cursors(stream.uuid)
    return [
        {"group": g, "partition": p, "offset": o}
        for g, t, p, o in rows
        if t == target.name and (group is None or g == group)
    ]


def _check_group(group: str) -> None:
    if not group or len(group) > 255 or not group.isprintable():
        raise InvalidInput("consumer group must be 1-255 printable characters", field="group")


def stream_expire(*, stream: Stream, now_ms: int | None = None, batch: int = 10_000) -> int:
    """Delete the stream's messages older than its ttl, a bounded batch per transaction so
    producers never wait long; offsets go on from where they were. Returns how many."""
    if stream.ttl == 0:
        return 0  # ttl 0 keeps messages forever (MapR's rule)
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    store, deleted = store_for(stream.cluster), 0
    # Alarm on replicas that have not received what is about to go (operations/alarms.py).
    stream_expiring.send(sender=Stream, stream=stream, before_ms=now_ms - stream.ttl * 1000)
    while count := store.expire(stream.uuid, before_ms=now_ms - stream.ttl * 1000, batch=batch):
        deleted += count
    return deleted
