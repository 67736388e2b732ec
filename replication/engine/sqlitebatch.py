"""The message store on SQLite with a record batch a row (issue 30): the embedded default's
batch layout, the PostgreSQL batch store's (pgbatch/) twin.

A batch is stored as it travels on the wire (stored.py). Reads, fetch, retention, truncation
and replication are BatchLayout's, shared with PostgreSQL; what is here is SQLite's way of
writing: every write takes the file's write lock up front (BEGIN IMMEDIATE, as SqliteStore),
so offsets are read and advanced in one transaction that no other writer interleaves.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from uuid import UUID

from replication.engine.batchlayout import BatchLayout
from replication.engine.batchrules import placed, record_batches, renumbered
from replication.engine.compactstore import STATE_TABLE
from replication.engine.sequences import ProducerBatch, sequenced_partition
from replication.engine.sqlitestore import COMMON_SCHEMA, SqliteStore
from replication.engine.statements import ADVANCE_ONE, BATCH_COLUMNS
from replication.engine.store import (
    PartitionOutOfRange,
    Produce,
    Record,
    now_ms,
    plan_partitions,
)
from replication.engine.stored import RawBatch, StoredBatch, place
from replication.engine.txnstate import TXN_SCHEMA

# The columns of PostgreSQL's `batches` (pgbatch/schema.py), keyed by partition id and last
# offset: a fetch from any offset is one range scan of that key. A rowid table, unlike the
# messages': a WITHOUT ROWID table keeps its rows in the key's own b-tree, and a scan of it
# walked each batch's overflow pages (16 KiB batches: a 1 MiB fetch took 21 ms, not 3.5 ms,
# and appends 40 % longer; 1 MiB batches: a scan of 300 keys took 0.16 s, not 5 ms), as
# sqlite.org/withoutrowid.html warns for rows over a twentieth of a page.
BATCHES = """
CREATE TABLE IF NOT EXISTS batches (
    pid INTEGER NOT NULL,
    last_offset INTEGER NOT NULL,
    base_offset INTEGER NOT NULL,
    records INTEGER NOT NULL,
    first_ts INTEGER NOT NULL,
    max_ts INTEGER NOT NULL,
    producer_id INTEGER NOT NULL,
    epoch INTEGER NOT NULL,
    base_sequence INTEGER NOT NULL,
    attributes INTEGER NOT NULL,
    crc INTEGER NOT NULL,
    origin BLOB NOT NULL,
    producer TEXT,
    size INTEGER NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (pid, last_offset)
);
"""
INSERT = f"INSERT INTO batches (pid, {BATCH_COLUMNS}) VALUES ({', '.join(['?'] * 15)})"

Numbered = Callable[[object, int], StoredBatch]  # a batch to store, given its base offset


class SqliteBatchStore(BatchLayout, SqliteStore):
    """MessageStore on a SQLite file, a batch a row. Thread-safe: one connection per thread."""

    TABLES = COMMON_SCHEMA + BATCHES + TXN_SCHEMA + STATE_TABLE

    def _upgrade(self) -> None:
        """Nothing to bring up to date: the batch layout began after the row store's changes
        (null values, cursor metadata), so its tables were made with them."""

    def _copy(self, conn: sqlite3.Connection, pid: int, batches: Sequence[StoredBatch]) -> None:
        conn.executemany(INSERT, [(pid, *b) for b in batches])

    # --- appends ---------------------------------------------------------------------------

    def append_batches(self, stream: UUID, topic: str, batches: dict[int, list[RawBatch]], *,
                       origin: UUID, producer: str | None = None,
                       log_append_time: bool = False, sequence: ProducerBatch | None = None,
                       admit: Callable[[], None] | None = None) -> dict[int, int]:
        """The checked batches stored as sent, their base offsets written (and a LogAppendTime
        topic's timestamps): no record is decoded."""
        stamp = now_ms() if log_append_time else None
        with self._writing() as conn:
            ends = self._topic_ends(conn, stream, topic)
            wrong = [p for p in batches if not 0 <= p < len(ends)]
            if wrong:
                raise PartitionOutOfRange(
                    f"partition {wrong[0]} does not exist: the topic has partitions "
                    f"0..{len(ends) - 1}")
            if sequence is not None:
                # BEGIN IMMEDIATE holds the write lock: the state read here holds till commit.
                (p,) = batches
                retried = self._sequence(conn, ends[p][0], sequence, ends[p][1])
                if retried is not None:
                    return {p: retried}
            if admit is not None:
                admit()  # under the write lock: see fence_appends
            return self._insert(conn, ends, batches, lambda b, at: place(
                b, at, origin.bytes, producer, stamp))

    def _append(self, stream: UUID, topic: str, records: Sequence[Record],
                produce: Produce) -> list[tuple[int, int]]:
        with self._writing() as conn:
            ends = self._topic_ends(conn, stream, topic)
            if produce.sequence is not None:
                p = sequenced_partition(records, len(ends))
                retried = self._sequence(conn, ends[p][0], produce.sequence, ends[p][1])
                if retried is not None:
                    return [(p, retried + i) for i in range(len(records))]
            if produce.admit is not None:
                produce.admit()
            plan = plan_partitions(records, len(ends), self._rr)
            firsts = self._insert(conn, ends, record_batches(records, plan, produce),
                                  renumbered)
        self._rr = plan.counter
        return placed(plan, firsts)

    def _insert(self, conn: sqlite3.Connection, ends: list[tuple], batches: dict[int, list],
                numbered: Numbered) -> dict[int, int]:
        """Each partition's batches numbered from its next offset (`ends`: (id, next offset)
        per partition, read under the write lock) and stored, its counters advanced; the
        first offset each partition gave them."""
        firsts, rows, advance = {}, [], []
        for p, bs in batches.items():
            pid, at = ends[p]
            firsts[p] = at
            for b in bs:
                rows.append((pid, numbered(b, at)))
                at += b.records
            advance.append((at, at - firsts[p], sum(b.size for b in bs), pid))
        conn.executemany(INSERT, [(pid, *b) for pid, b in rows])
        self._open_ranges(conn, rows)
        conn.executemany(self._sql(ADVANCE_ONE), advance)
        return firsts
