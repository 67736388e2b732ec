"""Consumer cursors copied to the replicas by the replicator rather than a gateway: cursors
change without new data (a consumer commits after the replica caught up), and only the source
side hears of that (a wake-up marked CURSORS_CHANGED)."""

from __future__ import annotations

from dataclasses import dataclass, field

import structlog

from replication.engine.replicator import sync_cursors
from replication.engine.store import CursorKey
from replication.models import MovingLink
from replication.stores import store_for

log = structlog.get_logger(__name__)


@dataclass
class CursorCopies:
    # Per link, each consumer cursor as last copied to the replica (see sync_cursors).
    synced: dict[int, dict[CursorKey, tuple[int, str, int]]] = field(default_factory=dict)
    owed: set[int] = field(default_factory=set)  # links with cursors clamped to the replica end

    def due(self, link_id: int, asked: bool) -> bool:
        """Whether a plan of the link copies cursors: when a wake-up or the sweep asks, while
        some wait for data (owed), and at the link's first plan."""
        return asked or link_id in self.owed or link_id not in self.synced

    def sync(self, link: MovingLink) -> None:
        synced = self.synced.setdefault(link.id, {})
        try:
            owed = sync_cursors(store_for(link.source_cluster), link.source,
                                store_for(link.replica_cluster), link.replica, link.topics, synced)
        except Exception as error:  # retried on the next pump; data keeps moving meanwhile
            log.warning("cursor_sync_failed", link=link.id, error=str(error))
            owed = 1
        if owed:
            self.owed.add(link.id)
        else:
            self.owed.discard(link.id)

    def keep(self, moving: set[int]) -> None:
        self.synced = {i: c for i, c in self.synced.items() if i in moving}
        self.owed &= moving
