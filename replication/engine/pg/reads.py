"""Reading the PostgreSQL store: messages, watermarks, per-partition stats and sizes."""

from __future__ import annotations

from operator import itemgetter
from uuid import UUID

from replication.engine.batches import cut_to_bytes, messages_from_rows
from replication.engine.pg.catalog import Catalog
from replication.engine.pg.schema import READ, ROW_OVERHEAD, SEQ_GET
from replication.engine.sequences import ProducerState
from replication.engine.store import (
    PARTITION_STATS,
    Message,
    OffsetOutOfRange,
    PartitionStats,
    UnknownTopic,
    first_at_or_after,
    partition_stats_from,
)


class Reading(Catalog):
    """Messages, watermarks, stats and sizes."""

    def read(
        self,
        stream: UUID,
        topic: str,
        partition: int,
        offset: int,
        *,
        limit: int = 1000,
        max_bytes: int = 1 << 20,
    ) -> list[Message]:
        rows = self.read_rows(stream, topic, partition, offset, limit=limit, max_bytes=max_bytes)
        return messages_from_rows(topic, partition, rows, self._origins)

    def read_rows(
        self,
        stream: UUID,
        topic: str,
        partition: int,
        offset: int,
        *,
        limit: int = 1000,
        max_bytes: int = 1 << 20,
    ) -> list[tuple]:
        with self._pool.connection() as conn:
            pid = self._pid(conn, stream, topic, partition)
            rows = conn.cursor(binary=True).execute(READ, (pid, offset, offset + limit)).fetchall()
            if not rows or rows[0][0] != offset:
                low, high = self._range(conn, stream, topic, pid)
                if not low <= offset <= high:
                    raise OffsetOutOfRange(offset, low, high)
        return rows[: cut_to_bytes(map(itemgetter(7), rows), max_bytes)]

    def offset_for_time(self, stream: UUID, topic: str, partition: int,
                        timestamp_ms: int) -> tuple[int, int] | None:
        with self._pool.connection() as conn:
            pid = self._pid(conn, stream, topic, partition)
            low, high = self._range(conn, stream, topic, pid)

            def ts_at(offset: int) -> int:
                return conn.execute('SELECT ts FROM messages WHERE pid = %s AND "offset" = %s',
                                    (pid, offset)).fetchone()[0]

            found = first_at_or_after(low, high, ts_at, timestamp_ms)
            return (found, ts_at(found)) if found < high else None

    def producer_state(self, stream: UUID, topic: str, partition: int,
                       producer_id: int) -> ProducerState | None:
        with self._pool.connection() as conn:
            row = conn.execute(SEQ_GET, (self._pid(conn, stream, topic, partition),
                                         producer_id)).fetchone()
        return ProducerState(row[0], *map(tuple, row[1:])) if row else None

    def watermarks(self, stream: UUID, topic: str) -> dict[int, tuple[int, int]]:
        with self._pool.connection() as conn:
            rows = conn.execute(
                "SELECT partition, low_offset, next_offset FROM partitions "
                "WHERE stream = %s AND topic = %s ORDER BY partition",
                (stream, topic),
            ).fetchall()
        if not rows:
            raise UnknownTopic(f"topic {topic!r} does not exist in stream {stream}")
        return {p: (low, high) for p, low, high in rows}

    def partition_stats(self, stream: UUID, topic: str) -> list[PartitionStats]:
        with self._pool.connection() as conn:
            rows = conn.execute(PARTITION_STATS.format(p="%s"), (stream, topic)).fetchall()
        return partition_stats_from(rows, topic)

    def sizes(self, stream: UUID) -> dict:
        """logicalsize: maintained counters of key+value+header bytes. physicalsize: the message
        table's real size on disk (heap, TOAST, indexes; bloat included until vacuum),
        apportioned to the stream by its share of the counted bytes and rows."""
        with self._pool.connection() as conn:
            topics, nbytes, nrows = conn.execute(
                "SELECT count(DISTINCT topic), coalesce(sum(bytes), 0), coalesce(sum(rows), 0) "
                "FROM partitions WHERE stream = %s",
                (stream,),
            ).fetchone()
            all_bytes, all_rows, disk = conn.execute(
                "SELECT coalesce(sum(bytes), 0), coalesce(sum(rows), 0), "
                "pg_total_relation_size('messages') FROM partitions"
            ).fetchone()
        weight, total = nbytes + ROW_OVERHEAD * nrows, all_bytes + ROW_OVERHEAD * all_rows
        physical = disk * weight // total if total else 0
        return {"logicalsize": int(nbytes), "physicalsize": int(physical), "numtopics": topics}
