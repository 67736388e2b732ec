"""Removing rows from the PostgreSQL store: retention by age, truncation, dropped topics and
streams."""

from __future__ import annotations

from uuid import UUID

import psycopg
from psycopg import sql

from replication.engine.pg.catalog import Catalog
from replication.engine.pg.schema import EXPIRE_DELETE, LOCK


class Retention(Catalog):
    """Rows removed in PostgreSQL's way: counted as they are deleted, with their topic or
    stream (retention, purge and truncation themselves are in storebase.py)."""

    def _delete_range(self, conn: psycopg.Connection, pid: int, low: int,
                      end: int) -> tuple[int, int]:
        # The DELETE locks only old rows, which appenders never touch.
        return conn.execute(EXPIRE_DELETE, (pid, low, end)).fetchone()

    def _lock(self, conn: psycopg.Connection, pid: int) -> tuple[int, int]:
        return conn.execute(LOCK, ([pid],)).fetchone()[1:]

    def _drop(self, stream: UUID, topic: str | None) -> None:
        with self._pool.connection() as conn, conn.transaction():
            ids = [
                r[0]
                for r in conn.execute(
                    "SELECT id FROM partitions WHERE stream = %s AND (%s::text IS NULL OR "
                    "topic = %s) ORDER BY id FOR UPDATE", (stream, topic, topic)
                ).fetchall()
            ]
            for table in (self.DATA_TABLE, "replication_cursors", "consumer_cursors",
                          "producer_sequences", "partitions"):
                column = "id" if table == "partitions" else "pid"
                conn.execute(
                    sql.SQL("DELETE FROM {} WHERE {} = ANY(%s)").format(
                        sql.Identifier(table), sql.Identifier(column)),
                    (ids,),
                )
        gone = set(ids)
        self._pids = {k: v for k, v in self._pids.items() if v not in gone}
        self._topics = {k: v for k, v in self._topics.items()
                        if k[0] != stream or (topic is not None and k[1] != topic)}
