"""Reading the PostgreSQL store: message rows in binary, producer states, the size on disk."""

from __future__ import annotations

import psycopg

from replication.engine.pg.catalog import Catalog
from replication.engine.pg.schema import READ, SEQ_ALL, SEQ_GET
from replication.engine.sequences import ProducerState


class Reading(Catalog):
    """What the shared reads (storebase.py) need of PostgreSQL."""

    def _rows(self, conn: psycopg.Connection, pid: int, offset: int, end: int,
              max_bytes: int) -> list[tuple]:
        return conn.cursor(binary=True).execute(READ, (pid, offset, end, max_bytes)).fetchall()

    def _state(self, conn: psycopg.Connection, pid: int, producer_id: int) -> ProducerState | None:
        row = conn.execute(SEQ_GET, (pid, producer_id)).fetchone()
        return ProducerState(row[0], *map(tuple, row[1:])) if row else None

    def _states(self, conn: psycopg.Connection, pid: int) -> dict[int, ProducerState]:
        return {row[0]: ProducerState(row[1], *map(tuple, row[2:]))
                for row in conn.execute(SEQ_ALL, (pid,))}

    def _disk(self, conn: psycopg.Connection) -> tuple[int, int, int]:
        """The message table's real size on disk (heap, TOAST, indexes; bloat included until
        vacuum)."""
        return conn.execute(
            "SELECT coalesce(sum(bytes), 0), coalesce(sum(rows), 0), "
            "pg_total_relation_size('messages') FROM partitions"
        ).fetchone()
