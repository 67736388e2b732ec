""""replica.lag" events for the browser, from what the replicator's plans read.

At most one event a second per link, and only when its backlog or stalled flag changed: the
messages and bytes pending come from the last plan (the source's high watermarks and the
replica's ends it planned from); the time lag needs one row read per lagging partition.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import structlog
from django.conf import settings

from replication.engine.replicator import Backlog, oldest_timestamp
from replication.engine.store import now_ms
from replication.models import MovingLink
from replication.services.linknotes import link_lag_publish
from replication.stores import store_for

log = structlog.get_logger(__name__)
LAG_EVENTS = 1.0  # seconds between two rounds of events


@dataclass
class Lag:
    """A link's backlog as its last plan saw it."""

    link: MovingLink
    lagging: list[Backlog]
    moved: float  # when it last made progress (or was last seen caught up)

    @property
    def messages(self) -> int:
        return sum(lag.messages for lag in self.lagging)


@dataclass
class LagEvents:
    lags: dict[int, Lag] = field(default_factory=dict)
    published: dict[int, tuple[int, bool]] = field(default_factory=dict)  # (pending, stalled)
    # Links with a backlog, or whose last event showed one: looked at each round.
    lagging: set[int] = field(default_factory=set)
    next_round: float = 0.0

    def note(self, link: MovingLink, lagging: list[Backlog], now: float) -> None:
        known = self.lags.get(link.id)
        # A link caught up counts as moving: stalled needs a backlog that does not shrink.
        moved = known.moved if known and lagging else now
        self.lags[link.id] = Lag(link, lagging, moved)
        if lagging:
            self.lagging.add(link.id)

    def moved(self, link_id: int, now: float) -> None:
        if link_id in self.lags:
            self.lags[link_id].moved = now

    def applied(self, link_id: int, key: tuple[str, int], end: int) -> None:
        """The replica holds the partition up to `end`: its backlog shrinks without a plan."""
        lag = self.lags.get(link_id)
        if lag is None:
            return
        lag.lagging = [replace(b, start=max(b.start, end)) if b.key == key else b
                       for b in lag.lagging]
        lag.lagging = [b for b in lag.lagging if b.messages > 0]

    def keep(self, moving: set[int]) -> None:
        self.lags = {i: lag for i, lag in self.lags.items() if i in moving}
        self.published = {i: p for i, p in self.published.items() if i in moving}
        self.lagging &= moving

    def due(self) -> float | None:
        return self.next_round if self.lagging else None

    def publish(self, now: float) -> None:
        if not self.lagging or now < self.next_round:
            return
        self.next_round = now + LAG_EVENTS
        for link_id in list(self.lagging):
            lag = self.lags.get(link_id)
            messages = lag.messages if lag else 0
            if not messages:
                self.lagging.discard(link_id)  # one last event says it caught up
            if lag is None:
                continue
            stalled = bool(messages) and now - lag.moved > settings.REPLICATION_STALL_SECONDS
            if self.published.get(link_id, (0, False)) == (messages, stalled):
                continue
            self.published[link_id] = (messages, stalled)
            try:
                _publish(lag, messages, stalled)
            except Exception as error:  # the live view misses one update; data moves on
                log.warning("lag_event_failed", link=link_id, error=str(error))


def _publish(lag: Lag, messages: int, stalled: bool) -> None:
    link, lag_ms = lag.link, 0
    if messages:
        oldest = oldest_timestamp(store_for(link.source_cluster), link.source, lag.lagging)
        lag_ms = max(now_ms() - oldest, 0) if oldest is not None else 0
    link_lag_publish(link=link, messages=messages, nbytes=sum(b.bytes for b in lag.lagging),
                     lag_ms=lag_ms, stalled=stalled)
