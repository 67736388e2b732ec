"""The message store on PostgreSQL: one database per cluster, rows in and out in binary.

Messages are keyed by a partition id (an int naming the partitions row) and the offset rather
than by (stream, topic, partition, offset): the primary key index is half the size and binary
COPY into it measured faster (docs/benchmarks.md).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from uuid import UUID

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.pq import TransactionStatus
from psycopg.types.string import BytesBinaryDumper
from psycopg_pool import ConnectionPool

from replication.engine.store import (
    PARTITION_STATS,
    Ends,
    Key,
    Message,
    OffsetOutOfRange,
    OriginCache,
    PartitionOutOfRange,
    PartitionStats,
    Plan,
    Record,
    StoreError,
    UnknownTopic,
    cut_to_bytes,
    expire_end,
    group_runs,
    layout_apply,
    layout_batch,
    messages_from_rows,
    partition_stats_from,
    plan_partitions,
    trim_runs,
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS partitions (
    id integer GENERATED ALWAYS AS IDENTITY UNIQUE,
    stream uuid NOT NULL,
    topic text NOT NULL,
    partition integer NOT NULL,
    next_offset bigint NOT NULL DEFAULT 0,
    low_offset bigint NOT NULL DEFAULT 0,
    rows bigint NOT NULL DEFAULT 0,
    bytes bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (stream, topic, partition)
);
-- No foreign key to partitions: a per-row check would cost COPY throughput, and rows of a
-- partition are only deleted with it (drop_stream).
CREATE TABLE IF NOT EXISTS messages (
    pid integer NOT NULL,
    "offset" bigint NOT NULL,
    ts bigint NOT NULL,
    key bytea,
    value bytea NOT NULL,
    headers bytea,
    origin uuid NOT NULL,
    producer text,
    PRIMARY KEY (pid, "offset")
);
CREATE TABLE IF NOT EXISTS replication_cursors (
    pid integer NOT NULL,
    link text NOT NULL,
    next_offset bigint NOT NULL,
    PRIMARY KEY (pid, link)
);
CREATE TABLE IF NOT EXISTS consumer_cursors (
    pid integer NOT NULL,
    grp text NOT NULL,
    "offset" bigint NOT NULL,
    PRIMARY KEY (pid, grp)
);
"""
_SCHEMA_LOCK = 0x5367_5374  # advisory lock: stores opening at once create the schema once

COPY_IN = (
    'COPY messages (pid, "offset", ts, key, value, headers, origin, producer) '
    "FROM STDIN (FORMAT BINARY)"
)
# origin goes in as its 16 raw bytes: binary bytea and binary uuid are the same bytes on the
# wire, and psycopg's UUID dumper is Python code called per row.
COPY_TYPES = ["int4", "int8", "int8", "bytea", "bytea", "bytea", "bytea", "text"]

# Every transaction that locks partitions rows locks them in id order, so appenders and
# appliers touching several partitions cannot deadlock.
LOCK = "SELECT id, next_offset FROM partitions WHERE id = ANY(%s) ORDER BY id FOR UPDATE"
# Offsets are reserved by UPDATE ... RETURNING inside the batch's transaction: the row lock
# serialises appenders per partition, and a rollback gives the offsets back (no gap). Each row
# also reports how many partitions the topic has, so a writer holding a stale list of them
# starts again.
RESERVE = """
UPDATE partitions SET next_offset = next_offset + %(n)s, rows = rows + %(n)s, bytes = bytes + %(b)s
WHERE id = %(id)s AND stream = %(s)s AND topic = %(t)s
RETURNING id, next_offset - %(n)s,
    (SELECT count(*) FROM partitions WHERE stream = %(s)s AND topic = %(t)s)
"""
ADVANCE = """
UPDATE partitions p SET next_offset = greatest(p.next_offset, d.nxt),
    rows = p.rows + d.n, bytes = p.bytes + d.b
FROM unnest(%s::int4[], %s::int8[], %s::int8[], %s::int8[]) AS d(id, nxt, n, b)
WHERE p.id = d.id
"""
# A query rather than COPY TO: with binary results it measured faster (docs/benchmarks.md).
# Offsets are contiguous in [low, high) (retention removes a prefix, apply refuses gaps), so
# [offset, offset + limit) bounds the rows exactly: with only a lower bound and a LIMIT, the
# planner (on fresh, unanalysed rows) bitmap-scanned every later row and sorted them all.
READ = """
SELECT "offset", ts, key, value, headers, uuid_send(origin), producer,
    octet_length(value) + coalesce(octet_length(key), 0) + coalesce(octet_length(headers), 0)
FROM messages WHERE pid = %s AND "offset" >= %s AND "offset" < %s ORDER BY "offset"
"""
EXPIRE_CUT = """
SELECT min("offset") FILTER (WHERE ts >= %s), max("offset") FROM (
    SELECT "offset", ts FROM messages WHERE pid = %s AND "offset" >= %s
    ORDER BY "offset" LIMIT %s) c
"""
EXPIRE_DELETE = """
WITH d AS (DELETE FROM messages WHERE pid = %s AND "offset" >= %s AND "offset" < %s
    RETURNING octet_length(value) + coalesce(octet_length(key), 0)
        + coalesce(octet_length(headers), 0) AS size)
SELECT count(*), coalesce(sum(size), 0) FROM d
"""
# Rough on-disk bytes of a row beyond its payload (tuple header, fixed columns, line pointer,
# index entry): weighs streams of small messages fairly when apportioning physicalsize.
ROW_OVERHEAD = 88


