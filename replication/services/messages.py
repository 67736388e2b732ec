"""Produce, consume and consumer cursors, on the message store of the stream's cluster."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import chain
from operator import attrgetter
from typing import TypeVar

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db.models.signals import post_delete, post_save

from replication.compiled import PLACEHOLDER, Compiled
from replication.counters import (
    PRODUCED,
    count_consumed,
    count_traffic,
)
from replication.engine.recordbatch import GZIP, LZ4, NONE, SNAPPY
from replication.engine.sequences import ProducerBatch
from replication.engine.store import (
    Message,
    OffsetOutOfRange,
    PartitionOutOfRange,
    Record,
    UnknownTopic,
    record_size,
    value_sizes,
)
from replication.engine.stored import RawBatch
from replication.errors import (
    Hint,
    InvalidInput,
    NoSuchPartition,
    NotFound,
    NotOrigin,
    ProducersStopped,
    TooLarge,
)
from replication.grants import grants_require
from replication.models import Stream, TimestampType, Topic
from replication.paths import validate_topic_name
from replication.plans import storage_require_room
from replication.quotas import FETCH, PRODUCE, quota_charge, quota_require
from replication.services.sync import replicas_await
from replication.services.topics import topic_autocreate, topic_of
from replication.services.wakeups import stream_wake
from replication.stores import store_for

MAX_BATCH = 10_000
# The Kafka codec a stream's `-compression` stores batches with (a batch store's own batches:
# REST, the CLI and the pages). MapR's lzf has no Kafka codec: snappy is its kind (fast, light).
CODECS = {"off": NONE, "lz4": LZ4, "zlib": GZIP, "lzf": SNAPPY}
MAX_WAIT_MS = 30_000
T = TypeVar("T")


def _on_store(topic: Topic, call: Callable[[], T]) -> T:
    """Run a store call, first telling the store about the topic if it has not heard of it
    (topics are created in the control plane; the store learns them on first use)."""
    return _on_store_all([topic], call)


def _on_store_all(topics: Sequence[Topic], call: Callable[[], T]) -> T:
    """`_on_store` for a call touching several topics of one stream (one transaction)."""
    try:
        return call()
    except (UnknownTopic, PartitionOutOfRange):
        for topic in topics:
            store_for(topic.stream.cluster).ensure_topic(topic.stream.uuid, topic.name,
                                                         topic.partitions)
        return call()


def topic_watermarks(topic: Topic) -> dict[int, tuple[int, int]]:
    """partition -> (low, high) of every partition the topic has: partitions added since the
    store last heard of the topic (CreatePartitions, `topic edit -partitions`) are created
    there first, empty, rather than missing."""
    store = store_for(topic.stream.cluster)
    marks = _on_store(topic, lambda: store.watermarks(topic.stream.uuid, topic.name))
    if len(marks) < topic.partitions:
        store.ensure_topic(topic.stream.uuid, topic.name, topic.partitions)
        marks = store.watermarks(topic.stream.uuid, topic.name)
    return marks


def _producible_topic(stream: Stream, name: str) -> Topic:
    validate_topic_name(name)
    topic = stream.topics.filter(name=name).first()
    if topic is None:
        if not stream.autocreate:
            raise NotFound(f"topic {stream.path}:{name} does not exist and the stream's "
                           "autocreate is false", field="topic", hint=Hint(
                               "topic.create", "create the topic first",
                               {"path": stream.path, "topic": name},
                               cli="create it with {command}"))
        topic = topic_autocreate(stream=stream, name=name)
    if not topic.is_origin:
        # DESIGN.md invariant 4: offsets of a replicated topic belong to its origin.
        origin = Stream.objects.filter(uuid=topic.origin_uuid).values_list("path", flat=True)
        raise NotOrigin(f"topic {stream.path}:{name} is replicated from "
                           f"{origin.first() or topic.origin_uuid}: produce to it there",
                           field="topic")
    return topic


@functools.cache
def _stopped_sql() -> Compiled:
    return Compiled(Stream.objects.filter(pk=PLACEHOLDER).values_list("producers_stopped")
                    .order_by())


class ProduceAbandoned(Exception):
    """The client left before its batch was stored: nothing was written, no answer goes."""


def producers_admitted(stream: Stream,
                       abandoned: Callable[[], bool] | None = None) -> Callable[[], None]:
    """The failover fence, as the store append's `admit`: called inside the append's store
    transaction once its partitions are locked, it refuses the batch when a failover stopped
    the stream's producers. A plain read of the control database, no lock held there: a
    failover stops producers by committing `producers_stopped`, then `fence_appends` waits in
    the store for the appends that read it before (DESIGN.md invariants 10 and 14).

    With `abandoned` (a Kafka connection's "the client closed it"), a batch whose client left
    while it waited for the store is not written either: librdkafka retries what a closed
    connection carried, renumbered under a bumped epoch after a drain, and a late write of
    the original would store it twice (invariant 10)."""
    def admit() -> None:
        if abandoned is not None and abandoned():
            raise ProduceAbandoned("the client closed the connection before the batch was "
                                   "stored")
        rows = _stopped_sql().run(stream.pk)
        if rows and rows[0][0]:
            raise ProducersStopped(f"{stream.path} accepts no producers: {rows[0][0]}",
                                   field="path")
    return admit


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
    quota_require(stream.tenant_id, FETCH)
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
            nbytes = count_consumed(stream=stream.uuid, messages=messages)
            quota_charge(stream.tenant_id, FETCH, nbytes)
            return messages
        time.sleep(0.02)


# --- the batch forms: a Kafka Produce or Fetch request's partitions of one topic -------------

TOPIC_SECONDS = 1.0
_topics: dict[tuple, tuple[float, Topic]] = {}


@dataclass(slots=True)
class PartitionWrite:
    """Records of a produce, of one partition (None: each record names its own, or the store
    picks one by key), or a Kafka producer's checked batches of one partition, for a store
    that keeps them as sent; `base_offset` (and `placed` without a partition) or `error` is
    filled in."""

    partition: int | None
    records: list[Record]
    sequence: ProducerBatch | None = None  # an idempotent producer's batch
    base_offset: int = -1
    placed: list[tuple[int, int]] = field(default_factory=list)  # (partition, offset) each
    error: Exception | None = None
    nbytes: int = 0  # the records' logical bytes, measured by the size check
    batches: list[RawBatch] | None = None  # instead of records (KEEPS_BATCHES stores)

    @property
    def count(self) -> int:
        return len(self.records) if self.batches is None else sum(b.records for b in self.batches)


def _granted(actor: AbstractBaseUser, stream: Stream, topic: str, perm: str,
             find: Callable[[], Topic], partitions: Iterable[int] = ()) -> Topic:
    """`perm` checked through the authorization cache (replication/grants.py), then the topic
    lookup, remembered for TOPIC_SECONDS per (stream, topic, perm): a Kafka client sends
    hundreds of requests a second, and the lookup's query costs about as much as the batch's
    append. A topic saved or deleted in this process (an origin moved by a failover, a topic
    deleted and made anew) clears it at once (`forget_topics`); another process's change is
    seen within TOPIC_SECONDS, or at once when the caller names one of `partitions` that the
    remembered topic lacks (added by another process)."""
    grants_require(actor, stream, perm,
                   action="produce" if perm == "produceperm" else "consume")
    key = (stream.pk, topic, perm)
    now = time.monotonic()
    hit = _topics.get(key)
    if hit is not None and hit[0] > now and hit[1].partitions > max(partitions, default=-1):
        return hit[1]
    target = find()
    if len(_topics) > 10_000:
        _topics.clear()
    _topics[key] = (now + TOPIC_SECONDS, target)
    return target


def forget_topics(**_signal: object) -> None:
    """Drop the remembered topic lookups (a receiver of Topic's saves and deletes)."""
    _topics.clear()


def connect_receivers() -> None:
    """ReplicationConfig.ready: a topic saved or deleted in this process (an origin moved by a
    failover, a topic deleted and made anew) clears the topic lookups at once."""
    post_save.connect(forget_topics, sender=Topic, dispatch_uid="topics-save")
    post_delete.connect(forget_topics, sender=Topic, dispatch_uid="topics-delete")


def _check_keys(write: PartitionWrite) -> None:
    """A compacted topic keeps the latest record per key: a keyless record is refused (the
    Kafka listener checks stored-as-sent batches itself, broker/compacted.py)."""
    keyless = [i for i, r in enumerate(write.records) if r.key is None]
    if keyless:
        raise InvalidInput(f"record {keyless[0]} has no key: a compacted topic keeps the latest "
                           "record per key, so every record needs one; give each record a key",
                           field="records")


def _check_write(write: PartitionWrite, topic: Topic) -> None:
    """The one record check of every produce: records there, their partitions existing, none
    over the maximum message size (key, value and headers: `record_size`). A write whose
    records name their partitions themselves (the HTTP interfaces' form) holds at most
    MAX_BATCH records; the Kafka listener bounds its batches in bytes
    (replication/engine/recordbatch.py)."""
    if write.batches is not None:
        _check_batches(write, topic)
        return
    records = write.records
    if not records:
        raise InvalidInput("no records to produce: send at least one", field="records")
    if write.partition is None:
        if len(records) > MAX_BATCH:
            raise InvalidInput(f"{len(records)} records in one batch; at most {MAX_BATCH}",
                               field="records")
        wrong = [r.partition for r in records
                 if r.partition is not None and not 0 <= r.partition < topic.partitions]
    else:
        wrong = [] if 0 <= write.partition < topic.partitions else [write.partition]
    if wrong:
        raise NoSuchPartition(f"partition {wrong[0]} does not exist: {topic} has partitions 0 "
                              f"to {topic.partitions - 1}", field="partition")
    limit = settings.MAX_MESSAGE_BYTES
    if any(map(attrgetter("key"), records)) or any(map(attrgetter("headers"), records)):
        sizes = list(map(record_size, records))
    else:  # the common batch: values only, measured without a Python call per record
        sizes = value_sizes(records)
    largest = max(sizes)
    if largest > limit:
        raise TooLarge(f"record {sizes.index(largest)} is {largest} bytes, over the maximum "
                       f"message size of {limit} bytes", field="records")
    write.nbytes = sum(sizes)


def _check_batches(write: PartitionWrite, topic: Topic) -> None:
    """A Kafka producer's batches of one partition: the partition exists, and no batch is
    over the maximum message size, which Kafka applies to a batch as sent (max.message.bytes,
    compressed size)."""
    if not 0 <= (write.partition or 0) < topic.partitions:
        raise NoSuchPartition(f"partition {write.partition} does not exist: {topic} has "
                              f"partitions 0 to {topic.partitions - 1}", field="partition")
    limit = settings.MAX_MESSAGE_BYTES
    largest = max(len(b.data) for b in write.batches or ())
    if largest > limit:
        raise TooLarge(f"a record batch of {largest} bytes is over the maximum message size "
                       f"of {limit} bytes (max.message.bytes): send smaller batches",
                       field="records")
    write.nbytes = sum(b.size for b in write.batches or ())


def keeps_batches(stream: Stream) -> bool:
    """Whether the stream's store keeps Kafka's record batches as sent (issue 30)."""
    return store_for(stream.cluster).KEEPS_BATCHES


def messages_produce(
    *, actor: AbstractBaseUser, stream: Stream, topic: str, records: Sequence[Record],
    producer: str | None = None,
) -> list[tuple[int, int]]:
    """One batch of records (REST, /rest and the CLI, the pages): `messages_append` with one
    write, refused whole or stored in one transaction; (partition, offset) per record, in
    order, once the stream's synchronous replicas hold it too."""
    write = PartitionWrite(None, list(records))
    messages_append(actor=actor, stream=stream, topic=topic, writes=[write], producer=producer)
    if write.error is not None:
        raise write.error
    return write.placed


def messages_append(
    *, actor: AbstractBaseUser, stream: Stream, topic: str, writes: Sequence[PartitionWrite],
    producer: str | None = None, abandoned: Callable[[], bool] | None = None,
    throttled: bool = False,
) -> Topic:
    """The one append of every interface (a Kafka Produce's partitions of one topic, a REST
    batch), with every check (produceperm, origin, `_check_write`) and what follows an append
    (stream_wake, replicas_await, counters). Writes without a producer sequence go in one
    append (one transaction); each idempotent batch in its own, where its producer state is
    kept. A whole-topic refusal raises; a write's (its append's failure included) is set on
    it, beside its `base_offset`. A tenant over its produce quota is refused before anything
    is written (QuotaExceeded), unless the caller is `throttled`: it slows its client itself
    (the Kafka listener's throttle_time_ms). A tenant storing what its plan allows is refused
    before anything is written too (PlanLimitExceeded, replication/plans.py)."""
    target = _granted(actor, stream, topic, "produceperm",
                      lambda: _producible_topic(stream, topic),
                      (w.partition for w in writes if w.partition is not None))
    storage_require_room(stream.tenant_id)
    if not throttled:
        quota_require(stream.tenant_id, PRODUCE)
    good = []
    for write in writes:
        try:
            _check_write(write, target)
            if target.compacted and write.batches is None:
                _check_keys(write)
            good.append(write)
        except InvalidInput as error:
            write.error = error
    store = store_for(stream.cluster)
    how = {"origin": stream.uuid, "producer": producer,
           "log_append_time": target.timestamptype == TimestampType.LOGAPPENDTIME,
           "admit": producers_admitted(stream, abandoned)}
    if any(w.batches is not None for w in good):
        _append_batches(target, functools.partial(store.append_batches, stream.uuid,
                                                  target.name, **how), good,
                        together=store.SEQUENCES_TOGETHER)
    else:
        _append_writes(target, functools.partial(store.append, stream.uuid, target.name,
                                                 codec=CODECS[stream.compression], **how), good)
    _produced(stream, target, [w for w in good if w.error is None])
    return target


def _append_writes(target: Topic, append: Callable, good: list[PartitionWrite]) -> None:
    """Each append's outcome is set on its own writes: one that failed (the store restarting
    midway) must not make those already committed answer with its error, or a client that
    retries would write them again under a new producer epoch (invariant 10)."""
    plain = [w for w in good if w.sequence is None]
    if plain:
        records = list(chain.from_iterable(w.records for w in plain))
        try:
            placed = _on_store(target, lambda: append(records))
        except Exception as error:  # the caller answers it, per partition
            for write in plain:
                write.error = error
        else:
            at = 0
            for write in plain:
                write.base_offset = placed[at][1]
                if write.partition is None:  # the records went where they or the store chose
                    write.placed = placed[at:at + len(write.records)]
                at += len(write.records)
    for write in good:
        if write.sequence is not None:
            try:
                write.base_offset = _on_store(
                    target, lambda w=write: append(w.records, sequence=w.sequence))[0][1]
            except Exception as error:  # SequenceError, or the store failed midway
                write.error = error


def _append_batches(target: Topic, append: Callable, good: list[PartitionWrite],
                    together: bool = False) -> None:
    """`_append_writes` for Kafka batches kept as sent: the plain ones of every partition in
    one append (one transaction); an idempotent producer's, on a store that can (`together`),
    in one append too when each is its partition's next (the common case: one commit for a
    request, not one a partition), else each in its own."""
    plain = [w for w in good if w.sequence is None]
    if plain:
        batches: dict[int, list[RawBatch]] = {}
        for write in plain:
            batches.setdefault(write.partition, []).extend(write.batches)
        try:
            firsts = _on_store(target, lambda: append(batches))
        except Exception as error:  # the caller answers it, per partition
            for write in plain:
                write.error = error
        else:  # a partition's writes in order (consecutive Produce requests served together)
            at = dict(firsts)
            for write in plain:
                write.base_offset = at[write.partition]
                at[write.partition] += write.count
    sequenced = [w for w in good if w.sequence is not None]
    if together and len(sequenced) > 1 and _one_each(sequenced):
        try:
            firsts = _on_store(target, lambda: append(
                {w.partition: w.batches for w in sequenced},
                sequences={w.partition: w.sequence for w in sequenced}))
        except Exception:  # SequencesApart, or a store failing: one by one, below
            pass  # a batch stored already is found by its sequence and answered, not rewritten
        else:
            for write in sequenced:
                write.base_offset = firsts[write.partition]
            return
    for write in sequenced:
        try:
            write.base_offset = _on_store(target, lambda w=write: append(
                {w.partition: w.batches}, sequence=w.sequence))[write.partition]
        except Exception as error:  # SequenceError, or the store failed midway
            write.error = error


def _one_each(writes: list[PartitionWrite]) -> bool:
    """One producer's batches, a partition each."""
    return (len({w.partition for w in writes}) == len(writes)
            and len({w.sequence.producer_id for w in writes}) == 1)


def _produced(stream: Stream, target: Topic, writes: list[PartitionWrite]) -> None:
    if not writes:
        return
    stream_wake(stream=stream.uuid)
    replicas_await(stream=stream, topic=target.name, offsets=list(chain.from_iterable(
        w.placed if w.partition is None else [(w.partition, w.base_offset + w.count - 1)]
        for w in writes)))
    # The counters from the sizes already measured: no second pass over the records.
    nbytes = sum(w.nbytes for w in writes)
    count_traffic(direction=PRODUCED, stream=stream.uuid,
                  messages=sum(w.count for w in writes), nbytes=nbytes)
    quota_charge(stream.tenant_id, PRODUCE, nbytes)
