"""The message store on SQLite: the embedded default, one file per cluster.

Same schema and rules as the PostgreSQL store. SQLite has one writer at a time: every write
takes the file's write lock up front (`BEGIN IMMEDIATE`), which is what serialises offset
assignment between threads and processes here. A file holds one layout: a message a row
(this store) or a record batch a row (sqlitebatch.py, which derives from it); `open_store`
looks at which table it has.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from uuid import UUID

from replication.engine.batches import Ends, Trimmed, layout_apply, layout_batch, trim_runs
from replication.engine.copies import StoreGroup, single
from replication.engine.sequences import (
    ProducerState,
    sequenced_partition,
)
from replication.engine.store import (
    Committed,
    CursorKey,
    Key,
    Message,
    Produce,
    Record,
    StoreError,
    UnknownTopic,
    plan_partitions,
)
from replication.engine.storebase import MessageStore

# value NULL: Kafka's null value (a tombstone), kept apart from an empty one.
MESSAGES = """
CREATE TABLE IF NOT EXISTS {name} (
    pid INTEGER NOT NULL,
    "offset" INTEGER NOT NULL,
    ts INTEGER NOT NULL,
    key BLOB,
    value BLOB,
    headers BLOB,
    origin BLOB NOT NULL,
    producer TEXT,
    PRIMARY KEY (pid, "offset")
) WITHOUT ROWID;
"""
# AUTOINCREMENT: a partition id is never reused after drop_stream, as other processes cache ids.
# The tables of both layouts; each adds the one its messages live in.
COMMON_SCHEMA = """
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
CREATE TABLE IF NOT EXISTS replication_cursors (
    pid INTEGER NOT NULL,
    link TEXT NOT NULL,
    next_offset INTEGER NOT NULL,
    PRIMARY KEY (pid, link)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS ended_links (
    link TEXT PRIMARY KEY
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS consumer_cursors (
    pid INTEGER NOT NULL,
    grp TEXT NOT NULL,
    "offset" INTEGER NOT NULL,
    metadata BLOB,
    leader_epoch INTEGER NOT NULL DEFAULT -1,
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
SCHEMA = COMMON_SCHEMA + MESSAGES.format(name="messages")
SEQ_GET = "SELECT epoch, state FROM producer_sequences WHERE pid = ? AND producer_id = ?"
SEQ_ALL = "SELECT producer_id, epoch, state FROM producer_sequences WHERE pid = ?"
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
# See the PostgreSQL store's MERGE_CURSORS: clamped to the partition's end, never back, the
# metadata going with the offset kept.
MERGE_CURSORS = """
INSERT INTO consumer_cursors (pid, grp, "offset", metadata, leader_epoch)
SELECT id, ?2, min(?5, next_offset), ?6, ?7 FROM partitions WHERE stream = ?1 AND topic = ?3
    AND partition = ?4
ON CONFLICT (pid, grp) DO UPDATE SET "offset" = max(consumer_cursors."offset", excluded."offset"),
    metadata = CASE WHEN excluded."offset" >= consumer_cursors."offset"
        THEN excluded.metadata ELSE consumer_cursors.metadata END,
    leader_epoch = CASE WHEN excluded."offset" >= consumer_cursors."offset"
        THEN excluded.leader_epoch ELSE consumer_cursors.leader_epoch END
"""
# Stores made before commits kept their metadata (or leader epoch) gain the column on open.
CURSOR_COLUMNS = "SELECT name FROM pragma_table_info('consumer_cursors')"
CURSOR_ADDED = {
    "metadata": "ALTER TABLE consumer_cursors ADD COLUMN metadata BLOB",
    "leader_epoch": "ALTER TABLE consumer_cursors ADD COLUMN leader_epoch INTEGER NOT NULL "
                    "DEFAULT -1",
}
# A row's logical bytes (key, value, headers; NULLs count 0), as `record_size` counts them.
SIZE = "coalesce(length(value), 0) + coalesce(length(key), 0) + coalesce(length(headers), 0)"
# As the PostgreSQL store's READ: stops at max_bytes (the last parameter) in the store.
READ = f"""
SELECT "offset", ts, key, value, headers, origin, producer, size FROM (
    SELECT *, sum(size) OVER (ORDER BY "offset") AS upto FROM (
        SELECT "offset", ts, key, value, headers, origin, producer, {SIZE} AS size
        FROM messages WHERE pid = ? AND "offset" >= ? AND "offset" < ?)
) WHERE upto <= ? OR upto = size ORDER BY "offset"
"""
EXPIRE_SIZE = f"""
SELECT count(*), coalesce(sum({SIZE}), 0)
FROM messages WHERE pid = ? AND "offset" >= ? AND "offset" < ?
"""
# A store made before null values were kept has `value BLOB NOT NULL`, which SQLite cannot
# drop: the table is made again without it and the rows copied over, in one transaction
# (sqlite.org/lang_altertable.html, "making other kinds of table schema changes").
VALUE_NOT_NULL = "SELECT \"notnull\" FROM pragma_table_info('messages') WHERE name = 'value'"
REBUILD = (
    MESSAGES.format(name="messages_upgraded"),
    'INSERT INTO messages_upgraded SELECT pid, "offset", ts, key, value, headers, origin, '
    'producer FROM messages ORDER BY pid, "offset"',
    "DROP TABLE messages",
    "ALTER TABLE messages_upgraded RENAME TO messages",
)


def _state_of(epoch: int, kept: str) -> ProducerState:
    firsts, lasts, offsets = json.loads(kept)
    return ProducerState(epoch, tuple(firsts), tuple(lasts), tuple(offsets))


class SqliteStore(MessageStore):
    """MessageStore on a SQLite file. Thread-safe: one connection per thread."""

    DIALECT = "sqlite"
    ROW_OVERHEAD = 24  # record header, key columns
    DATA_TABLE = "messages"  # where the messages are: a row each, or a batch a row (sqlitebatch)
    TABLES = SCHEMA  # made (if missing) when the store opens

    def __init__(self, path: Path | str) -> None:
        super().__init__()
        self._path = Path(path)
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._guard = threading.Lock()
        self._conn().executescript(f"BEGIN IMMEDIATE; {self.TABLES} COMMIT;")
        self._upgrade()

    def _upgrade(self) -> None:
        """Allow null values in a store made before they were kept (once: the check runs
        under the write lock, so two processes opening the store rebuild it once), and give
        consumer cursors their metadata column in one made before commits kept it."""
        with self._writing() as conn:
            if conn.execute(VALUE_NOT_NULL).fetchone()[0]:
                for statement in REBUILD:
                    conn.execute(statement)
            present = {r[0] for r in conn.execute(CURSOR_COLUMNS)}
            for column, add in CURSOR_ADDED.items():
                if column not in present:
                    conn.execute(add)

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
                self._connections.append(conn)
        return conn

    def _reading(self) -> AbstractContextManager[sqlite3.Connection]:
        return nullcontext(self._conn())

    @contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        # SQLite has one writer: BEGIN IMMEDIATE takes the file's write lock up front, so what
        # a transaction reads stays true until its commit, whoever else writes.
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def _key(self, stream: UUID) -> bytes:
        return stream.bytes

    def close(self) -> None:
        with self._guard:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
        self._local = threading.local()

    def group(self) -> StoreGroup:
        return single(str(self._path))  # a file on one disk: one copy

    # --- topics ------------------------------------------------------------------------------

    def _ensure(self, stream: UUID, topic: str, partitions: int) -> None:
        with self._writing() as conn:
            self._grow(conn, stream, topic, partitions)

    @staticmethod
    def _grow(conn: sqlite3.Connection, stream: UUID, topic: str, partitions: int) -> None:
        conn.executemany(
            "INSERT OR IGNORE INTO partitions (stream, topic, partition) VALUES (?, ?, ?)",
            [(stream.bytes, topic, p) for p in range(partitions)],
        )

    @staticmethod
    def _topic_ends(conn: sqlite3.Connection, stream: UUID, topic: str) -> list[tuple]:
        """(id, next offset) of each partition, in partition order."""
        rows = conn.execute(
            "SELECT id, next_offset FROM partitions WHERE stream = ? AND topic = ? "
            "ORDER BY partition",
            (stream.bytes, topic),
        ).fetchall()
        if not rows:
            raise UnknownTopic(f"topic {topic!r} does not exist in stream {stream}")
        return rows

    def _partition_ids(self, conn: sqlite3.Connection, stream: UUID,
                       need: dict[str, int]) -> dict[Key, int]:
        ids = {}
        for topic, count in need.items():
            self._grow(conn, stream, topic, count)
            ids.update({(topic, p): pid
                        for p, pid in enumerate(self._topic_ids(conn, stream, topic))})
        return ids

    # --- writes ------------------------------------------------------------------------------

    def _append(self, stream: UUID, topic: str, records: Sequence[Record],
                produce: Produce) -> list[tuple[int, int]]:
        with self._writing() as conn:
            topic_rows = self._topic_ends(conn, stream, topic)
            if produce.sequence is not None:
                # BEGIN IMMEDIATE holds the write lock: the state read here holds till commit.
                p = sequenced_partition(records, len(topic_rows))
                pid, first = topic_rows[p]
                retried = self._sequence(conn, pid, produce.sequence, first)
                if retried is not None:
                    return [(p, retried + i) for i in range(len(records))]
            if produce.admit is not None:
                produce.admit()  # under the write lock: see fence_appends
            plan = plan_partitions(records, len(topic_rows), self._rr)
            pids = {p: topic_rows[p][0] for p in plan.totals}
            firsts = {p: topic_rows[p][1] for p in plan.totals}
            rows: list[tuple] = []
            placed = layout_batch(records, plan, pids, firsts, *produce[:3], rows.append)
            conn.executemany(INSERT, rows)
            conn.executemany(
                ADVANCE, [(firsts[p] + n, n, b, pids[p]) for p, (n, b) in plan.totals.items()]
            )
        self._rr = plan.counter
        return placed

    def _state(self, conn: sqlite3.Connection, pid: int, producer_id: int) -> ProducerState | None:
        row = conn.execute(SEQ_GET, (pid, producer_id)).fetchone()
        return None if row is None else _state_of(row[0], row[1])

    def _states(self, conn: sqlite3.Connection, pid: int) -> dict[int, ProducerState]:
        return {producer_id: _state_of(epoch, state)
                for producer_id, epoch, state in conn.execute(SEQ_ALL, (pid,))}

    def _put_state(self, conn: sqlite3.Connection, pid: int, producer_id: int,
                   state: ProducerState) -> None:
        conn.execute(SEQ_PUT, (pid, producer_id, state.epoch,
                               json.dumps([state.firsts, state.lasts, state.offsets])))

    def _apply(self, stream: UUID, runs: dict[Key, list[Message]], link: str,
               origin_low: dict[Key, int] | None) -> tuple[Trimmed, Ends]:
        # BEGIN IMMEDIATE holds the file's write lock: the ends read here stay true until the
        # commit, whoever else applies or appends.
        with self._writing() as conn:
            self._refuse_ended(conn, link)
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
        return trimmed, ends

    # --- reads -------------------------------------------------------------------------------

    def _rows(self, conn: sqlite3.Connection, pid: int, offset: int, end: int,
              max_bytes: int) -> list[tuple]:
        return conn.execute(READ, (pid, offset, end, max_bytes)).fetchall()

    def _disk(self, conn: sqlite3.Connection) -> tuple[int, int, int]:
        """The file's used pages."""
        all_bytes, all_rows = conn.execute(
            "SELECT coalesce(sum(bytes), 0), coalesce(sum(rows), 0) FROM partitions"
        ).fetchone()
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        pages -= conn.execute("PRAGMA freelist_count").fetchone()[0]
        return all_bytes, all_rows, pages * conn.execute("PRAGMA page_size").fetchone()[0]

    # --- removals ----------------------------------------------------------------------------

    def _delete_range(self, conn: sqlite3.Connection, pid: int, low: int,
                      end: int) -> tuple[int, int]:
        count, size = conn.execute(EXPIRE_SIZE, (pid, low, end)).fetchone()
        conn.execute('DELETE FROM messages WHERE pid = ? AND "offset" >= ? AND "offset" < ?',
                     (pid, low, end))
        return count, size

    _lock = MessageStore._marks  # BEGIN IMMEDIATE already holds the whole file

    def fence_appends(self, stream: UUID, *, timeout: float) -> None:
        # One writer at a time: taking the write lock waits for the append that holds it.
        conn = self._conn()
        conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("COMMIT")
        except sqlite3.OperationalError as error:
            raise StoreError(f"appends in flight did not finish within {timeout:g}s: "
                             f"{error}") from error
        finally:
            conn.execute("PRAGMA busy_timeout = 60000")

    def _drop(self, stream: UUID, topic: str | None) -> None:
        match = "stream = ? AND (? IS NULL OR topic = ?)"
        args = (stream.bytes, topic, topic)
        with self._writing() as conn:
            where = f"pid IN (SELECT id FROM partitions WHERE {match})"
            for table in (self.DATA_TABLE, "replication_cursors", "consumer_cursors",
                          "producer_sequences"):
                conn.execute(f"DELETE FROM {table} WHERE {where}", args)
            conn.execute(f"DELETE FROM partitions WHERE {match}", args)
        self._pids = {k: v for k, v in self._pids.items()
                      if k[0] != stream or (topic is not None and k[1] != topic)}

    # --- consumer cursors --------------------------------------------------------------------

    def merge_cursors(
        self, stream: UUID, cursors: Sequence[Committed | tuple[str, str, int, int]]
    ) -> dict[CursorKey, int]:
        if not cursors:
            return {}
        merged = [Committed(*cursor) for cursor in cursors]
        with self._writing() as conn:
            conn.executemany(MERGE_CURSORS, [(stream.bytes, *c[:4], c.metadata.encode(),
                                              c.leader_epoch) for c in merged])
            rows = conn.execute(
                'SELECT c.grp, p.topic, p.partition, c."offset" FROM consumer_cursors c '
                "JOIN partitions p ON p.id = c.pid WHERE p.stream = ?",
                (stream.bytes,),
            ).fetchall()
        wanted = {(c.group, c.topic, c.partition) for c in merged}
        return {(g, t, p): o for g, t, p, o in rows if (g, t, p) in wanted}
