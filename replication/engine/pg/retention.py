"""Removing rows from the PostgreSQL store: retention by age, truncation, dropped topics and
streams."""

from __future__ import annotations

from uuid import UUID

import psycopg
from psycopg import sql

from replication.engine.batches import expire_end
from replication.engine.pg.catalog import Catalog
from replication.engine.pg.schema import EXPIRE_CUT, EXPIRE_DELETE, LOCK, TRUNCATE


class Retention(Catalog):
    """Rows removed: by age, by truncation, with their topic or stream."""

    def expire(self, stream: UUID, *, before_ms: int, batch: int = 10_000) -> int:
        with self._pool.connection() as conn:
            parts = conn.execute(
                "SELECT id, low_offset FROM partitions WHERE stream = %s ORDER BY id", (stream,)
            ).fetchall()
            done = 0
            for pid, low in parts:
                if done >= batch:
                    break
                done += self._expire_partition(conn, pid, low, before_ms, batch - done)
        return done

    @staticmethod
    def _expire_partition(
        conn: psycopg.Connection, pid: int, low: int, before_ms: int, limit: int
    ) -> int:
        with conn.transaction():
            young, last = conn.execute(EXPIRE_CUT, (before_ms, pid, low, limit)).fetchone()
            end = expire_end(young, last)
            if end is None or end <= low:
                return 0
            return _cut_prefix(conn, pid, low, end)

    def trim(self, stream: UUID, topic: str, partition: int, end: int, *,
             batch: int = 10_000) -> int:
        with self._pool.connection() as conn, conn.transaction():
            pid = self._pid(conn, stream, topic, partition)
            low, nxt = conn.execute("SELECT low_offset, next_offset FROM partitions "
                                    "WHERE id = %s", (pid,)).fetchone()
            cut = min(end, nxt, low + batch)
            return _cut_prefix(conn, pid, low, cut) if cut > low else 0

    def truncate(self, stream: UUID, topic: str, partition: int, offset: int) -> int:
        with self._pool.connection() as conn, conn.transaction():
            pid = self._pid(conn, stream, topic, partition)
            nxt = conn.execute(LOCK, ([pid],)).fetchone()[2]
            if offset >= nxt:
                return 0
            count, size = conn.execute(EXPIRE_DELETE, (pid, offset, nxt)).fetchone()
            conn.execute(TRUNCATE, {"off": offset, "n": count, "b": size, "id": pid})
            for table in ("replication_cursors", "consumer_cursors"):
                column = "next_offset" if table == "replication_cursors" else "offset"
                conn.execute(
                    sql.SQL("UPDATE {t} SET {c} = %s WHERE pid = %s AND {c} > %s").format(
                        t=sql.Identifier(table), c=sql.Identifier(column)),
                    (offset, pid, offset),
                )
        return count

    def drop_stream(self, stream: UUID) -> None:
        self._drop(stream, None)

    def drop_topic(self, stream: UUID, topic: str) -> None:
        self._drop(stream, topic)

    def _drop(self, stream: UUID, topic: str | None) -> None:
        with self._pool.connection() as conn, conn.transaction():
            ids = [
                r[0]
                for r in conn.execute(
                    "SELECT id FROM partitions WHERE stream = %s AND (%s::text IS NULL OR "
                    "topic = %s) ORDER BY id FOR UPDATE", (stream, topic, topic)
                ).fetchall()
            ]
            for table in ("messages", "replication_cursors", "consumer_cursors",
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


def _cut_prefix(conn: psycopg.Connection, pid: int, low: int, end: int) -> int:
    """Delete offsets [low, end) of a partition. The DELETE locks only old rows, which appenders
    never touch; the partitions row (which they lock) is updated last, just before the commit,
    so an appender waits at most for that commit, never for the delete."""
    count, size = conn.execute(EXPIRE_DELETE, (pid, low, end)).fetchone()
    conn.execute(
        "UPDATE partitions SET low_offset = greatest(low_offset, %s), "
        "rows = rows - %s, bytes = bytes - %s WHERE id = %s",
        (end, count, size, pid),
    )
    return count