def configure_connection(conn: psycopg.Connection) -> None:
    """COPY picks dumpers by type oid, and for bytea that finds the DB-API `Binary` dumper,
    written in Python; registering bytes' own dumper by oid brings back the C one."""
    conn.adapters.register_dumper(None, BytesBinaryDumper)


def create_pg_database(url: str) -> None:
    params = conninfo_to_dict(url)
    name = params.get("dbname") or "postgres"
    admin = make_conninfo(url, dbname="postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            return
        # Another process may create it meanwhile: that is what we wanted.
        with contextlib.suppress(psycopg.errors.DuplicateDatabase):
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


class _TopicChanged(Exception):
    """The topic's partitions changed since this store listed them."""


@contextlib.contextmanager
def _committing(conn: psycopg.Connection) -> Iterator[None]:
    """Commit the transaction begun by hand inside the block (its BEGIN rides in a pipeline
    with the first statements), or roll it back on any error."""
    try:
        yield
    except BaseException:
        if conn.info.transaction_status in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


class PostgresStore:
    """MessageStore on PostgreSQL. Thread-safe: each call takes a connection from the pool."""

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
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            conn.execute(SCHEMA)

    def close(self) -> None:
        self._pool.close()

    # --- topics ------------------------------------------------------------------------------

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

    # --- writes ------------------------------------------------------------------------------

    def append(
        self,
        stream: UUID,
        topic: str,
        records: Sequence[Record],
        *,
        origin: UUID,
        producer: str | None = None,
        log_append_time: bool = False,
    ) -> list[tuple[int, int]]:
        if not records:
            return []
        for _ in range(3):
            ids = self._topic_cache(stream, topic)
            plan = plan_partitions(records, len(ids), self._rr)
            try:
                placed = self._append(
                    stream, topic, ids, records, plan, origin.bytes, producer, log_append_time
                )
            except _TopicChanged:
                self._topics.pop((stream, topic), None)  # it grew or vanished: look again
                continue
            self._rr = plan.counter
            return placed
        raise StoreError(f"topic {topic!r} kept changing while appending: try again")

    def _append(
        self,
        stream: UUID,
        topic: str,
        ids: list[int],
        records: Sequence[Record],
        plan: Plan,
        origin: bytes,
        producer: str | None,
        log_append_time: bool,
    ) -> list[tuple[int, int]]:
        pids = {p: ids[p] for p in plan.totals}
        with self._pool.connection() as conn, _committing(conn), conn.cursor() as cur:
            firsts = self._reserve(conn, cur, stream, topic, len(ids), pids, plan)
            with cur.copy(COPY_IN) as copy:
                copy.set_types(COPY_TYPES)
                return layout_batch(
                    records, plan, pids, firsts, origin, producer, log_append_time, copy.write_row
                )

    def _topic_cache(self, stream: UUID, topic: str) -> list[int]:
        ids = self._topics.get((stream, topic))
        if ids is None:
            with self._pool.connection() as conn:
                ids = self._topics[(stream, topic)] = self._topic_ids(conn, stream, topic)
        return ids

    @staticmethod
    def _reserve(
        conn: psycopg.Connection,
        cur: psycopg.Cursor,
        stream: UUID,
        topic: str,
        partitions: int,
        pids: dict[int, int],
        plan: Plan,
    ) -> dict[int, int]:
        """Begin the batch's transaction and reserve its offsets in one round trip: a pipeline
        carries BEGIN and one UPDATE per partition, in id order, so appenders touching several
        partitions never deadlock. (Measured faster than BEGIN, then the UPDATEs, and than a
        PL/pgSQL function doing them.) Returns the first offset of each target partition."""
        order = sorted(pids, key=pids.__getitem__)
        params = [
            {"id": pids[p], "n": plan.totals[p][0], "b": plan.totals[p][1], "s": stream, "t": topic}
            for p in order
        ]
        with conn.pipeline():
            conn.execute("BEGIN")
            cur.executemany(RESERVE, params, returning=True)
        rows = cur.fetchall()
        while cur.nextset():
            rows += cur.fetchall()
        if len(rows) != len(order) or any(n != partitions for *_, n in rows):
            raise _TopicChanged  # rolls the transaction back: the offsets are given back
        first = {pid: off for pid, off, _ in rows}
        return {p: first[pid] for p, pid in pids.items()}

    @staticmethod
    def _advance(cur: psycopg.Cursor, ends: Ends) -> None:
        cur.execute(ADVANCE, (list(ends), *map(list, zip(*ends.values(), strict=True))))

    def apply(
        self,
        stream: UUID,
        messages: Sequence[Message],
        *,
        link: str,
        expected: dict[Key, int] | None = None,
    ) -> dict[Key, int]:
        runs = group_runs(messages)
        if not runs:
            return {}
        with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            pids = self._apply_pids(conn, stream, runs)
            cur.execute(LOCK, (sorted(pids.values()),))
            cursors = self._link_cursors(cur, link, pids)
            todo = trim_runs(runs, cursors, expected)
            done = {key: cursors[key] + len(run) for key, run in todo.items()}
            if any(todo.values()):
                with cur.copy(COPY_IN) as copy:
                    copy.set_types(COPY_TYPES)
                    ends = layout_apply(todo, pids, copy.write_row)
                self._advance(cur, ends)
                cur.execute(
                    "INSERT INTO replication_cursors (pid, link, next_offset) "
                    "SELECT id, %s, nxt FROM unnest(%s::int4[], %s::int8[]) u(id, nxt) "
                    "ON CONFLICT (pid, link) DO UPDATE SET next_offset = excluded.next_offset",
                    (link, [pids[k] for k in done], list(done.values())),
                )
        return done

    def _apply_pids(
        self, conn: psycopg.Connection, stream: UUID, runs: dict[Key, list[Message]]
    ) -> dict[Key, int]:
        # Topics and partitions the origin has appear on the replica as messages arrive
        # (invariant 7): grow the replica's topic to cover every partition in the batch.
        need: dict[str, int] = {}
        for topic, partition in runs:
            need[topic] = max(need.get(topic, 0), partition + 1)
        self._grow(conn, stream, list(need), list(need.values()))
        rows = conn.execute(
            "SELECT topic, partition, id FROM partitions WHERE stream = %s AND topic = ANY(%s)",
            (stream, list(need)),
        ).fetchall()
        ids = {(t, p): pid for t, p, pid in rows}
        return {key: ids[key] for key in runs}

    @staticmethod
    def _link_cursors(cur: psycopg.Cursor, link: str, pids: dict[Key, int]) -> dict[Key, int]:
        found = dict(
            cur.execute(
                "SELECT pid, next_offset FROM replication_cursors "
                "WHERE link = %s AND pid = ANY(%s)",
                (link, list(pids.values())),
            ).fetchall()
        )
        return {key: found.get(pid, 0) for key, pid in pids.items()}

    def replication_cursor(self, stream: UUID, link: str, topic: str, partition: int) -> int:
        with self._pool.connection() as conn:
            pid = self._pid(conn, stream, topic, partition)
            row = conn.execute(
                "SELECT next_offset FROM replication_cursors WHERE pid = %s AND link = %s",
                (pid, link),
            ).fetchone()
        return row[0] if row else 0

    # --- reads -------------------------------------------------------------------------------

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
        with self._pool.connection() as conn:
            pid = self._pid(conn, stream, topic, partition)
            rows = conn.cursor(binary=True).execute(READ, (pid, offset, offset + limit)).fetchall()
            if not rows or rows[0][0] != offset:
                low, high = self._range(conn, stream, topic, pid)
                if not low <= offset <= high:
                    raise OffsetOutOfRange(offset, low, high)
        rows = rows[: cut_to_bytes((r[7] for r in rows), max_bytes)]
        return messages_from_rows(topic, partition, rows, self._origins)

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

    # --- retention ---------------------------------------------------------------------------

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
        # The DELETE locks only the old rows, which appenders never touch; the partitions row
        # (which appenders lock) is updated last, just before the commit, so an appender waits
        # at most for that commit, never for the delete.
        with conn.transaction():
            young, last = conn.execute(EXPIRE_CUT, (before_ms, pid, low, limit)).fetchone()
            end = expire_end(young, last)
            if end is None or end <= low:
                return 0
            count, size = conn.execute(EXPIRE_DELETE, (pid, low, end)).fetchone()
            conn.execute(
                "UPDATE partitions SET low_offset = greatest(low_offset, %s), "
                "rows = rows - %s, bytes = bytes - %s WHERE id = %s",
                (end, count, size, pid),
            )
        return count

    # --- consumer cursors --------------------------------------------------------------------

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

    def drop_stream(self, stream: UUID) -> None:
        with self._pool.connection() as conn, conn.transaction():
            ids = [
                r[0]
                for r in conn.execute(
                    "SELECT id FROM partitions WHERE stream = %s ORDER BY id FOR UPDATE", (stream,)
                ).fetchall()
            ]
            for table in ("messages", "replication_cursors", "consumer_cursors"):
                conn.execute(
                    sql.SQL("DELETE FROM {} WHERE pid = ANY(%s)").format(sql.Identifier(table)),
                    (ids,),
                )
            conn.execute("DELETE FROM partitions WHERE stream = %s", (stream,))
        self._pids = {k: v for k, v in self._pids.items() if k[0] != stream}
        self._topics = {k: v for k, v in self._topics.items() if k[0] != stream}
