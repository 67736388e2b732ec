"""Consumer cursors in bulk: Kafka's OffsetCommit and OffsetFetch (many partitions a request),
and maprcli's `stream cursor list` and `stream cursor delete`.

The same cursors `cursor_commit` writes (REST, `streamgate consume -group`), with the same
checks: consumeperm, the topic and partition exist, the offset is within what the partition
holds. They replicate like every committed cursor (replication/engine/replicator.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser

from replication.engine.store import OffsetOutOfRange
from replication.engine.storebase import MessageStore
from replication.errors import InvalidInput, NotFound, StreamgateError
from replication.models import Stream, Topic
from replication.services.messages import _check_group, _on_store
from replication.services.topics import topic_of
from replication.services.wakeups import cursors_wake
from replication.stores import store_for

PartitionKey = tuple[str, int]  # (topic, partition)
# MapR's rule: cursor list and assign list need any of these; cursor delete one of the first two.
LIST_PERMS = ("consumeperm", "adminperm", "produceperm", "topicperm")
DELETE_PERMS = ("consumeperm", "adminperm")


def cursors_commit(
    *, actor: AbstractBaseUser, stream: Stream, group: str,
    commits: Sequence[tuple[str, int, int]],
) -> dict[PartitionKey, StreamgateError | None]:
    """Commit a group's (topic, partition, offset) triples in one store transaction. Returns
    each partition's refusal (None when committed): one bad partition does not fail the rest,
    as Kafka answers per partition."""
    stream.require(actor, "consumeperm", action="commit consumer cursors")
    _check_group(group)
    store = store_for(stream.cluster)
    topics = {t.name: t for t in stream.topics.filter(name__in={c[0] for c in commits})}
    highs: dict[str, dict[int, tuple[int, int]]] = {}
    results: dict[PartitionKey, StreamgateError | None] = {}
    accepted: dict[PartitionKey, int] = {}
    for name, partition, offset in commits:
        problem = _commit_problem(stream, topics.get(name), name, partition, offset, store, highs)
        results[(name, partition)] = problem
        if problem is None:
            accepted[(name, partition)] = offset  # the last of duplicates wins, as in Kafka
    if accepted:
        store.commit_cursors(stream.uuid, group, [(t, p, o) for (t, p), o in accepted.items()])
        cursors_wake(stream=stream.uuid)  # the replicator copies the cursors to the replicas now
    return results


def _commit_problem(
    stream: Stream, topic: Topic | None, name: str, partition: int, offset: int,
    store: MessageStore, highs: dict[str, dict[int, tuple[int, int]]],
) -> StreamgateError | None:
    if topic is None:
        return NotFound(f"topic {stream.path}:{name} does not exist", field="topic")
    if not 0 <= partition < topic.partitions:
        return InvalidInput(f"partition {partition} does not exist: {topic} has partitions 0 "
                            f"to {topic.partitions - 1}", field="partition")
    if name not in highs:
        highs[name] = _on_store(topic, lambda: store.watermarks(stream.uuid, topic.name))
    high = highs[name].get(partition, (0, 0))[1]
    if not 0 <= offset <= high:
        return InvalidInput(f"offset {offset} is out of range for {topic} partition "
                            f"{partition}: commit 0 to {high}", field="offset")
    return None


def cursors_fetch(
    *, actor: AbstractBaseUser, stream: Stream, group: str,
    partitions: Sequence[PartitionKey] | None = None,
) -> dict[PartitionKey, int | None]:
    """A group's committed offsets in the stream: of the partitions asked (None where nothing
    is committed), or all it has."""
    stream.require(actor, "consumeperm", action="read consumer cursors")
    _check_group(group)
    committed = {(t, p): o for g, t, p, o in store_for(stream.cluster).cursors(stream.uuid)
                 if g == group}
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
    stream.require(actor, *DELETE_PERMS, action="delete consumer cursors")
    if group is not None:
        _check_group(group)
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
