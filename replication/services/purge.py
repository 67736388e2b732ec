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
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.contrib.auth.models import AbstractBaseUser

from replication.engine.replicator import pending
from replication.engine.store import UnknownTopic
from replication.engine.storebase import MessageStore
from replication.models import ReplicaLink, Stream, carried_topics
from replication.services.messages import stream_expire
from replication.signals import stream_purged
from replication.stores import store_for

Key = tuple[str, int]


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
