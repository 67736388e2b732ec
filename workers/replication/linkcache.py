"""The replicator's cache of moving links (loop.py).

Reading the links from the control database took two ORM queries for every wake-up and every
acknowledgement (most of the replicator's time in the profile, docs/benchmarks-history.md).
They change rarely, and every change wakes the source stream with a mark (replication.services.
wakeups.LINKS_CHANGED), so they are read on such a wake-up, on the sweep, for ids the watch has not
seen, on the first wake-up of a replica of a marked stream (topics reach replicas by a bulk
insert, which marks nothing), and on a plain wake-up of a source with links read more than
LINK_REFRESH ago (a safety net). A plain wake-up of a stream without moving links reads
nothing: a link that starts moving saves a row (marked wake-up) and the watch finds it anyway.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import structlog

from replication.models import MovingLink, ReplicaLink
from replication.stores import store_for

log = structlog.get_logger(__name__)

LINK_REFRESH = 5.0  # seconds a plain wake-up trusts the cached links of its stream


@dataclass
class LinkCache:
    links: dict[int, MovingLink] = field(default_factory=dict)
    by_source: dict[str, set[int]] = field(default_factory=dict)
    read_at: dict[str, float] = field(default_factory=dict)  # per source, when last read
    changed: set[str] = field(default_factory=set)  # sources woken with the mark

    def __contains__(self, link_id: int) -> bool:
        return link_id in self.links

    def of_sources(self, streams: set[str]) -> set[int]:
        return {i for stream in streams for i in self.by_source.get(stream, ())}

    def reload(self, now: float) -> None:
        """Every moving link (the sweep)."""
        self.links, self.by_source, self.changed = {}, {}, set()
        for link in ReplicaLink.objects.moving_links():
            self._remember(link)
        self.read_at = dict.fromkeys(self.by_source, now)

    def refresh(self, streams: set[str], ids: set[int], now: float) -> None:
        """Re-read the links of streams whose links changed or were read too long ago, and the
        given ids not in the cache; two queries, or none when the cache holds."""
        stale = {s for s in streams if s in self.changed or (
            self.by_source.get(s) and now - self.read_at.get(s, float("-inf")) > LINK_REFRESH)}
        unknown = ids - set(self.links)
        if not (stale or unknown):
            return
        marked = stale & self.changed
        self.changed -= stale
        fresh = ReplicaLink.objects.moving_links(sources=stale, ids=unknown)
        for stream in stale:
            for link_id in list(self.by_source.get(stream, ())):
                self.forget(link_id)  # paused, removed or disagreed since: not in `fresh`
            self.read_at[stream] = now
        for link in fresh:
            self._remember(link)
            if str(link.source) in marked:
                # A new topic is copied down to the replicas by a bulk insert (no mark of
                # their own): their links are read again when the data wakes them.
                self.changed.add(str(link.replica))

    def keep(self, moving: set[int]) -> None:
        """The watch's answer: links no longer moving leave the cache at once."""
        for gone in set(self.links) - moving:
            self.forget(gone)

    def forget(self, link_id: int) -> None:
        link = self.links.pop(link_id, None)
        if link is not None:
            self.by_source.get(str(link.source), set()).discard(link_id)

    def _remember(self, link: MovingLink) -> None:
        self.forget(link.id)
        self.links[link.id] = link
        self.by_source.setdefault(str(link.source), set()).add(link.id)


class SweepMarks:
    """The sweep plans a link only if its source or replica stream changed since the sweep
    before (`MessageStore.stream_marks`, two queries a store), or it is in `always`: a lost
    wake-up changes the source's marks. Planning every link read the partitions and cursors of
    both ends, four queries a link, most of an idle replicator's CPU with 1,000 links."""

    def __init__(self) -> None:
        self.seen: dict[int, tuple] = {}

    def changed(self, links: list[MovingLink], always: set[int]) -> list[MovingLink]:
        marks: dict[int, dict | None] = {}

        def of(cluster) -> dict | None:  # type: ignore[no-untyped-def]
            store = store_for(cluster)
            if id(store) not in marks:
                try:
                    marks[id(store)] = store.stream_marks()
                except Exception as error:  # a store down: its links are planned, and say so
                    log.warning("sweep_marks_failed", error=str(error))
                    marks[id(store)] = None
            return marks[id(store)]

        seen, due = {}, []
        for link in links:
            source, replica = of(link.source_cluster), of(link.replica_cluster)
            now = None if source is None or replica is None else (
                source.get(link.source), replica.get(link.replica))
            if now is None or link.id in always or self.seen.get(link.id) != now:
                due.append(link)
            if now is not None:
                seen[link.id] = now
        self.seen = seen
        return due
