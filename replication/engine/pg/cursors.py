"""Cursors in the PostgreSQL store: what of consumer groups' committed offsets is written in
PostgreSQL's own way (the shared rest is in storebase.py)."""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

from replication.engine.pg.catalog import Catalog
from replication.engine.pg.schema import MERGE_CURSORS
from replication.engine.store import CursorKey


class Cursors(Catalog):
    """Consumer groups' offsets merged from an origin."""

    def merge_cursors(
        self, stream: UUID, cursors: Sequence[tuple[str, str, int, int]]
    ) -> dict[CursorKey, int]:
        if not cursors:
            return {}
        groups, topics, parts, offsets = map(list, zip(*cursors, strict=True))
        with self._pool.connection() as conn:
            rows = conn.execute(MERGE_CURSORS, (groups, topics, parts, offsets, stream)).fetchall()
        return {(g, t, p): o for g, t, p, o in rows}
