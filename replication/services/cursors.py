"""Consumer cursors in bulk: Kafka's OffsetCommit and OffsetFetch (many partitions a request),
and maprcli's `stream cursor list` and `stream cursor delete`.

The same cursors `cursor_commit` writes (REST, `streamgate consume -group`), with the same
checks: consumeperm, the topic and partition exist, the offset is not negative, the metadata
within Kafka's limit. Any other offset is kept as committed, as Kafka keeps it. They replicate
like every committed cursor (replication/engine/replicator.py), metadata included.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser

from accounts.models import TokenScope
from replication.engine.store import Committed, OffsetOutOfRange
from replication.engine.storebase import MessageStore
from replication.errors import InvalidInput, NotFound, StreamgateError
from replication.models import Stream, Topic
from replication.scopes import scope_require
from replication.services.messages import _on_store, _on_store_all, _readable_topic
from replication.services.topics import topic_of
from replication.services.wakeups import cursors_wake
from replication.stores import store_for

PartitionKey = tuple[str, int]  # (topic, partition)
# (topic, partition, offset[, metadata[, leader epoch]])
Commit = tuple[str, int, int] | tuple[str, int, int, str] | tuple[str, int, int, str, int]
# MapR's rule: cursor list and assign list need any of these; cursor delete one of the first two.
LIST_PERMS = ("consumeperm", "adminperm", "produceperm", "topicperm")
DELETE_PERMS = ("consumeperm", "adminperm")
MAX_COMMIT_METADATA = 4096  # Kafka's offset.metadata.max.bytes default


def cursor_commit(
    *, actor: AbstractBaseUser, stream: Stream, group: str, topic: str, partition: int,
    offset: int, metadata: str = "",
) -> None:
    """Set the group's cursor to exactly `offset`, as Kafka keeps any committed offset (back,
    or past the partition's end: where to read is the consumer's business)."""
    # Committing writes: a read-only token consumes but does not move the group's cursors.
    scope_require(actor, TokenScope.PRODUCE, action=f"commit consumer cursors on {stream.path}",
                  stream=True)
    target = _readable_topic(actor, stream, topic, partition)
    check_group(group)
    check_commit(offset, metadata)
    store = store_for(stream.cluster)
    _on_store(target, lambda: store.commit_cursors(
        stream.uuid, group, [(target.name, partition, offset, metadata)]))
    cursors_wake(stream=stream.uuid)  # the replicator copies the cursor to the replicas now


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


def check_commit(offset: int, metadata: str) -> None:
    """A committed offset is any offset a consumer could read from next (0 up, as Kafka's
    clients commit); its metadata at most Kafka's offset.metadata.max.bytes."""
    if offset < 0:
        raise InvalidInput(f"offset {offset} is negative: commit the offset to read next "
                           "(0 or more), or delete the cursor to start over", field="offset")
    if len(metadata.encode()) > MAX_COMMIT_METADATA:
        raise InvalidInput(f"commit metadata of {len(metadata.encode())} bytes: at most "
                           f"{MAX_COMMIT_METADATA} are kept (Kafka's offset.metadata.max.bytes)",
                           field="metadata")


def check_group(group: str) -> None:
    if not group or len(group) > 255 or not group.isprintable():
        raise InvalidInput("consumer group must be 1-255 printable characters", field="group")


def _checked(actor: AbstractBaseUser, stream: Stream, group: str,
             commits: Sequence[Commit],
             ) -> tuple[dict[PartitionKey, StreamgateError | None],
                        dict[PartitionKey, tuple[int, str, int]], dict[str, Topic]]:
    # Committing writes: a read-only token consumes but does not move the group's cursors.
    scope_require(actor, TokenScope.PRODUCE, action=f"commit consumer cursors on {stream.path}",
                  stream=True)
    stream.require(actor, "consumeperm", action="commit consumer cursors")
    check_group(group)
    topics = {t.name: t for t in stream.topics.filter(name__in={c[0] for c in commits})}
    results: dict[PartitionKey, StreamgateError | None] = {}
    accepted: dict[PartitionKey, tuple[int, str, int]] = {}
    for name, partition, offset, *extra in commits:
        metadata = str(extra[0]) if extra else ""
        epoch = int(extra[1]) if len(extra) > 1 else -1
        problem = _commit_problem(stream, topics.get(name), name, partition, offset, metadata)
        results[(name, partition)] = problem
        if problem is None:  # the last of duplicates wins, as in Kafka
            accepted[(name, partition)] = (offset, metadata, epoch)
    return results, accepted, topics


def cursors_check(
    *, actor: AbstractBaseUser, stream: Stream, group: str,
    commits: Sequence[Commit],
) -> dict[PartitionKey, StreamgateError | None]:
    """`cursors_commit`'s checks without the commit (a transaction's offsets, written when
    it commits): each partition's refusal, None when it would be committed."""
    return _checked(actor, stream, group, commits)[0]


