"""Live figures of streams and links, as plain domain data: what each interface shows in its
own shape (maprcli's rows on /rest: portal/rest/rows.py; the API's fields; the pages).

Storage figures (sizes, offsets, timestamps, consumers) come from `storage_figures`, which asks
the message store of each cluster; backlog figures from `pending_figures`, which the
replication engine computes from both ends' stores. Each function issues a fixed number of
queries, whatever the number of rows.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from django.conf import settings

from replication.engine.replicator import pending
from replication.engine.store import PartitionStats, UnknownTopic
from replication.models import (
    ReplicaLink,
    ReplicaState,
    Stream,
    Topic,
    carried_topics,
    link_is_stalled,
)
from replication.stores import store_for


@dataclass(frozen=True)
class PartitionFigures:
    physicalsize: int = 0
    logicalsize: int = 0
    maxoffset: int = -1  # the last offset: -1 for an empty partition, as MapR says
    minoffsetacrossconsumers: int = 0
    mintimestamp: int = 0  # epoch milliseconds
    maxtimestamp: int = 0
    mintimestampacrossconsumers: int = 0
    consumers: int = 0
    lag: int = 0


@dataclass(frozen=True)
class PendingFigures:
    """A link's backlog: what the replica has not applied yet."""

    min_ts: int = 0  # epoch milliseconds of the oldest message pending (0: none)
    max_ts: int = 0
    bytes: int = 0
    messages: int = 0


EMPTY_PARTITION = PartitionFigures()


def storage_figures(topics: Iterable[Topic]) -> dict[int, list[PartitionFigures]]:
    """Per topic id, the figures of each partition, from the message store of the topic's
    cluster. The one source of storage figures."""
    figures: dict[int, list[PartitionFigures]] = {}
    physical: dict[UUID, tuple[int, int]] = {}  # per stream: (physicalsize, logicalsize)
    for topic in topics:
        store = store_for(topic.stream.cluster)
        if topic.stream.uuid not in physical:
            sizes = store.sizes(topic.stream.uuid)
            physical[topic.stream.uuid] = (sizes["physicalsize"], sizes["logicalsize"])
        try:
            stats = store.partition_stats(topic.stream.uuid, topic.name)
        except UnknownTopic:  # no message yet: the store has not heard of the topic
            stats = []
        figures[topic.pk] = _partition_figures(stats, topic.partitions,
                                               *physical[topic.stream.uuid])
    return figures


def _partition_figures(stats: list[PartitionStats], count: int, physicalsize: int,
                       logicalsize: int) -> list[PartitionFigures]:
    by_partition = {s.partition: s for s in stats}
    result = []
    for partition in range(count):
        s = by_partition.get(partition)
        if s is None:
            result.append(EMPTY_PARTITION)
            continue
        cursor = s.min_cursor if s.min_cursor is not None else s.low
        result.append(PartitionFigures(
            # The store measures disk per stream; each partition gets its share of the bytes.
            physicalsize=physicalsize * s.bytes // logicalsize if logicalsize else 0,
            logicalsize=s.bytes,
            maxoffset=s.high - 1,
            minoffsetacrossconsumers=cursor,
            mintimestamp=s.first_ts or 0,
            maxtimestamp=s.last_ts or 0,
            mintimestampacrossconsumers=s.first_ts or 0,
            consumers=s.consumers,
            lag=s.high - cursor if s.consumers else 0,
        ))
    return result


def pending_figures(links: Iterable[ReplicaLink]) -> dict[int, PendingFigures]:
    """Per link id, the backlog not yet applied at the replica, from the two clusters' stores
    (the replica's partition ends against the source's high watermarks). The one source of
    them. At most two control-database queries whatever the number of links: the sources
    (none when the links were read with them and their clusters) and the topics of the
    sources holding messages (none in an idle deployment)."""
    links = list(links)
    sources = {ln.source_id: ln.source for ln in links
               if ReplicaLink.source.is_cached(ln) and Stream.cluster.is_cached(ln.source)}
    if unread := {ln.source_id for ln in links} - sources.keys():
        sources.update(Stream.objects.select_related("cluster").in_bulk(unread))
    ends = _ends(links, sources)
    held: dict[UUID, list[tuple[str, int, int, int]]] = {}
    for (stream, topic, p), (low, high) in ends.items():
        held.setdefault(stream, []).append((topic, p, low, high))
    topics: dict[int, dict[str, UUID]] = {sid: {} for sid in sources}
    busy = [sid for sid, source in sources.items() if source.uuid in held]
    for stream_id, name, origin in Topic.objects.filter(stream_id__in=busy).values_list(
        "stream_id", "name", "origin_uuid"
    ):
        topics[stream_id][name] = origin
    return {link.pk: PendingFigures() if _idle(link, sources[link.source_id], topics, ends, held)
            else _pending(sources[link.source_id], link, topics[link.source_id])
            for link in links}


