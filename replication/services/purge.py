"""`stream purge`: delete a stream's messages now, in its own cluster's store only.

MapR's `stream purge` runs the purge process at once: it removes the messages already due for
deletion (past the stream's ttl) instead of waiting for the background process. That is what
`-all false` (the default) does here, by the same rule and alarm as the periodic retention
(`stream_expire`), so a maprcli script that purges to reclaim space never loses live data.

`-all true` (streamgate's own) deletes every message of every topic, keeping the topics, and
offsets go on from where they were (a partition's next offset never moves back, so neither
consumers' cursors nor replication restart). It never deletes what an agreed replica of the
stream (paused or not) has not received yet: each partition is cut at the lowest end among
its replicas, the rest is kept and reported (invariant 10). Purging is local: a replica's
purge leaves its source as it is and is never replicated back, and a source's purge leaves
its replicas' copies; to empty both, purge each.

`records_delete` is Kafka's DeleteRecords: each named partition cut below an offset of the
caller's, by the same rule (adminperm, replicas' backlog kept, the purge audited).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any
from uuid import UUID

import structlog
from django.contrib.auth.models import AbstractBaseUser

from replication.engine.replicator import pending
from replication.engine.store import UnknownTopic
from replication.engine.storebase import MessageStore
from replication.errors import InvalidInput, NoSuchPartition, StreamgateError
from replication.models import Cluster, ReplicaLink, Stream, carried_topics
from replication.services.messages import _on_store
from replication.services.topiccompaction import origin_topics
from replication.services.topics import topic_of
from replication.signals import stream_expiring, stream_purged
from replication.stores import store_for

log = structlog.get_logger(__name__)

Key = tuple[str, int]
TO_HIGH_WATERMARK = -1  # Kafka's DeleteRecords offset meaning "everything produced so far"


def stream_purge(*, actor: AbstractBaseUser, stream: Stream, everything: bool = False
                 ) -> list[dict[str, Any]]:
    """One row per topic partition: what was purged, what is kept for replicas, the new
    watermarks."""
    stream.require(actor, "adminperm", action="purge the stream")
    store = store_for(stream.cluster)
    before = _watermarks(stream)
    ends = {key: high for key, (_low, high) in before.items()}
    if everything:
        ends = _replica_safe_ends(stream, ends)
        for (topic, partition), end in ends.items():
            while store.trim(stream.uuid, topic, partition, end):
                pass
    else:
        stream_expire(stream=stream)
    after = _watermarks(stream)
    rows = [_row(key, before[key], after.get(key, before[key]), ends[key])
            for key in sorted(before)]
    purged = sum(row["messagesPurged"] for row in rows)
    kept = sum(row["messagesKeptForReplicas"] for row in rows)
    stream_purged.send(sender=Stream, stream=stream, actor=actor,
                       details={"all": everything, "messagesPurged": purged,
                                "messagesKeptForReplicas": kept})
    return rows


def records_delete(*, actor: AbstractBaseUser, stream: Stream, topic: str,
                   offsets: Mapping[int, int]) -> dict[int, int | StreamgateError]:
    """Delete each partition's messages below its offset (-1: below the high watermark), as
    `stream purge -all` does (adminperm; an agreed replica's backlog is kept, so the cut may
    stay lower). Per partition: the new low watermark, or why it was refused (an offset past
    the high watermark, a partition that does not exist), as Kafka answers per partition."""
    stream.require(actor, "adminperm", action="delete records")
    target = topic_of(stream, topic)
    store = store_for(stream.cluster)
    before = _on_store(target, lambda: store.watermarks(stream.uuid, target.name))
    results: dict[int, int | StreamgateError] = {}
    ends: dict[Key, int] = {}
    for partition, offset in offsets.items():
        problem = _delete_problem(target.name, before, partition, offset)
        if problem is not None:
            results[partition] = problem
        else:
            ends[(target.name, partition)] = (
                before[partition][1] if offset == TO_HIGH_WATERMARK else offset)
    for (name, partition), end in _replica_safe_ends(stream, ends).items():
        while store.trim(stream.uuid, name, partition, end):
            pass
    after = store.watermarks(stream.uuid, target.name)
    for _name, partition in ends:
        results[partition] = after[partition][0]
    if ends:
        stream_purged.send(sender=Stream, stream=stream, actor=actor, details={
            "topic": target.name,
            "offsets": {str(p): end for (_n, p), end in sorted(ends.items())},
            "messagesPurged": sum(after[p][0] - before[p][0] for _n, p in ends)})
    return results


def _delete_problem(topic: str, marks: dict[int, tuple[int, int]], partition: int,
                    offset: int) -> StreamgateError | None:
    if partition not in marks:
        return NoSuchPartition(f"partition {partition} does not exist: {topic} has partitions "
                               f"0 to {len(marks) - 1}", field="partition")
    high = marks[partition][1]
    if offset != TO_HIGH_WATERMARK and not 0 <= offset <= high:
        return InvalidInput(f"offset {offset} is past the end of {topic} partition "
                            f"{partition}: delete below 0 to {high}, or -1 for everything "
                            "produced so far", field="offset")
    return None


def _watermarks(stream: Stream) -> dict[Key, tuple[int, int]]:
    store = store_for(stream.cluster)
    return {(topic.name, partition): marks
            for topic in stream.topics.order_by("name")
            for partition, marks in watermarks(store, stream.uuid, topic.name).items()}


def watermarks(store: MessageStore, stream: UUID, topic: str) -> dict[int, tuple[int, int]]:
    """partition -> (low, high); none for a topic the store has not heard of yet (created in
    the control plane, never written)."""
    try:
        return store.watermarks(stream, topic)
    except UnknownTopic:
        return {}


def _replica_safe_ends(stream: Stream, ends: dict[Key, int]) -> dict[Key, int]:
    """Each partition's cut: its end when the purge began (later messages stay), lowered to
    where each agreed replica's copy ends."""
    origins = dict(stream.topics.values_list("name", "origin_uuid"))
    links = ReplicaLink.objects.agreed().filter(source=stream).select_related("replica__cluster")
    cut = dict(ends)
    for link in links:
        backlog = pending(store_for(stream.cluster), stream.uuid, store_for(link.replica.cluster),
                          link.replica.uuid, carried_topics(link.replica.uuid, origins))
        for part in backlog.partitions:
            key = (part.topic, part.partition)
            if key in cut:
                cut[key] = min(cut[key], part.start)
    return cut


