from __future__ import annotations

from collections.abc import Iterable

from django.db import connection
from django.db.models import Q

from replication.errors import Conflict
from replication.models import ReplicaLink, Stream, Topic
from replication.topology import origin_conflicts

# Any constant works: it names the one advisory lock that serialises topology changes, so two
# concurrent requests can't each pass the origin check and together break it.
TOPOLOGY_LOCK = 0x5347_544F


def topology_lock() -> None:
    """Serialise topology changes for the rest of the transaction."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [TOPOLOGY_LOCK])
    # SQLite (embedded mode) already admits one writer at a time.


def component(stream_ids: Iterable[int]) -> tuple[set[int], list[tuple[int, int]]]:
    """The streams linked to `stream_ids` in either direction, and their links."""
    seen, frontier = set(stream_ids), set(stream_ids)
    edges: set[tuple[int, int]] = set()
    while frontier:
        found = ReplicaLink.objects.filter(
            Q(source__in=frontier) | Q(replica__in=frontier)
        ).values_list("source_id", "replica_id")
        edges.update(found)
        frontier = {s for edge in found for s in edge} - seen
        seen |= frontier
    return seen, sorted(edges)


def holdings(stream_ids: Iterable[int]) -> dict[int, dict]:
    held: dict[int, dict] = {}
    for stream_id, name, origin in Topic.objects.filter(stream__in=stream_ids).values_list(
        "stream_id", "name", "origin_uuid"
    ):
        held.setdefault(stream_id, {})[name] = origin
    return held


def check_origins(
    stream_ids: Iterable[int],
    *,
    extra_edges: Iterable[tuple[int, int]] = (),
    extra_topics: dict[int, dict] | None = None,
) -> None:
    """Refuse a change after which two origins would feed one topic name into one stream."""
    extra_edges = list(extra_edges)
    streams, edges = component([*stream_ids, *(s for e in extra_edges for s in e)])
    held = holdings(streams)
    for stream_id, topics in (extra_topics or {}).items():
        held.setdefault(stream_id, {}).update(topics)
    conflicts = origin_conflicts([*edges, *extra_edges], held)
    if conflicts:
        raise Conflict(_describe(conflicts[0]))


def _describe(conflict) -> str:  # type: ignore[no-untyped-def]
    paths = dict(
        Stream.objects.filter(uuid__in=conflict.origins).values_list("uuid", "path")
    )
    stream = Stream.objects.get(pk=conflict.stream).path
    origins = ", ".join(sorted(paths.get(o, str(o)) for o in conflict.origins))
    return (
        f"topic name conflict: topic '{conflict.topic}' would reach {stream} from more than "
        f"one origin ({origins}); messages with clashing offsets would be lost. Rename the "
        "topic in one stream so that each topic name has a single origin"
    )


def propagate_topics(stream_ids: Iterable[int]) -> None:
    """Copy topic metadata downstream along agreed links, so replicas hold every topic of
    their sources (DESIGN.md invariant 7), including topics and partitions added later."""
    frontier = set(stream_ids)
    while frontier:
        links = ReplicaLink.objects.agreed().filter(source__in=frontier)
        changed: set[int] = set()
        for source_id, replica_id in links.values_list("source_id", "replica_id"):
            if _copy_topics(source_id, replica_id):
                changed.add(replica_id)
        frontier = changed


# A topic's compaction overrides (issue 31), carried to its replicas' rows so a replica's
# `stream topic info` and API show the origin's policy, as its compactor follows it.
CARRIED = ("cleanuppolicy", "mincompactionlag", "deleteretention", "mincleanabledirtyratio")


def _copy_topics(source_id: int, replica_id: int) -> bool:
    theirs = {t.name: t for t in Topic.objects.filter(stream_id=source_id)}
    mine = {t.name: t for t in Topic.objects.filter(stream_id=replica_id, name__in=theirs)}
    created = [
        Topic(
            stream_id=replica_id,
            name=name,
            partitions=topic.partitions,
            timestamptype=topic.timestamptype,
            origin_uuid=topic.origin_uuid,
            **{field: getattr(topic, field) for field in CARRIED},
        )
        for name, topic in theirs.items()
        if name not in mine
    ]
    for name, topic in mine.items():
        if topic.origin_uuid != theirs[name].origin_uuid:
            # check_origins refuses such topologies; reaching here means a rule was bypassed.
            raise Conflict(f"topic '{name}' has two origins; refusing to merge them")
    changed = [t for name, t in mine.items() if _carry(theirs[name], t)]
    Topic.objects.bulk_create(created)
    Topic.objects.bulk_update(changed, ["partitions", *CARRIED])
    return bool(created or changed)


def _carry(source: Topic, replica: Topic) -> bool:
    """Bring a replica's row up to its source's: partitions grow, overrides follow; whether
    anything changed."""
    changed = replica.partitions < source.partitions
    replica.partitions = max(replica.partitions, source.partitions)
    for field in CARRIED:
        if getattr(replica, field) != getattr(source, field):
            setattr(replica, field, getattr(source, field))
            changed = True
    return changed


def next_idx(used: Iterable[int], limit: int, what: str) -> int:
    taken = set(used)
    for idx in range(1, limit + 1):
        if idx not in taken:
            return idx
    raise Conflict(f"{what}: the limit of {limit} is reached; remove one first")