def cursors_commit(
    *, actor: AbstractBaseUser, stream: Stream, group: str,
    commits: Sequence[Commit],
) -> dict[PartitionKey, StreamgateError | None]:
    """Commit a group's (topic, partition, offset[, metadata[, leader epoch]]) in one store
    transaction, each offset exactly as given (Kafka keeps any: back, or past the end), with
    the commit's metadata and leader epoch (-1: none). Returns each partition's refusal (None
    when committed): one bad partition does not fail the rest, as Kafka answers per
    partition."""
    results, accepted, topics = _checked(actor, stream, group, commits)
    if accepted:
        store = store_for(stream.cluster)
        rows = [(t, p, *kept) for (t, p), kept in accepted.items()]
        _on_store_all([topics[t] for t in {t for t, _ in accepted}],
                      lambda: store.commit_cursors(stream.uuid, group, rows))
        cursors_wake(stream=stream.uuid)  # the replicator copies the cursors to the replicas now
    return results


def _commit_problem(
    stream: Stream, topic: Topic | None, name: str, partition: int, offset: int, metadata: str,
) -> StreamgateError | None:
    if topic is None:
        return NotFound(f"topic {stream.path}:{name} does not exist", field="topic")
    if not 0 <= partition < topic.partitions:
        return InvalidInput(f"partition {partition} does not exist: {topic} has partitions 0 "
                            f"to {topic.partitions - 1}", field="partition")
    try:
        check_commit(offset, metadata)
    except InvalidInput as problem:
        return problem
    return None


def cursors_fetch(
    *, actor: AbstractBaseUser, stream: Stream, group: str,
    partitions: Sequence[PartitionKey] | None = None,
) -> dict[PartitionKey, Committed | None]:
    """A group's committed cursors in the stream, with their metadata: of the partitions
    asked (None where nothing is committed), or all it has."""
    stream.require(actor, "consumeperm", action="read consumer cursors")
    check_group(group)
    committed = {(c.topic, c.partition): c for c in store_for(stream.cluster).commits(stream.uuid)
                 if c.group == group}
    if partitions is None:
        return dict(committed)
    return {key: committed.get(key) for key in partitions}


def _filters(stream: Stream, topic: str | None, partition: int | None) -> Topic | None:
    if partition is not None and topic is None:
        raise InvalidInput("-partition needs -topic: name the topic the partition belongs to",
                           field="partition")
    if topic is None:
        return None
    found = topic_of(stream, topic)
    if partition is not None and not 0 <= partition < found.partitions:
        raise InvalidInput(f"partition {partition} does not exist: {found} has partitions 0 to "
                           f"{found.partitions - 1}", field="partition")
    return found


def cursor_delete(
    *, actor: AbstractBaseUser, stream: Stream, group: str | None = None,
    topic: str | None = None, partition: int | None = None,
) -> int:
    """Delete the committed cursors matching the filters (MapR: consumeperm or adminperm).
    Replicas keep their copies: a replica's cursor never moves back (merge_cursors), so a
    group failing over after a delete resumes where it had committed. Returns how many."""
    scope_require(actor, TokenScope.PRODUCE, action=f"delete consumer cursors on {stream.path}",
                  stream=True)
    stream.require(actor, *DELETE_PERMS, action="delete consumer cursors")
    if group is not None:
        check_group(group)
    _filters(stream, topic, partition)
    return store_for(stream.cluster).delete_cursors(stream.uuid, group=group, topic=topic,
                                                    partition=partition)


@dataclass(frozen=True)
class CursorStanding:
    """A committed cursor beside its partition's last offset, and the times (epoch ms, 0 when
    unknown) of the last message produced and of the last one the group consumed."""

    group: str
    topic: str
    partition: int
    produced_offset: int  # -1: the partition is empty
    committed: int
    produced_ms: int
    consumed_ms: int

    @property
    def lag_ms(self) -> int:
        return max(0, self.produced_ms - self.consumed_ms)


def cursor_report(
    *, actor: AbstractBaseUser, stream: Stream, group: str | None = None,
    topic: str | None = None, partition: int | None = None,
) -> list[CursorStanding]:
    """Each committed cursor beside its partition's latest offset (what `stream cursor list`
    shows), with the timestamps of the last produced and the last consumed message."""
    stream.require(actor, *LIST_PERMS, action="list consumer cursors")
    _filters(stream, topic, partition)
    store = store_for(stream.cluster)
    rows, marks = [], {}
    for g, t, p, committed in store.cursors(stream.uuid):
        if not _matches((g, t, p), group, topic, partition):
            continue
        if t not in marks:
            marks[t] = store.watermarks(stream.uuid, t)
        high = marks[t].get(p, (0, 0))[1]
        produced = _timestamp(store, stream, t, p, high - 1)
        consumed = _timestamp(store, stream, t, p, committed - 1)
        rows.append(CursorStanding(g, t, p, high - 1, committed, produced or 0,
                                   consumed or produced or 0))
    return rows


def _matches(cursor: tuple[str, str, int], group: str | None, topic: str | None,
             partition: int | None) -> bool:
    wanted = (group, topic, partition)
    return all(want is None or want == have for want, have in zip(wanted, cursor, strict=True))


def _timestamp(store: MessageStore, stream: Stream, topic: str, partition: int,
               offset: int) -> int | None:
    if offset < 0:
        return None
    try:
        found = store.read(stream.uuid, topic, partition, offset, limit=1)
    except OffsetOutOfRange:  # expired meanwhile
        return None
    return found[0].timestamp_ms if found and found[0].offset == offset else None
