"""Cursors in the PostgreSQL store: consumer groups' committed offsets, and how far each
replica link delivered."""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

from replication.engine.pg.catalog import Catalog
from replication.engine.pg.schema import MERGE_CURSORS
from replication.engine.store import CursorKey


class Cursors(Catalog):
    """Consumer groups' offsets and replica links' delivery cursors."""

    def replication_cursor(self, stream: UUID, link: str, topic: str, partition: int) -> int:
        with self._pool.connection() as conn:
            pid = self._pid(conn, stream, topic, partition)
            row = conn.execute(
                "SELECT next_offset FROM replication_cursors WHERE pid = %s AND link = %s",
                (pid, link),
            ).fetchone()
        return row[0] if row else 0

    def commit_cursor(
        self, stream: UUID, group: str, topic: str, partition: int, offset: int
    ) -> None:
        with self._pool.connection() as conn:
            pid = self._pid(conn, stream, topic, partition)
            conn.execute(
                'INSERT INTO consumer_cursors (pid, grp, "offset") VALUES (%s, %s, %s) '
                'ON CONFLICT (pid, grp) DO UPDATE SET "offset" = excluded."offset"',
                (pid, group, offset),
            )

    def fetch_cursor(self, stream: UUID, group: str, topic: str, partition: int) -> int | None:
        with self._pool.connection() as conn:
            pid = self._pid(conn, stream, topic, partition)
            row = conn.execute(
                'SELECT "offset" FROM consumer_cursors WHERE pid = %s AND grp = %s', (pid, group)
            ).fetchone()
        return row[0] if row else None

    def cursors(self, stream: UUID) -> list[tuple[str, str, int, int]]:
        with self._pool.connection() as conn:
            rows = conn.execute(
                'SELECT c.grp, p.topic, p.partition, c."offset" FROM consumer_cursors c '
                "JOIN partitions p ON p.id = c.pid WHERE p.stream = %s "
                "ORDER BY c.grp, p.topic, p.partition",
                (stream,),
            ).fetchall()
        return [tuple(r) for r in rows]

    def merge_cursors(
        self, stream: UUID, cursors: Sequence[tuple[str, str, int, int]]
    ) -> dict[CursorKey, int]:
        if not cursors:
            return {}
        groups, topics, parts, offsets = map(list, zip(*cursors, strict=True))
        with self._pool.connection() as conn:
            rows = conn.execute(MERGE_CURSORS, (groups, topics, parts, offsets, stream)).fetchall()
        return {(g, t, p): o for g, t, p, o in rows}
