"""The message store on PostgreSQL with a record batch a row (issue 30).

A batch is stored as it travels on the wire (stored.py); produce numbers a producer's batch
and appends it whole, fetch returns stored bytes, replication copies batch rows byte for byte.
Everything shared with the row store (the partition catalog, cursors, producer states, the
failover fence, the locks' order) is inherited from it; what touches messages and does not
depend on the database is BatchLayout's (batchlayout.py, shared with the SQLite batch store);
appends, which reserve offsets and COPY batches in PostgreSQL's way, are here.

While the row layout is still the default, a database holds one layout or the other:
`open_store` looks at which table it has, and makes new ones as the caller asks.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any
from uuid import UUID

import psycopg
from psycopg import postgres
from psycopg.adapt import Dumper
from psycopg.pq import Format

from replication.engine.batchlayout import BatchLayout
from replication.engine.batchrules import placed, record_batches, renumbered
from replication.engine.compactstore import Head
from replication.engine.durability import LOCAL_COMMIT, local_commit
from replication.engine.pg.append import _Retried, _rolled_back, _TopicChanged, reserve
from replication.engine.pg.schema import LOCK
from replication.engine.pg.store import PostgresStore
from replication.engine.pgbatch import schema as s
from replication.engine.pgbatch.apply import copy_batches
from replication.engine.pgbatch.tailcache import TailCache
from replication.engine.sequences import (
    ProducerBatch,
    SequencesApart,
    sequence_check,
    sequence_is_next,
    sequence_next,
    sequenced_partition,
)
from replication.engine.store import (
    PartitionOutOfRange,
    Produce,
    Record,
    StoreError,
    now_ms,
    plan_partitions,
)
from replication.engine.stored import RawBatch, StoredBatch, place


class PgBatchStore(BatchLayout, PostgresStore):
    """MessageStore on PostgreSQL, a batch a row. Thread-safe, as PostgresStore. Reads,
    retention and replication are BatchLayout's (shared with SQLite); appends are COPY."""

    SEQUENCES_TOGETHER = True
    # Compaction's chunks commit without waiting for the WAL's flush (nor a standby's): a
    # chunk lost with the server (or a failover) leaves its batches as they were, counters
    # with them, and WAL is replayed in order, so none is lost while a later one stays (the
    # pass's record, a later stage's tombstone drops). Each chunk's commit waited ~2.5 ms for
    # its ~6 MB of WAL (a deleted batch's TOAST pages), under the partition's lock.
    CHUNK_COMMIT = "SET LOCAL synchronous_commit = off"

    def __init__(self, url: str, *, fetch_cache: int = 0, **kwargs: Any) -> None:
        """`fetch_cache`: bytes of recent batches kept for fetches (tailcache.py; 0: none)."""
        super().__init__(url, **kwargs)
        self._tail = TailCache(fetch_cache)

    def _create_schema(self, conn: psycopg.Connection) -> None:
        if conn.execute("SELECT to_regclass('messages') IS NOT NULL").fetchone()[0]:
            raise StoreError("this store's conversion to the batch layout did not finish: "
                             "run `manage.py convertstores` again (docs/operations.md)")
        conn.execute(s.SCHEMA)
        if conn.execute(s.STORAGE_UNSET).fetchone()[0]:
            conn.execute(s.STORAGE_SET)

    def _binary(self, conn: psycopg.Connection) -> psycopg.Cursor:
        return conn.cursor(binary=True)

    def _read_all(self, conn: psycopg.Connection, queries: list[tuple[str, tuple]],
                  ) -> list[list]:
        # One round trip for a Fetch's topic: the statements ride a pipeline.
        cursors = [self._binary(conn) for _ in queries]
        with conn.pipeline():
            for cur, (query, args) in zip(cursors, queries, strict=True):
                cur.execute(query, args)
        return [cur.fetchall() for cur in cursors]

    def _lock_many(self, conn: psycopg.Connection, pids: list[int]) -> dict[int, tuple[int, int]]:
        return {pid: (low, nxt) for pid, low, nxt in conn.execute(LOCK, (sorted(pids),))}

    def _disk(self, conn: psycopg.Connection) -> tuple[int, int, int]:
        return conn.execute(
            "SELECT coalesce(sum(bytes), 0), coalesce(sum(rows), 0), "
            "pg_total_relation_size('batches') FROM partitions").fetchone()

    @staticmethod
    def _copy(conn: psycopg.Connection, pid: int, batches: Sequence[StoredBatch]) -> None:
        copy_batches(conn, pid, batches)

    def _drop_if_same(self, conn: psycopg.Connection, pid: int,
                      batches: Sequence[Head | StoredBatch]) -> set[int]:
        # Compaction's chunk of batches in one statement, not a round trip each.
        return {last for (last,) in conn.execute(s.DROP_IF_SAME, (
            [b.last_offset for b in batches], [b.crc for b in batches], pid))}

    def _insert_rows(self, conn: psycopg.Connection, rows: Sequence[tuple[int, StoredBatch]],
                     ) -> None:
        # A transaction's markers in every partition: one statement, not a COPY each.
        conn.cursor().execute(s.INSERT_BATCHES, columns(list(rows)), binary=True)

    def _opened(self, conn: psycopg.Connection, pids: Sequence[int], producer_id: int,
                ) -> list[int]:
        return [pid for (pid,) in conn.execute(s.OPENED, (list(pids), producer_id))]

    # --- appends ---------------------------------------------------------------------------

    def append_batches(self, stream: UUID, topic: str, batches: dict[int, list[RawBatch]], *,
                       origin: UUID, producer: str | None = None,
                       log_append_time: bool = False, sequence: ProducerBatch | None = None,
                       sequences: dict[int, ProducerBatch] | None = None,
                       admit: Callable[[], None] | None = None) -> dict[int, int]:
        """The checked batches stored as sent, their base offsets written (and a LogAppendTime
        topic's timestamps): no record is decoded. `sequences`: an idempotent producer's batch
        in each partition, in one transaction if each is the next of its partition (else
        SequencesApart, nothing written)."""
        stamp = now_ms() if log_append_time else None
        if sequence is not None:
            sequences = {next(iter(batches)): sequence}
        try:
            return self._write(stream, topic, batches, sequences, admit,
                               lambda b, first: place(b, first, origin.bytes, producer, stamp))
        except _Retried as retried:
            return {next(iter(batches)): retried.first}

    def _append(self, stream: UUID, topic: str, records: Sequence[Record],
                produce: Produce) -> list[tuple[int, int]]:
        for _ in range(3):
            ids = self._topic_cache(stream, topic)
            if produce.sequence is not None:
                sequenced_partition(records, len(ids))
            plan = plan_partitions(records, len(ids), self._rr)
            batches = record_batches(records, plan, produce)
            sequences = None if produce.sequence is None else {
                records[0].partition: produce.sequence}
            try:
                firsts = self._write_once(stream, topic, ids, batches, sequences,
                                          produce.admit, renumbered)
            except _TopicChanged:
                self._topics.pop((stream, topic), None)  # it grew or vanished: look again
                continue
            except _Retried as retried:
                p = records[0].partition
                return [(p, retried.first + i) for i in range(len(records))]
            self._rr = plan.counter
            return placed(plan, firsts)
        raise StoreError(f"topic {topic!r} kept changing while appending: try again")

    def _write(self, stream: UUID, topic: str, batches: dict[int, list], sequences:
               dict[int, ProducerBatch] | None, admit: Callable[[], None] | None,
               numbered: Callable[[Any, int], tuple]) -> dict[int, int]:
        """`_write_once` of batches naming their partitions, again when the topic changed
        meanwhile; PartitionOutOfRange when one names a partition the topic does not have."""
        for _ in range(3):
            ids = self._topic_cache(stream, topic)
            wrong = [p for p in batches if not 0 <= p < len(ids)]
            if wrong:
                self._topics.pop((stream, topic), None)
                ids = self._topic_cache(stream, topic)
                if any(not 0 <= p < len(ids) for p in wrong):
                    raise PartitionOutOfRange(
                        f"partition {wrong[0]} does not exist: the topic has partitions "
                        f"0..{len(ids) - 1}")
            try:
                return self._write_once(stream, topic, ids, batches, sequences, admit, numbered)
            except _TopicChanged:
                self._topics.pop((stream, topic), None)
        raise StoreError(f"topic {topic!r} kept changing while appending: try again")

    def _write_once(self, stream: UUID, topic: str, ids: list[int], batches: dict[int, list],
                    sequences: dict[int, ProducerBatch] | None,
                    admit: Callable[[], None] | None,
                    numbered: Callable[[Any, int], tuple]) -> dict[int, int]:
        """Reserve each partition's offsets, check the producer's sequences, admit, and insert
        the batches, each numbered from its first offset, in one transaction; the first
        offset of each partition.

        Two round trips to the store: BEGIN, the reservations (which lock the partitions'
        rows) and the producer's states in one pipeline; then their new states, the batch
        rows, the transactions' ranges and COMMIT in another, sent before the fence's read of
        the control database (`admit`, which must follow the locks: see fence_appends) so the
        store works while it runs, the COMMIT last, once admitted. An idempotent producer's
        batches of several partitions share the transaction, so its produce request waits
        for one commit, not one a partition (as a plain producer's)."""
        pids = {p: ids[p] for p in batches}
        totals = {p: (sum(b.records for b in bs), sum(b.size for b in bs))
                  for p, bs in batches.items()}
        with self._pool.connection() as conn, _rolled_back(conn), conn.cursor() as cur:
            producer = None if not sequences else next(iter(sequences.values())).producer_id
            firsts, states = reserve(conn, cur, stream, topic, len(ids), pids, totals, producer)
            for p, batch in (sequences or {}).items():
                if len(sequences) > 1:
                    if not sequence_is_next(states[p], batch):  # rolls back, as below
                        raise SequencesApart(f"producer {producer}: partition {p}'s batch is "
                                             "not its next")
                    continue
                retried = sequence_check(states[p], batch)
                if retried is not None:
                    raise _Retried(retried)  # rolls back: the reserved offsets are given back
            rows = []
            for part, bs in batches.items():
                at = firsts[part]
                for b in bs:
                    rows.append((pids[part], numbered(b, at)))
                    at += b.records
            with conn.pipeline():  # each statement is sent as it is executed
                for p, batch in (sequences or {}).items():
                    self._put_state(cur, pids[p], producer,
                                    sequence_next(states[p], batch, firsts[p]))
                if rows:
                    cur.execute(s.INSERT_BATCHES, columns(rows), binary=True)
                self._open_ranges(conn, rows)
                if admit is not None:
                    admit()  # under the partitions' locks: see fence_appends
                if local_commit():  # acks=0/1: the primary's own commit answers
                    conn.execute(LOCAL_COMMIT)
                conn.execute("COMMIT")
        self._tail.put_rows((pid, b.last_offset, b.base_offset, b.crc, b.data) for pid, b in rows)
        return firsts

    def _fetch_statement(self, pid: int, offset: int, max_bytes: int,
                         ) -> tuple[str, tuple, Callable[[list], list]]:
        if not self._tail.max_bytes:
            return super()._fetch_statement(pid, offset, max_bytes)
        held = self._tail.held(pid, offset, max_bytes)
        args = (pid, offset, list(held), [h.base_offset for h in held.values()],
                [h.crc for h in held.values()], [len(h.data) for h in held.values()],
                max_bytes, offset)

        def rows_of(rows: list) -> list:
            out, read = [], []
            for data, base, records, size, last, crc in rows:
                if data is None:
                    data = held[last].data
                else:
                    read.append((pid, last, base, crc, data))
                out.append((data, base, records, size))
            self._tail.put_rows(read)
            return out

        return s.FETCH_CACHED, args, rows_of


