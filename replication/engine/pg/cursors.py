"""Cursors in the PostgreSQL store: what of consumer groups' committed offsets is written in
PostgreSQL's own way (the shared rest is in storebase.py)."""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

from replication.engine.pg.catalog import Catalog
from replication.engine.pg.schema import MERGE_CURSORS
from replication.engine.store import Committed, CursorKey


class Cursors(Catalog):
    """Consumer groups' offsets merged from an origin."""

    def merge_cursors(
        self, stream: UUID, cursors: Sequence[Committed | tuple[str, str, int, int]]
    ) -> dict[CursorKey, int]:
        if not cursors:
            return {}
        merged = [Committed(*cursor) for cursor in cursors]
        groups, topics, parts, offsets, metadata, epochs = map(list, zip(*merged, strict=True))
        blobs = [m.encode() for m in metadata]
        with self._pool.connection() as conn:
            rows = conn.execute(MERGE_CURSORS, (groups, topics, parts, offsets, blobs, epochs,
                                                stream)).fetchall()
        return {(g, t, p): o for g, t, p, o in rows}
