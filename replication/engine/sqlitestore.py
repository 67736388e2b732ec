"""The message store on SQLite: the embedded default, one file per cluster.

Same schema and rules as the PostgreSQL store. SQLite has one writer at a time: every write
takes the file's write lock up front (`BEGIN IMMEDIATE`), which is what serialises offset
assignment between threads and processes here.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from uuid import UUID

from replication.engine.batches import (
    OriginCache,
    cut_to_bytes,
    expire_end,
    group_runs,
    layout_apply,
    layout_batch,
    messages_from_rows,
    trim_runs,
)
from replication.engine.sequences import (
    ProducerBatch,
    ProducerState,
    sequence_check,
    sequence_next,
    sequenced_partition,
)
from replication.engine.store import (
    PARTITION_STATS,
    Applied,
    CursorKey,
    Key,
    Message,
    OffsetOutOfRange,
    PartitionOutOfRange,
    PartitionStats,
    Record,
    StoreError,
    UnknownTopic,
    first_at_or_after,
    partition_stats_from,
    plan_partitions,
)

# AUTOINCREMENT: a partition id is never reused after drop_stream, as other processes cache ids.
SCHEMA = """
CREATE TABLE IF NOT EXISTS partitions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    stream BLOB NOT NULL,
    topic TEXT NOT NULL,
    partition INTEGER NOT NULL,
    next_offset INTEGER NOT NULL DEFAULT 0,
    low_offset INTEGER NOT NULL DEFAULT 0,
    rows INTEGER NOT NULL DEFAULT 0,
    bytes INTEGER NOT NULL DEFAULT 0,
    UNIQUE (stream, topic, partition)
);
CREATE TABLE IF NOT EXISTS messages (
    pid INTEGER NOT NULL,
    "offset" INTEGER NOT NULL,
    ts INTEGER NOT NULL,
    key BLOB,
    value BLOB NOT NULL,
    headers BLOB,
    origin BLOB NOT NULL,
    producer TEXT,
    PRIMARY KEY (pid, "offset")
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS replication_cursors (
    pid INTEGER NOT NULL,
    link TEXT NOT NULL,
    next_offset INTEGER NOT NULL,
    PRIMARY KEY (pid, link)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS consumer_cursors (
    pid INTEGER NOT NULL,
    grp TEXT NOT NULL,
    "offset" INTEGER NOT NULL,
    PRIMARY KEY (pid, grp)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS producer_sequences (
    pid INTEGER NOT NULL,
    producer_id INTEGER NOT NULL,
    epoch INTEGER NOT NULL,
    state TEXT NOT NULL,
    PRIMARY KEY (pid, producer_id)
) WITHOUT ROWID;
"""
SEQ_GET = "SELECT epoch, state FROM producer_sequences WHERE pid = ? AND producer_id = ?"
SEQ_PUT = """
INSERT INTO producer_sequences (pid, producer_id, epoch, state) VALUES (?, ?, ?, ?)
ON CONFLICT (pid, producer_id) DO UPDATE SET epoch = excluded.epoch, state = excluded.state
"""
INSERT = (
    'INSERT INTO messages (pid, "offset", ts, key, value, headers, origin, producer) '
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
ADVANCE = (
    "UPDATE partitions SET next_offset = max(next_offset, ?), rows = rows + ?, "
    "bytes = bytes + ? WHERE id = ?"
)
# Status only (see MessageStore.replication_cursor): never moves back.
LINK_CURSORS = """
INSERT INTO replication_cursors (pid, link, next_offset) VALUES (?, ?, ?)
ON CONFLICT (pid, link) DO UPDATE
SET next_offset = max(replication_cursors.next_offset, excluded.next_offset)
"""
# See the PostgreSQL store's MERGE_CURSORS: clamped to the partition's end, never back.
MERGE_CURSORS = """
INSERT INTO consumer_cursors (pid, grp, "offset")
SELECT id, ?2, min(?5, next_offset) FROM partitions WHERE stream = ?1 AND topic = ?3
    AND partition = ?4
ON CONFLICT (pid, grp) DO UPDATE SET "offset" = max(consumer_cursors."offset", excluded."offset")
"""
READ = """
SELECT "offset", ts, key, value, headers, origin, producer,
    length(value) + coalesce(length(key), 0) + coalesce(length(headers), 0)
FROM messages WHERE pid = ? AND "offset" >= ? AND "offset" < ? ORDER BY "offset"
"""
EXPIRE_CUT = """
SELECT min("offset") FILTER (WHERE ts >= ?), max("offset") FROM (
    SELECT "offset", ts FROM messages WHERE pid = ? AND "offset" >= ?
    ORDER BY "offset" LIMIT ?)
"""
EXPIRE_SIZE = """
SELECT count(*), coalesce(sum(length(value) + coalesce(length(key), 0)
    + coalesce(length(headers), 0)), 0)
FROM messages WHERE pid = ? AND "offset" >= ? AND "offset" < ?
"""
ROW_OVERHEAD = 24  # rough bytes a row costs beyond its payload (record header, key columns)


class SqliteStore:
    """MessageStore on a SQLite file. Thread-safe: one connection per thread."""

    def __init__(self, path: Path | str) -> None:
        self._path = Path(path)
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._guard = threading.Lock()
        self._pids: dict[tuple[UUID, str, int], int] = {}  # ids never change: cache them
        self._origins = OriginCache()
        self._rr = 0  # round-robin counter; a lost update between threads only skews balance
        self._conn().executescript(f"BEGIN IMMEDIATE; {SCHEMA} COMMIT;")

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            # isolation_level=None: transactions are ours (BEGIN IMMEDIATE), not the module's.
            conn = sqlite3.connect(
                self._path, timeout=60, isolation_level=None, check_same_thread=False
            )
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")  # an acknowledged produce survives power loss
            self._local.conn = conn
            with self._guard:
                self._all.append(conn)
        return conn

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def close(self) -> None:
        with self._guard:
            for conn in self._all:
                conn.close()
            self._all.clear()
        self._local = threading.local()

    # --- topics ------------------------------------------------------------------------------

    def ensure_topic(self, stream: UUID, topic: str, partitions: int) -> None:
        if partitions < 1:
            raise StoreError(f"a topic needs at least one partition, not {partitions}")
        with self._write() as conn:
            self._grow(conn, stream, topic, partitions)

    @staticmethod
    def _grow(conn: sqlite3.Connection, stream: UUID, topic: str, partitions: int) -> None:
        conn.executemany(
            "INSERT OR IGNORE INTO partitions (stream, topic, partition) VALUES (?, ?, ?)",
            [(stream.bytes, topic, p) for p in range(partitions)],
        )

    def partitions(self, stream: UUID, topic: str) -> int:
        return len(self._topic(self._conn(), stream, topic))

    @staticmethod
    def _topic(conn: sqlite3.Connection, stream: UUID, topic: str) -> list[tuple[int, int]]:
        """(id, next offset) of each partition, in partition order."""
        rows = conn.execute(
            "SELECT id, next_offset FROM partitions WHERE stream = ? AND topic = ? "
            "ORDER BY partition",
            (stream.bytes, topic),
        ).fetchall()
        if not rows:
            raise UnknownTopic(f"topic {topic!r} does not exist in stream {stream}")
        return rows

    def _pid(self, conn: sqlite3.Connection, stream: UUID, topic: str, partition: int) -> int:
        pid = self._pids.get((stream, topic, partition))
        if pid is None:
            rows = self._topic(conn, stream, topic)
            if not 0 <= partition < len(rows):
                raise PartitionOutOfRange(
                    f"partition {partition} does not exist: topic {topic!r} has partitions "
                    f"0..{len(rows) - 1}"
                )
            pid = self._pids[(stream, topic, partition)] = rows[partition][0]
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
        sequence: ProducerBatch | None = None,
    ) -> list[tuple[int, int]]:
        if not records:
            return []
        with self._write() as conn:
            topic_rows = self._topic(conn, stream, topic)
            if sequence is not None:
                # BEGIN IMMEDIATE holds the write lock: the state read here holds till commit.
                p = sequenced_partition(records, len(topic_rows))
                pid, first = topic_rows[p]
                retried = self._sequence(conn, pid, sequence, first)
                if retried is not None:
                    return [(p, retried + i) for i in range(len(records))]
            plan = plan_partitions(records, len(topic_rows), self._rr)
            pids = {p: topic_rows[p][0] for p in plan.totals}
            firsts = {p: topic_rows[p][1] for p in plan.totals}
            rows: list[tuple] = []
            placed = layout_batch(
                records, plan, pids, firsts, origin.bytes, producer, log_append_time, rows.append
            )
            conn.executemany(INSERT, rows)
            conn.executemany(
                ADVANCE, [(firsts[p] + n, n, b, pids[p]) for p, (n, b) in plan.totals.items()]
            )
        self._rr = plan.counter
        return placed

    @staticmethod
    def _get_state(conn: sqlite3.Connection, pid: int, producer_id: int) -> ProducerState | None:
        row = conn.execute(SEQ_GET, (pid, producer_id)).fetchone()
        if row is None:
            return None
        firsts, lasts, offsets = json.loads(row[1])
        return ProducerState(row[0], tuple(firsts), tuple(lasts), tuple(offsets))

    def _sequence(self, conn: sqlite3.Connection, pid: int, batch: ProducerBatch,
                  first: int) -> int | None:
        """The batch's original first offset when it is a retry; else record it as written
        at `first` (the caller writes it in this transaction)."""
        state = self._get_state(conn, pid, batch.producer_id)
        retried = sequence_check(state, batch)
        if retried is None:
            new = sequence_next(state, batch, first)
            conn.execute(SEQ_PUT, (pid, batch.producer_id, new.epoch,
                                   json.dumps([new.firsts, new.lasts, new.offsets])))
        return retried

    def offset_for_time(self, stream: UUID, topic: str, partition: int,
                        timestamp_ms: int) -> tuple[int, int] | None:
        conn = self._conn()
        pid = self._pid(conn, stream, topic, partition)
        low, high = self._marks(conn, pid)

        def ts_at(offset: int) -> int:
            return conn.execute('SELECT ts FROM messages WHERE pid = ? AND "offset" = ?',
                                (pid, offset)).fetchone()[0]

        found = first_at_or_after(low, high, ts_at, timestamp_ms)
        return (found, ts_at(found)) if found < high else None

    def producer_state(self, stream: UUID, topic: str, partition: int,
                       producer_id: int) -> ProducerState | None:
        conn = self._conn()
        return self._get_state(conn, self._pid(conn, stream, topic, partition), producer_id)

    def apply(
        self,
        stream: UUID,
        messages: Sequence[Message],
        *,
        link: str,
        origin_low: dict[Key, int] | None = None,
    ) -> Applied:
        runs = group_runs(messages)
        if not runs:
            return Applied({})
        # BEGIN IMMEDIATE holds the file's write lock: the ends read here stay true until the
        # commit, whoever else applies or appends.
        with self._write() as conn:
            pids = self._apply_pids(conn, stream, runs)
            marks = {key: self._marks(conn, pid) for key, pid in pids.items()}
            trimmed = trim_runs(runs, marks, origin_low)
            conn.executemany(
                "UPDATE partitions SET low_offset = ?, next_offset = ? WHERE id = ?",
                [(off, off, pids[key]) for key, off in trimmed.starts.items()],
            )
            rows: list[tuple] = []
            ends = layout_apply(trimmed.todo, pids, rows.append)
            conn.executemany(INSERT, rows)
            conn.executemany(ADVANCE, [(*end, pid) for pid, end in ends.items()])
            conn.executemany(
                LINK_CURSORS, [(pids[key], link, run[-1].offset + 1) for key, run in runs.items()]
            )
        return Applied(trimmed.ends, {key: len(run) for key, run in trimmed.todo.items()},
                       sum(nbytes for _, _, nbytes in ends.values()))

    def _apply_pids(
        self, conn: sqlite3.Connection, stream: UUID, runs: dict[Key, list[Message]]
    ) -> dict[Key, int]:
        # Topics and partitions the origin has appear on the replica as messages arrive
        # (invariant 7): grow the replica's topic to cover every partition in the batch.
        need: dict[str, int] = {}
        for topic, partition in runs:
            need[topic] = max(need.get(topic, 0), partition + 1)
        ids = {}
        for topic, count in need.items():
            self._grow(conn, stream, topic, count)
            rows = self._topic(conn, stream, topic)
            ids.update({(topic, p): row[0] for p, row in enumerate(rows)})
        return {key: ids[key] for key in runs}

    @staticmethod
    def _marks(conn: sqlite3.Connection, pid: int) -> tuple[int, int]:
        return conn.execute(
            "SELECT low_offset, next_offset FROM partitions WHERE id = ?", (pid,)
        ).fetchone()

    def replication_cursor(self, stream: UUID, link: str, topic: str, partition: int) -> int:
        conn = self._conn()
        row = conn.execute(
            "SELECT next_offset FROM replication_cursors WHERE pid = ? AND link = ?",
            (self._pid(conn, stream, topic, partition), link),
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
        conn = self._conn()
        pid = self._pid(conn, stream, topic, partition)
        rows = conn.execute(READ, (pid, offset, offset + limit)).fetchall()
        if not rows or rows[0][0] != offset:
            row = conn.execute(
                "SELECT low_offset, next_offset FROM partitions WHERE id = ?", (pid,)
            ).fetchone()
            if row is None:  # dropped by another process after this one cached the id
                self._pids = {k: v for k, v in self._pids.items() if v != pid}
                raise UnknownTopic(f"topic {topic!r} does not exist in stream {stream}")
            if not row[0] <= offset <= row[1]:
                raise OffsetOutOfRange(offset, *row)
        return rows[: cut_to_bytes((r[7] for r in rows), max_bytes)]

    def watermarks(self, stream: UUID, topic: str) -> dict[int, tuple[int, int]]:
        rows = (
            self._conn()
            .execute(
                "SELECT partition, low_offset, next_offset FROM partitions "
                "WHERE stream = ? AND topic = ? ORDER BY partition",
                (stream.bytes, topic),
            )
            .fetchall()
        )
        if not rows:
            raise UnknownTopic(f"topic {topic!r} does not exist in stream {stream}")
        return {p: (low, high) for p, low, high in rows}

    def partition_stats(self, stream: UUID, topic: str) -> list[PartitionStats]:
        rows = self._conn().execute(PARTITION_STATS.format(p="?"), (stream.bytes, topic))
        return partition_stats_from(rows.fetchall(), topic)

    def sizes(self, stream: UUID) -> dict:
        """logicalsize: maintained counters of key+value+header bytes. physicalsize: the file's
        used pages, apportioned to the stream by its share of the counted bytes and rows."""
        conn = self._conn()
        topics, nbytes, nrows = conn.execute(
            "SELECT count(DISTINCT topic), coalesce(sum(bytes), 0), coalesce(sum(rows), 0) "
            "FROM partitions WHERE stream = ?",
            (stream.bytes,),
        ).fetchone()
        all_bytes, all_rows = conn.execute(
            "SELECT coalesce(sum(bytes), 0), coalesce(sum(rows), 0) FROM partitions"
        ).fetchone()
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        pages -= conn.execute("PRAGMA freelist_count").fetchone()[0]
        disk = pages * conn.execute("PRAGMA page_size").fetchone()[0]
        weight, total = nbytes + ROW_OVERHEAD * nrows, all_bytes + ROW_OVERHEAD * all_rows
        physical = disk * weight // total if total else 0
        return {"logicalsize": nbytes, "physicalsize": physical, "numtopics": topics}

    # --- retention ---------------------------------------------------------------------------

    def expire(self, stream: UUID, *, before_ms: int, batch: int = 10_000) -> int:
        pids = (
            self._conn()
            .execute("SELECT id FROM partitions WHERE stream = ? ORDER BY id", (stream.bytes,))
            .fetchall()
        )
        done = 0
        for (pid,) in pids:
            if done >= batch:
                break
            done += self._expire_partition(pid, before_ms, batch - done)
        return done

    def _expire_partition(self, pid: int, before_ms: int, limit: int) -> int:
        # SQLite has one writer: a bounded batch per transaction keeps producers' waits short.
        with self._write() as conn:
            (low,) = conn.execute(
                "SELECT low_offset FROM partitions WHERE id = ?", (pid,)
            ).fetchone()
            young, last = conn.execute(EXPIRE_CUT, (before_ms, pid, low, limit)).fetchone()
            end = expire_end(young, last)
            if end is None or end <= low:
                return 0
            count, size = conn.execute(EXPIRE_SIZE, (pid, low, end)).fetchone()
            conn.execute(
                'DELETE FROM messages WHERE pid = ? AND "offset" >= ? AND "offset" < ?',
                (pid, low, end),
            )
            conn.execute(
                "UPDATE partitions SET low_offset = max(low_offset, ?), rows = rows - ?, "
                "bytes = bytes - ? WHERE id = ?",
                (end, count, size, pid),
            )
        return count

    def trim(self, stream: UUID, topic: str, partition: int, end: int, *,
             batch: int = 10_000) -> int:
        with self._write() as conn:
            pid = self._pid(conn, stream, topic, partition)
            low, nxt = self._marks(conn, pid)
            cut = min(end, nxt, low + batch)
            if cut <= low:
                return 0
            count, size = conn.execute(EXPIRE_SIZE, (pid, low, cut)).fetchone()
            conn.execute('DELETE FROM messages WHERE pid = ? AND "offset" >= ? AND "offset" < ?',
                         (pid, low, cut))
            conn.execute("UPDATE partitions SET low_offset = max(low_offset, ?), rows = rows - ?, "
                         "bytes = bytes - ? WHERE id = ?", (cut, count, size, pid))
        return count

    # --- consumer cursors --------------------------------------------------------------------

    def commit_cursor(
        self, stream: UUID, group: str, topic: str, partition: int, offset: int
    ) -> None:
        with self._write() as conn:
            conn.execute(
                'INSERT INTO consumer_cursors (pid, grp, "offset") VALUES (?, ?, ?) '
                'ON CONFLICT (pid, grp) DO UPDATE SET "offset" = excluded."offset"',
                (self._pid(conn, stream, topic, partition), group, offset),
            )

    def fetch_cursor(self, stream: UUID, group: str, topic: str, partition: int) -> int | None:
        conn = self._conn()
        row = conn.execute(
            'SELECT "offset" FROM consumer_cursors WHERE pid = ? AND grp = ?',
            (self._pid(conn, stream, topic, partition), group),
        ).fetchone()
        return row[0] if row else None

    def cursors(self, stream: UUID) -> list[tuple[str, str, int, int]]:
        return (
            self._conn()
            .execute(
                'SELECT c.grp, p.topic, p.partition, c."offset" FROM consumer_cursors c '
                "JOIN partitions p ON p.id = c.pid WHERE p.stream = ? "
                "ORDER BY c.grp, p.topic, p.partition",
                (stream.bytes,),
            )
            .fetchall()
        )

    def merge_cursors(
        self, stream: UUID, cursors: Sequence[tuple[str, str, int, int]]
    ) -> dict[CursorKey, int]:
        if not cursors:
            return {}
        with self._write() as conn:
            conn.executemany(MERGE_CURSORS, [(stream.bytes, *cursor) for cursor in cursors])
            rows = conn.execute(
                'SELECT c.grp, p.topic, p.partition, c."offset" FROM consumer_cursors c '
                "JOIN partitions p ON p.id = c.pid WHERE p.stream = ?",
                (stream.bytes,),
            ).fetchall()
        wanted = {(g, t, p) for g, t, p, _ in cursors}
        return {(g, t, p): o for g, t, p, o in rows if (g, t, p) in wanted}

    def truncate(self, stream: UUID, topic: str, partition: int, offset: int) -> int:
        with self._write() as conn:
            pid = self._pid(conn, stream, topic, partition)
            nxt = self._marks(conn, pid)[1]
            if offset >= nxt:
                return 0
            count, size = conn.execute(EXPIRE_SIZE, (pid, offset, nxt)).fetchone()
            conn.execute('DELETE FROM messages WHERE pid = ? AND "offset" >= ?', (pid, offset))
            conn.execute(
                "UPDATE partitions SET next_offset = ?, low_offset = min(low_offset, ?), "
                "rows = rows - ?, bytes = bytes - ? WHERE id = ?",
                (offset, offset, count, size, pid),
            )
            conn.execute("UPDATE replication_cursors SET next_offset = ? "
                         "WHERE pid = ? AND next_offset > ?", (offset, pid, offset))
            conn.execute('UPDATE consumer_cursors SET "offset" = ? WHERE pid = ? AND "offset" > ?',
                         (offset, pid, offset))
        return count

    def drop_stream(self, stream: UUID) -> None:
        self._drop(stream, None)

    def drop_topic(self, stream: UUID, topic: str) -> None:
        self._drop(stream, topic)

    def _drop(self, stream: UUID, topic: str | None) -> None:
        match = "stream = ? AND (? IS NULL OR topic = ?)"
        args = (stream.bytes, topic, topic)
        with self._write() as conn:
            where = f"pid IN (SELECT id FROM partitions WHERE {match})"
            for table in ("messages", "replication_cursors", "consumer_cursors",
                          "producer_sequences"):
                conn.execute(f"DELETE FROM {table} WHERE {where}", args)
            conn.execute(f"DELETE FROM partitions WHERE {match}", args)
        self._pids = {k: v for k, v in self._pids.items()
                      if k[0] != stream or (topic is not None and k[1] != topic)}