def _row(key: Key, before: tuple[int, int], after: tuple[int, int], end: int
         ) -> dict[str, Any]:
    (topic, partition), (low, high), (new_low, new_high) = key, before, after
    return {"topic": topic, "partition": partition, "messagesPurged": max(0, new_low - low),
            "messagesKeptForReplicas": max(0, high - max(end, low)),
            "minoffset": new_low, "nextoffset": new_high}


def streams_to_expire() -> list[int]:
    """The ids of the streams with a ttl that hold messages, which retention's beat entry
    gives a task each: an idle cluster's thousands of empty streams cost a query per store a
    minute, not a task each (issue 33). A store that cannot be asked has all its streams
    listed, as before."""
    ids: list[int] = []
    for cluster in Cluster.objects.filter(streams__ttl__gt=0).distinct():
        streams = list(cluster.streams.exclude(ttl=0).values_list("pk", "uuid"))
        try:
            holding = store_for(cluster).holding_streams()
        except Exception as error:  # each stream's own task says what is wrong
            log.warning("retention_listing_failed", cluster=cluster.name, error=str(error))
            holding = {uuid for _, uuid in streams}
        ids += [pk for pk, uuid in streams if uuid in holding]
    return ids


def stream_expire(*, stream: Stream, now_ms: int | None = None, batch: int = 10_000) -> int:
    """Delete the stream's messages older than its ttl, a bounded batch per transaction so
    producers never wait long; offsets go on from where they were. Returns how many."""
    if stream.ttl == 0:
        return 0  # ttl 0 keeps messages forever (MapR's rule)
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    store, deleted = store_for(stream.cluster), 0
    # Alarm on replicas that have not received what is about to go (operations/alarms.py).
    stream_expiring.send(sender=Stream, stream=stream, before_ms=now_ms - stream.ttl * 1000)
    # A compact-only topic (Kafka's cleanup.policy=compact, its origin's on a replica) keeps
    # its messages until compaction removes them, whatever its stream's ttl.
    keep = frozenset(name for name, t in origin_topics(stream).items() if not t.expires)
    while count := store.expire(stream.uuid, before_ms=now_ms - stream.ttl * 1000,
                                batch=batch, keep=keep):
        deleted += count
    return deleted
