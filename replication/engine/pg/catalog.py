"""The PostgreSQL store's connection pool and its catalog of topics and partitions: the ids the
other parts of the store (append, apply, reads, cursors, retention) address rows by."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from uuid import UUID

import psycopg
from psycopg_pool import ConnectionPool

from replication.engine.copies import StoreGroup, pg_group
from replication.engine.pg.schema import (
    CURSOR_ADDED,
    CURSOR_COLUMNS,
    SCHEMA,
    SCHEMA_LOCK,
    VALUE_DROP_NOT_NULL,
    VALUE_NOT_NULL,
    configure_connection,
)
from replication.engine.store import Key
from replication.engine.storebase import MessageStore


class Catalog(MessageStore):
    """The pool, the schema, and the partition ids of each topic, cached (ids never change; a
    topic's list may grow, which appends check). Thread-safe: each call takes a connection
    from the pool."""

    ROW_OVERHEAD = 88  # tuple header, fixed columns, line pointer, index entry
    DATA_TABLE = "messages"  # where the messages are: a row each, or a batch a row (pgbatch)

    def __init__(self, url: str, *, max_connections: int = 8, wait: float = 5.0) -> None:
        """`wait`: how long a call waits for a connection (and a connection for the server)
        before it fails: a store that is down costs its callers seconds, not half a minute."""
        super().__init__()
        self.url = url  # what a Spark task opens the store by (workers/spark/compaction.py)
        self._pool = ConnectionPool(
            url,
            min_size=1,
            max_size=max_connections,
            kwargs={"autocommit": True, "connect_timeout": max(2, round(wait))},
            configure=configure_connection,
            open=True,
            name="sgstore",
            timeout=wait,
        )
        # A topic's list of partition ids may grow (checked at each append).
        self._topics: dict[tuple[UUID, str], list[int]] = {}
        # Partition ids of this store as a source, by (stream, replica stream, topic,
        # partition), once a piped batch checked their messages' origin against that replica
        # stream (apply.py).
        self._spids: dict[tuple[UUID, UUID, str, int], int] = {}
        with self._pool.connection() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
            self._create_schema(conn)

    def _create_schema(self, conn: psycopg.Connection) -> None:
        """The tables, made or brought up to date (under the schema lock)."""
        conn.execute(SCHEMA)
        present = {row[0] for row in conn.execute(CURSOR_COLUMNS)}
        for column, add in CURSOR_ADDED.items():
            if column not in present:
                conn.execute(add)
        if conn.execute(VALUE_NOT_NULL).fetchone()[0]:  # a store made before null values
            conn.execute(VALUE_DROP_NOT_NULL)

    def _reading(self) -> AbstractContextManager[psycopg.Connection]:
        return self._pool.connection()

    @contextmanager
    def _writing(self) -> Iterator[psycopg.Connection]:
        with self._pool.connection() as conn, conn.transaction():
            yield conn

    def _key(self, stream: UUID) -> UUID:
        return stream

    def close(self) -> None:
        self._pool.close()

    def group(self) -> StoreGroup:
        """The replicated group the store's primary serves: members, roles, lag, copies."""
        with self._pool.connection() as conn:
            return pg_group(conn)

    def _ensure(self, stream: UUID, topic: str, partitions: int) -> None:
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

    def _partition_ids(self, conn: psycopg.Connection, stream: UUID,
                       need: dict[str, int]) -> dict[Key, int]:
        # Sorted, so two appliers creating the same partitions insert them in one order.
        topics = sorted(need)
        self._grow(conn, stream, topics, [need[t] for t in topics])
        rows = conn.execute(
            "SELECT topic, partition, id FROM partitions WHERE stream = %s AND topic = ANY(%s)",
            (stream, topics),
        ).fetchall()
        return {(t, p): pid for t, p, pid in rows}

    def _topic_cache(self, stream: UUID, topic: str) -> list[int]:
        ids = self._topics.get((stream, topic))
        if ids is None:
            with self._pool.connection() as conn:
                ids = self._topics[(stream, topic)] = self._topic_ids(conn, stream, topic)
        return ids