def _idle(link: ReplicaLink, source: Stream, topics: dict[int, dict[str, UUID]],
          ends: dict[tuple[UUID, str, int], tuple[int, int]],
          held: dict[UUID, list[tuple[str, int, int, int]]]) -> bool:
    """Whether none of the partitions `source` holds lags at the link's replica."""
    replica = link.replica.uuid
    carried = carried_topics(replica, topics[source.pk])
    return not any(topic in carried and high > max(ends.get((replica, topic, p), (0, 0))[1], low)
                   for topic, p, low, high in held.get(source.uuid, ()))


def _ends(links: list[ReplicaLink], sources: dict[int, Stream]
          ) -> dict[tuple[UUID, str, int], tuple[int, int]]:
    """(low, high) of every partition holding messages of the links' sources and replicas,
    read a few queries per store (`ends_of`), so that the links with nothing pending are told
    without reading them topic by topic and group by group: a deployment of 100,000
    partitions samples its idle links cheaply (issue 33). The others are read in full
    (`_pending`), by the same rule: a partition lags when its high watermark is past both the
    replica's end and its own low watermark (engine/replicator.py `_backlog`)."""
    wanted: dict[int, tuple[object, set[UUID]]] = {}
    for link in links:
        for cluster, stream in ((sources[link.source_id].cluster, sources[link.source_id].uuid),
                                (link.replica.cluster, link.replica.uuid)):
            wanted.setdefault(cluster.pk, (cluster, set()))[1].add(stream)
    ends: dict[tuple[UUID, str, int], tuple[int, int]] = {}
    for cluster, streams in wanted.values():
        ends.update(store_for(cluster).ends_of(sorted(streams)))
    return ends


def _pending(source: Stream, link: ReplicaLink, topics: dict[str, UUID]) -> PendingFigures:
    backlog = pending(store_for(source.cluster), source.uuid, store_for(link.replica.cluster),
                      link.replica.uuid, carried_topics(link.replica.uuid, topics))
    return PendingFigures(min_ts=backlog.min_ts or 0, max_ts=backlog.max_ts or 0,
                          bytes=backlog.bytes, messages=backlog.messages)


def time_lag(pending: PendingFigures) -> float:
    """Seconds: the age of the oldest message the replica has not applied yet."""
    if not pending.messages or not pending.min_ts:
        return 0.0
    return max(0.0, round(time.time() - pending.min_ts / 1000, 3))


def epoch_ms(moment: datetime | None) -> int | None:
    return None if moment is None else int(moment.timestamp() * 1000)


@dataclass(frozen=True)
class LinkStatus:
    """How a replica link is doing now, from its row and its backlog."""

    state: str  # ReplicaState
    up_to_date: bool
    copy_percentage: int
    pending: PendingFigures
    time_lag: float
    stalled: bool  # a backlog, yet nothing applied for REPLICATION_STALL_SECONDS
    errors: list[str]  # the last error (naming its gateway), and a stall


def link_status(link: ReplicaLink, pending: PendingFigures) -> LinkStatus:
    state = link.replica_state()
    replicating = state == ReplicaState.REPLICATING
    stalled = link_is_stalled(link, pending.messages)
    return LinkStatus(
        state=state,
        up_to_date=replicating and not link.paused and pending.messages == 0,
        # Replicating means any initial copy is over (or none was asked for, as in a manual
        # setup), which MapR reports as 100.
        copy_percentage=100 if replicating else link.copy_percentage,
        pending=pending, time_lag=time_lag(pending), stalled=stalled,
        errors=_errors(link, pending, stalled))


def link_statuses(links: Iterable[ReplicaLink]) -> dict[int, LinkStatus]:
    """Per link id, its status; the stores asked once for all the links."""
    links = list(links)
    pending = pending_figures(links)
    return {link.pk: link_status(link, pending[link.pk]) for link in links}


def _errors(link: ReplicaLink, pending: PendingFigures, stalled: bool) -> list[str]:
    errors = []
    if link.last_error:
        by = link.last_error_gateway
        named = not by or f"gateway {by}" in link.last_error
        errors.append(link.last_error if named else f"{link.last_error} (gateway {by})")
    if stalled:
        errors.append(f"stalled: {pending.messages} messages pending and none applied "
                      f"for over {settings.REPLICATION_STALL_SECONDS:g}s")
    return errors


def replica_links(stream: Stream) -> list[ReplicaLink]:
    """The stream's links to its replicas, in idx order, with their agreement."""
    return list(ReplicaLink.objects.filter(source=stream).select_related("replica__cluster")
                .with_agreement().order_by("idx"))
