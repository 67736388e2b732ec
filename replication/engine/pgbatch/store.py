"""The message store on PostgreSQL with a record batch a row (issue 30).

A batch is stored as it travels on the wire (stored.py); produce numbers a producer's batch
and appends it whole, fetch returns stored bytes, replication copies batch rows byte for byte.
Everything shared with the row store (the partition catalog, cursors, producer states, the
failover fence, the locks' order) is inherited from it; what touches messages is here.

While the row layout is still the default, a database holds one layout or the other:
`open_store` looks at which table it has, and makes new ones as the caller asks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Unpack
from uuid import UUID

import psycopg

from replication.engine.batches import Ends, Trimmed, trim_runs
from replication.engine.pg.append import _committing, _Retried, _TopicChanged
from replication.engine.pg.schema import ADVANCE, LINK_CURSORS, LOCK, START
from replication.engine.pg.store import PostgresStore
from replication.engine.pgbatch import schema as s
from replication.engine.pgbatch.apply import Listed, apply_locked, copy_batches, stored_batch
from replication.engine.recordbatch import Budget
from replication.engine.sequences import ProducerBatch, sequenced_partition
from replication.engine.statements import TRUNCATE, TRUNCATE_CURSORS
from replication.engine.store import (
    Applied,
    Key,
    Message,
    OffsetOutOfRange,
    PartitionOutOfRange,
    PartitionStats,
    Produce,
    ReadBounds,
    Record,
    ReturnToOrigin,
    StoreError,
    encode_headers,
    now_ms,
    partition_stats_from,
    plan_partitions,
    record_size,
)
from replication.engine.storebase import MessageStore
from replication.engine.stored import (
    Fetched,
    RawBatch,
    StoredBatch,
    batch_of,
    check_batches,
    message_batch,
    messages_of,
    place,
    records_of,
)


class PgBatchStore(PostgresStore):
    """MessageStore on PostgreSQL, a batch a row. Thread-safe, as PostgresStore."""

    ROW_OVERHEAD = 0  # a row carries ~1,000 messages: its own cost is noise
    KEEPS_BATCHES = True
    DATA_TABLE = "batches"

    def _create_schema(self, conn: psycopg.Connection) -> None:
        conn.execute(s.SCHEMA)
        if conn.execute(s.STORAGE_UNSET).fetchone()[0]:
            conn.execute(s.STORAGE_SET)

    # --- appends ---------------------------------------------------------------------------

    def append_raw(self, stream: UUID, topic: str, partition: int, data: bytes, *,
                   origin: UUID, log_append_time: bool = False,
                   budget: Budget | None = None) -> list[tuple[int, int]]:
        """A Kafka Produce partition's bytes checked and appended a batch at a time, as the
        listener does: (first offset, records) per batch."""
        out = []
        for raw in check_batches(data, budget):
            sequence = None
            if raw.producer_id >= 0 and raw.base_sequence >= 0:
                sequence = ProducerBatch(raw.producer_id, raw.epoch, raw.base_sequence,
                                         raw.records)
            firsts = self.append_batches(stream, topic, {partition: [raw]}, origin=origin,
                                         log_append_time=log_append_time, sequence=sequence)
            out.append((firsts[partition], raw.records))
        return out

    def append_batches(self, stream: UUID, topic: str, batches: dict[int, list[RawBatch]], *,
                       origin: UUID, producer: str | None = None,
                       log_append_time: bool = False, sequence: ProducerBatch | None = None,
                       admit: Callable[[], None] | None = None) -> dict[int, int]:
        """The checked batches stored as sent, their base offsets written (and a LogAppendTime
        topic's timestamps): no record is decoded."""
        stamp = now_ms() if log_append_time else None
        try:
            return self._write(stream, topic, batches, sequence, admit,
                               lambda b, first: place(b, first, origin.bytes, producer, stamp))
        except _Retried as retried:
            return {next(iter(batches)): retried.first}

    def _append(self, stream: UUID, topic: str, records: Sequence[Record],
                produce: Produce) -> list[tuple[int, int]]:
        seq = produce.sequence
        sequence = (seq.producer_id, seq.epoch, seq.first_seq) if seq else (-1, -1, -1)
        for _ in range(3):
            ids = self._topic_cache(stream, topic)
            if seq is not None:
                sequenced_partition(records, len(ids))
            plan = plan_partitions(records, len(ids), self._rr)
            now, batches = now_ms(), {}
            for p in plan.totals:
                part = [r for r, q in zip(records, plan.parts, strict=True) if q == p]
                batches[p] = [batch_of(part, 0, now, origin=produce.origin,
                                       producer=produce.producer, sequence=sequence,
                                       log_append_time=produce.log_append_time)]
            try:
                firsts = self._write_once(stream, topic, ids, batches, seq, produce.admit,
                                          _renumbered)
            except _TopicChanged:
                self._topics.pop((stream, topic), None)  # it grew or vanished: look again
                continue
            except _Retried as retried:
                p = records[0].partition
                return [(p, retried.first + i) for i in range(len(records))]
            self._rr = plan.counter
            nxt, placed = dict(firsts), []
            for p in plan.parts:
                placed.append((p, nxt[p]))
                nxt[p] += 1
            return placed
        raise StoreError(f"topic {topic!r} kept changing while appending: try again")

    def _write(self, stream: UUID, topic: str, batches: dict[int, list], sequence, admit,
               numbered) -> dict[int, int]:
        """Reserve each partition's offsets, check the producer's sequence, admit, and copy
        the numbered batches in, in one transaction; the first offset of each partition."""
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
                return self._write_once(stream, topic, ids, batches, sequence, admit, numbered)
            except _TopicChanged:
                self._topics.pop((stream, topic), None)
        raise StoreError(f"topic {topic!r} kept changing while appending: try again")

    def _write_once(self, stream, topic, ids, batches, sequence, admit, numbered):
        pids = {p: ids[p] for p in batches}
        totals = {p: (sum(b.records for b in bs), sum(b.size for b in bs))
                  for p, bs in batches.items()}
        with self._pool.connection() as conn, _committing(conn), conn.cursor() as cur:
            order = sorted(pids, key=pids.__getitem__)
            params = [{"id": pids[p], "n": totals[p][0], "b": totals[p][1], "s": stream,
                       "t": topic} for p in order]
            with conn.pipeline():
                conn.execute("BEGIN")
                cur.executemany(s.RESERVE, params, returning=True)
            rows = cur.fetchall()
            while cur.nextset():
                rows += cur.fetchall()
            if len(rows) != len(order) or any(n != len(ids) for *_, n in rows):
                raise _TopicChanged
            first = {pid: off for pid, off, _ in rows}
            firsts = {p: first[pid] for p, pid in pids.items()}
            if sequence is not None:
                ((p, pid),) = pids.items()
                retried = self._sequence(cur, pid, sequence, firsts[p])
                if retried is not None:
                    raise _Retried(retried)
            if admit is not None:
                admit()
            with cur.copy(s.COPY_IN) as copy:
                copy.set_types(s.COPY_TYPES)
                for p, bs in batches.items():
                    at = firsts[p]
                    for b in bs:
                        copy.write_row((pids[p], *numbered(b, at)))
                        at += b.records
        return firsts

    # --- reads -----------------------------------------------------------------------------

    def read(self, stream: UUID, topic: str, partition: int, offset: int,
             **bounds: Unpack[ReadBounds]) -> list[Message]:
        limit, max_bytes = bounds.get("limit", 1000), bounds.get("max_bytes", 1 << 20)
        with self._reading() as conn:
            pid = self._pid(conn, stream, topic, partition)
            low, high = self._range(conn, stream, topic, pid)
            if not low <= offset <= high:
                raise OffsetOutOfRange(offset, low, high)
            rows = conn.cursor(binary=True).execute(
                s.READ, (pid, offset, offset + limit, max_bytes, offset)).fetchall()
        out, total = [], 0
        for m in messages_of(rows, topic, partition, offset, limit, self._origins):
            total += record_size(m)
            if out and total > max_bytes:
                break
            out.append(m)
        return out

    def read_rows(self, stream: UUID, topic: str, partition: int, offset: int, *,
                  limit: int = 1000, max_bytes: int = 1 << 20) -> list[tuple]:
        return [(m.offset, m.timestamp_ms, m.key, m.value, _headers(m), m.origin.bytes,
                 m.producer, record_size(m))
                for m in self.read(stream, topic, partition, offset, limit=limit,
                                   max_bytes=max_bytes)]

    def fetch(self, stream: UUID, topic: str, partition: int, offset: int,
              max_bytes: int) -> Fetched:
        """The stored batches from the one holding `offset`, whole: the first always, the
        next while they fit `max_bytes` (a consumer skips what precedes its offset)."""
        with self._reading() as conn:
            pid = self._pid(conn, stream, topic, partition)
            rows = conn.cursor(binary=True).execute(
                s.FETCH, (pid, offset, max_bytes, offset)).fetchall()
        if not rows:
            return Fetched(b"", 0, 0)
        first = rows[0][1]
        return Fetched(b"".join(map(itemgetter(0), rows)),
                       sum(map(itemgetter(2), rows)) - max(offset - first, 0),
                       sum(map(itemgetter(3), rows)))

    def offset_for_time(self, stream: UUID, topic: str, partition: int,
                        timestamp_ms: int) -> tuple[int, int] | None:
        with self._reading() as conn:
            pid = self._pid(conn, stream, topic, partition)
            low, _ = self._range(conn, stream, topic, pid)
            row = conn.cursor(binary=True).execute(s.TIME_BATCH,
                                                   (pid, low, timestamp_ms)).fetchone()
        if row is None:
            return None
        base, records = records_of(bytes(row[0]))
        for i, r in enumerate(records):
            if base + i >= low and r.timestamp_ms >= timestamp_ms:
                return base + i, r.timestamp_ms
        return None

    def max_timestamp(self, stream: UUID, topic: str, partition: int) -> tuple[int, int] | None:
        with self._reading() as conn:
            pid = self._pid(conn, stream, topic, partition)
            low, _ = self._range(conn, stream, topic, pid)
            row = conn.cursor(binary=True).execute(s.MAX_TS_BATCH, (pid, low)).fetchone()
        if row is None:
            return None
        base, records = records_of(bytes(row[0]))
        kept = [(r.timestamp_ms, -(base + i)) for i, r in enumerate(records) if base + i >= low]
        ts, neg = max(kept)
        return -neg, ts

    def partition_stats(self, stream: UUID, topic: str) -> list[PartitionStats]:
        with self._reading() as conn:
            rows = conn.execute(s.PARTITION_STATS, (stream, topic)).fetchall()
        return partition_stats_from(rows, topic)

    def _disk(self, conn: psycopg.Connection) -> tuple[int, int, int]:
        return conn.execute(
            "SELECT coalesce(sum(bytes), 0), coalesce(sum(rows), 0), "
            "pg_total_relation_size('batches') FROM partitions").fetchone()

    # --- retention and truncation: whole batches ---------------------------------------------

    def _expire_partition(self, pid: int, before_ms: int, limit: int) -> int:
        with self._writing() as conn:
            low = self._marks(conn, pid)[0]
            end, taken = None, 0
            for last, max_ts, records in conn.execute(s.OLDEST, (pid, low, 1000)):
                if max_ts >= before_ms or (taken and taken + records > limit):
                    break
                end, taken = last + 1, taken + records
            if end is None:
                return 0
            return self._cut_prefix(conn, pid, low, end)

    def trim(self, stream: UUID, topic: str, partition: int, end: int, *,
             batch: int = 10_000) -> int:
        """`stream purge` as the row store's, up to `batch` offsets a call: the low watermark
        may stop inside a batch (Kafka's DeleteRecords), which stays until all of it is
        below; returns the offsets newly below the low watermark."""
        with self._writing() as conn:
            pid = self._pid(conn, stream, topic, partition)
            low, nxt = self._marks(conn, pid)
            cut = min(end, nxt, low + batch)
            if cut <= low:
                return 0
            self._cut_prefix(conn, pid, low, cut)
            return cut - low

    def _delete_range(self, conn: psycopg.Connection, pid: int, low: int,
                      end: int) -> tuple[int, int]:
        """Whole batches ending below `end` (a prefix: retention and purge)."""
        return conn.execute(s.DELETE_BELOW, (pid, end)).fetchone()

    def truncate(self, stream: UUID, topic: str, partition: int, offset: int) -> int:
        """As the row store's; a batch that straddles `offset` keeps its records below it,
        written again as a batch of its own (with the same origin)."""
        with self._writing() as conn:
            pid = self._pid(conn, stream, topic, partition)
            nxt = self._lock(conn, pid)[1]
            if offset >= nxt:
                return 0
            rows = conn.cursor(binary=True).execute(s.DELETE_FROM, (pid, offset)).fetchall()
            count, size = sum(r[0] for r in rows), sum(r[1] for r in rows)
            kept = _kept_prefix(rows[0], offset) if rows and rows[0][2] < offset else None
            if kept is not None:
                self._copy(conn, pid, [kept])
                count, size = count - kept.records, size - kept.size
            conn.execute(TRUNCATE, (offset, offset, count, size, pid))
            for statement in TRUNCATE_CURSORS:
                conn.execute(statement, (offset, pid, offset))
        return nxt - offset

    @staticmethod
    def _copy(conn: psycopg.Connection, pid: int, batches: Sequence[StoredBatch]) -> None:
        copy_batches(conn, pid, batches)

    # --- replication -------------------------------------------------------------------------

    def _apply(self, stream: UUID, runs: dict[Key, list[Message]], link: str,
               origin_low: dict[Key, int] | None) -> tuple[Trimmed, Ends]:
        """Replicated messages (from a row store): each partition's run one batch."""
        with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            pids = self._apply_pids(conn, stream, runs)
            rows = cur.execute(LOCK, (sorted(pids.values()),)).fetchall()
            self._refuse_ended(conn, link)
            marks = {pid: (low, nxt) for pid, low, nxt in rows}
            trimmed = trim_runs(runs, {key: marks[pid] for key, pid in pids.items()}, origin_low)
            if trimmed.starts:
                cur.execute(START, ([pids[k] for k in trimmed.starts],
                                    list(trimmed.starts.values())))
            ends: Ends = {}
            for key, run in trimmed.todo.items():
                if run:
                    batch = message_batch(run)
                    self._copy(conn, pids[key], [batch])
                    ends[pids[key]] = (run[-1].offset + 1, len(run), batch.size)
            if ends:
                cur.execute(ADVANCE, (list(ends), *map(list, zip(*ends.values(), strict=True))))
            delivered = {pids[key]: run[-1].offset + 1 for key, run in runs.items()}
            cur.execute(LINK_CURSORS, (link, list(delivered), list(delivered.values())))
        return trimmed, ends

    def apply_from(self, source: MessageStore, source_stream: UUID, stream: UUID, topic: str,
                   partition: int, start: int, end: int, *, link: str) -> Applied | None:
        """Replication between batch stores: the source's batch rows of [start, end), copied
        as they are (a replica's batches are byte-identical to its origin's, CRCs equal),
        under the replica partition's lock, whole batches or nothing. None for another
        kind of source (the caller then applies messages)."""
        if not isinstance(source, PgBatchStore):
            return None
        key = (topic, partition)
        with source._pool.connection() as src:
            spid = source._pid(src, source_stream, topic, partition)
            low, high = source._range(src, source_stream, topic, spid)
            rows = src.cursor(binary=True).execute(
                s.SOURCE_BATCHES, (spid, max(start, low), min(end, high))).fetchall()
        batches = [stored_batch(row) for row in rows]
        if not batches:
            return Applied({})
        if any(UUID(bytes=b.origin) == stream for b in batches):
            raise ReturnToOrigin(f"{topic}:{partition}: its messages originate in stream "
                                 f"{stream}, and a message is never replicated back to its "
                                 "origin")
        return self._apply_batches(stream, key, batches, link, low)

    def _apply_batches(self, stream: UUID, key: Key, batches: list[StoredBatch], link: str,
                       origin_low: int) -> Applied:
        with self._pool.connection() as conn, conn.transaction():
            pid = self._apply_pids(conn, stream, {key: []})[key]
            done = apply_locked(conn, pid, key, Listed(batches), origin_low=origin_low,
                                link=link, delivered=batches[-1].last_offset + 1)
        return Applied({key: done.end}, {key: done.records}, done.size)


def _renumbered(batch: StoredBatch, base: int) -> tuple:
    if batch.base_offset == base:
        return batch
    data = bytearray(batch.data)
    data[:8] = base.to_bytes(8, "big", signed=True)
    return batch._replace(base_offset=base, last_offset=base + batch.records - 1,
                          data=bytes(data))


def _headers(m: Message) -> bytes | None:
    return encode_headers(m.headers) if m.headers else None


def _kept_prefix(row: tuple, offset: int) -> StoredBatch | None:
    """The records of a deleted batch's row (records, size, base, data, origin, producer)
    below `offset`, as a batch of their own."""
    _, _, base, data, origin, producer = row
    _, records = records_of(bytes(data))
    kept = records[: offset - base]
    if not kept:
        return None
    return batch_of(kept, base, kept[0].timestamp_ms or 0, origin=bytes(origin),
                    producer=producer)