def columns(rows: list[tuple[int, StoredBatch]]) -> list[Any]:
    """INSERT_BATCHES' parameters: the rows' (partition id, batch) columns, one list each,
    the batches' bytes as one ready binary array."""
    cols: list[Any] = [[pid for pid, _ in rows], *map(list, zip(*(b for _, b in rows),
                                                                strict=True))]
    cols[-1] = ByteaArray(cols[-1])
    return cols


class ByteaArray:
    """A bytea[] parameter built in one join of its elements: psycopg's list dumper copies
    each element and then the whole again, a megabyte of batches per append (about a fifth
    of the listener's produce CPU in py-spy)."""

    __slots__ = ("items",)

    def __init__(self, items: Sequence[bytes]) -> None:
        self.items = items


_ARRAY_HEAD = struct.Struct(">iiiii")  # dimensions, has nulls, element oid; size, lower bound
_LENGTH = struct.Struct(">i")


class _ByteaArrayDumper(Dumper):
    format = Format.BINARY
    oid = postgres.types["bytea"].array_oid

    def dump(self, obj: ByteaArray) -> bytes:
        items = obj.items
        if not items:
            return struct.pack(">iii", 0, 0, postgres.types["bytea"].oid)
        parts = [_ARRAY_HEAD.pack(1, 0, postgres.types["bytea"].oid, len(items), 1)]
        for item in items:
            parts += (_LENGTH.pack(len(item)), item)
        return b"".join(parts)


psycopg.adapters.register_dumper(ByteaArray, _ByteaArrayDumper)
