"""The PostgreSQL store's connection pool and its catalog of topics and partitions: the ids the
other parts of the store (append, apply, reads, cursors, retention) address rows by."""

from __future__ import annotations

from uuid import UUID

import psycopg
from psycopg_pool import ConnectionPool

from replication.engine.batches import OriginCache
from replication.engine.pg.schema import SCHEMA, SCHEMA_LOCK, configure_connection
from replication.engine.store import PartitionOutOfRange, StoreError, UnknownTopic


class Catalog:
    """The pool, the schema, and the partition ids of each topic, cached (ids never change; a
    topic's list may grow, which appends check). Thread-safe: each call takes a connection
    from the pool."""

    def __init__(self, url: str, *, max_connections: int = 8) -> None:
        self._pool = ConnectionPool(
            url,
            min_size=1,
            max_size=max_connections,
            kwargs={"autocommit": True},
            configure=configure_connection,
            open=True,
            name="sgstore",
        )
        # Partition ids never change; a topic's list may grow (checked at each append).
        self._pids: dict[tuple[UUID, str, int], int] = {}
        self._topics: dict[tuple[UUID, str], list[int]] = {}
        self._origins = OriginCache()
        self._rr = 0  # round-robin counter; a lost update between threads only skews balance
        with self._pool.connection() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
            conn.execute(SCHEMA)

    def close(self) -> None:
        self._pool.close()

    def ensure_topic(self, stream: UUID, topic: str, partitions: int) -> None:
        if partitions < 1:
            raise StoreError(f"a topic needs at least one partition, not {partitions}")
        with self._pool.connection() as conn:
            self._grow(conn, stream, [topic], [partitions])
        self._topics.pop((stream, topic), None)

    @staticmethod
    def _grow(conn: psycopg.Connection, stream: UUID, topics: list[str], counts: list[int]) -> None:
        conn.execute(
            "INSERT INTO partitions (stream, topic, partition) "
            "SELECT %s, t, g FROM unnest(%s::text[], %s::int4[]) u(t, n), "
            "generate_series(0, n - 1) g ON CONFLICT DO NOTHING",
            (stream, topics, counts),
        )

    def partitions(self, stream: UUID, topic: str) -> int:
        with self._pool.connection() as conn:
            return len(self._topic_ids(conn, stream, topic))

    @staticmethod
    def _topic_ids(conn: psycopg.Connection, stream: UUID, topic: str) -> list[int]:
        rows = conn.execute(
            "SELECT id FROM partitions WHERE stream = %s AND topic = %s ORDER BY partition",
            (stream, topic),
        ).fetchall()
        if not rows:
            raise UnknownTopic(f"topic {topic!r} does not exist in stream {stream}")
        return [r[0] for r in rows]

    def _pid(self, conn: psycopg.Connection, stream: UUID, topic: str, partition: int) -> int:
        pid = self._pids.get((stream, topic, partition))
        if pid is None:
            ids = self._topic_ids(conn, stream, topic)
            if not 0 <= partition < len(ids):
                raise PartitionOutOfRange(
                    f"partition {partition} does not exist: topic {topic!r} has partitions "
                    f"0..{len(ids) - 1}"
                )
            pid = self._pids[(stream, topic, partition)] = ids[partition]
        return pid

    def _topic_cache(self, stream: UUID, topic: str) -> list[int]:
        ids = self._topics.get((stream, topic))
        if ids is None:
            with self._pool.connection() as conn:
                ids = self._topics[(stream, topic)] = self._topic_ids(conn, stream, topic)
        return ids

    def _range(
        self, conn: psycopg.Connection, stream: UUID, topic: str, pid: int
    ) -> tuple[int, int]:
        row = conn.execute(
            "SELECT low_offset, next_offset FROM partitions WHERE id = %s", (pid,)
        ).fetchone()
        if row is None:  # dropped by another process after this one cached the id
            self._pids = {k: v for k, v in self._pids.items() if v != pid}
            raise UnknownTopic(f"topic {topic!r} does not exist in stream {stream}")
        return row
