"""Replication health at a glance, from what the lag recorder last sampled (no store reads,
so the overview costs the same whatever the backlog): per link, then per stream as the worst
of the links it is a source or a replica of."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from replication.lag_history import Point, lag_latest
from replication.models import ReplicaLink, ReplicaState, SyncMode


@dataclass(frozen=True)
class Health:
    """How a person reads a link's state: `label` first on every page, MapR's replicaState
    as secondary text; `css` is also the topology's edge class and the filter's value."""

    label: str
    css: str
    rank: int  # higher is worse


IN_SYNC = Health("In sync", "insync", 0)
SYNCHRONOUS = Health("Synchronous", "sync", 0)
UNKNOWN = Health("Not sampled yet", "unknown", 1)
PENDING = Health("Pending", "pending", 2)
FELL_BACK = Health("Fell back to asynchronous", "fellback", 3)
PAUSED = Health("Paused", "paused", 4)
WAITING = Health("Waiting for approval", "waiting", 5)
STALLED = Health("Stalled", "stalled", 6)
BROKEN = Health("Broken", "broken", 7)
ALL = (IN_SYNC, SYNCHRONOUS, UNKNOWN, PENDING, FELL_BACK, PAUSED, WAITING, STALLED, BROKEN)
COPYING = (ReplicaState.COPY_SCHEDULE, ReplicaState.COPY_IN_PROGRESS,
           ReplicaState.COPY_IN_RECOVER, ReplicaState.CREATE_SCHEDULE)


def link_health(link: ReplicaLink, point: Point | None) -> Health:
    if link.last_error or link.state == ReplicaState.UNEXPECTED:
        return BROKEN
    if not link.agreed:
        return WAITING
    if link.paused:
        return PAUSED
    if link.state in COPYING:
        return PENDING
    if point is None:
        return UNKNOWN
    if point[4]:
        return STALLED
    if link.synchronous:
        return SYNCHRONOUS if link.mode == SyncMode.SYNC else FELL_BACK
    return PENDING if point[1] else IN_SYNC


# What link_health reads, as values() fetches it: the overview and the topology classify
# thousands of links without building a model instance each.
LINK_VALUES = ("pk", "source_id", "replica_id", "paused", "synchronous", "mode", "state",
               "last_error", "is_agreed")


class LinkValues:
    """A links' values() row with the attributes `link_health` reads."""

    __slots__ = ("agreed", "last_error", "mode", "paused", "state", "synchronous")

    def __init__(self, row: dict) -> None:
        self.agreed = row["is_agreed"]
        for name in ("last_error", "state", "paused", "synchronous", "mode"):
            setattr(self, name, row[name])


def rows_health(rows: list[dict]) -> None:
    """Set "health" and "point" (the last lag sample) on each values() row, in place."""
    latest = lag_latest(row["pk"] for row in rows)
    for row in rows:
        row["point"] = latest.get(row["pk"])
        row["health"] = link_health(LinkValues(row), row["point"])  # type: ignore[arg-type]


def links_health(links: Iterable[ReplicaLink]) -> dict[int, tuple[Health, Point | None]]:
    """Per link: its health and last sample."""
    links = list(links)
    latest = lag_latest(link.pk for link in links)
    return {link.pk: (link_health(link, latest.get(link.pk)), latest.get(link.pk))
            for link in links}


def streams_health(rows: Iterable[dict]) -> dict[int, Health]:
    """Per stream id, the worst health of the links it is a source or a replica of."""
    worst: dict[int, Health] = {}
    for row in rows:
        found = row["health"]
        for stream_id in (row["source_id"], row["replica_id"]):
            if stream_id not in worst or found.rank > worst[stream_id].rank:
                worst[stream_id] = found
    return worst
