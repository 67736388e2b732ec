"""The batch layout's methods (issue 30), written once for PostgreSQL and SQLite: a record
batch a row, read, fetched, expired, trimmed, truncated and replicated whole. Each batch store
(pgbatch/, sqlitebatch.py) derives from `BatchLayout` and its row store, and fills the few
hooks that differ: how rows come back as bytes, how batches go in, how partitions lock.

The statements are statements.py's, in PostgreSQL's dialect (`_sql` turns them into
SQLite's); the rules no dialect touches are batchrules.py's."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import groupby
from operator import itemgetter
from typing import Any, Unpack
from uuid import UUID

from replication.engine.batches import Ends, Trimmed, trim_runs
from replication.engine.batchrules import (
    expired_end,
    fetched,
    first_at_time,
    kept_prefix,
    latest_in,
    take_batches,
)
from replication.engine.compactstore import FIRST_BATCH, CompactionMethods
from replication.engine.recordbatch import Budget
from replication.engine.sequences import ProducerBatch
from replication.engine.statements import (
    ADVANCE_ONE,
    BATCH_PARTITION_STATS,
    DELETE_BATCHES_BELOW,
    DELETE_BATCHES_FROM,
    FETCH_BATCHES,
    LINK_CURSOR,
    MAX_TS_BATCH,
    OLDEST_BATCHES,
    READ_BATCHES,
    SOURCE_BATCHES,
    START_AT,
    TIME_BATCH,
    TRUNCATE,
    TRUNCATE_CURSORS,
    WATERMARKS,
)
from replication.engine.store import (
    Applied,
    Key,
    Message,
    OffsetOutOfRange,
    PartitionOutOfRange,
    PartitionStats,
    ReadBounds,
    ReturnToOrigin,
    StoreError,
    UnknownTopic,
    encode_headers,
    partition_stats_from,
    record_size,
)
from replication.engine.storebase import Connection, MessageStore
from replication.engine.stored import (
    Fetched,
    StoredBatch,
    check_batches,
    message_batch,
    messages_of,
)
from replication.engine.txnstate import (
    ABORTED_FROM,
    STABLE,
    TransactionRanges,
    TxnView,
    fetched_below,
)


class BatchLayout(TransactionRanges, CompactionMethods):
    """What a batch store does the same on either database. Put before the row store in the
    bases, so these methods take the row store's place."""

    ROW_OVERHEAD = 0  # a row carries ~1,000 messages: its own cost is noise
    KEEPS_BATCHES = True
    DATA_TABLE = "batches"

    # --- what each batch store provides ---------------------------------------------------

    def _binary(self, conn: Connection) -> Any:
        """Something with `execute` that returns bytea columns as bytes (PostgreSQL: a
        binary cursor, so batches are not sent as hex)."""
        return conn

    def _lock_many(self, conn: Connection, pids: list[int]) -> dict[int, tuple[int, int]]:
        """(low, next offset) of each partition, locked until the commit, in id order so two
        appliers cannot deadlock."""
        return {pid: self._lock(conn, pid) for pid in sorted(pids)}

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

    # --- reads -----------------------------------------------------------------------------

    def read(self, stream: UUID, topic: str, partition: int, offset: int,
             **bounds: Unpack[ReadBounds]) -> list[Message]:
        limit, max_bytes = bounds.get("limit", 1000), bounds.get("max_bytes", 1 << 20)
        with self._reading() as conn:
            pid = self._pid(conn, stream, topic, partition)
            low, high = self._range(conn, stream, topic, pid)
            if not low <= offset <= high:
                raise OffsetOutOfRange(offset, low, high)
            # A compacted partition's offsets have gaps (issue 31): `limit` counts from the
            # first batch at or after `offset`, so a read never comes back empty before the end.
            first = self._one(conn, FIRST_BATCH, (pid, offset))
            start = max(offset, first[0]) if first else offset
            rows = self._binary(conn).execute(self._sql(READ_BATCHES), (
                pid, offset, start + limit, max_bytes, start)).fetchall()
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
            query, args, rows_of = self._fetch_statement(pid, offset, max_bytes)
            rows = self._binary(conn).execute(self._sql(query), args).fetchall()
        return fetched(rows_of(rows), offset)

    def _fetch_statement(self, pid: int, offset: int, max_bytes: int,
                         ) -> tuple[str, tuple, Callable[[list], list]]:
        """A fetch's statement for one partition, its arguments, and what turns its rows into
        `fetched`'s (data, base offset, records, size); PostgreSQL's sends only the bytes
        of the batches its process does not hold (pgbatch/tailcache.py)."""
        return FETCH_BATCHES, (pid, offset, max_bytes, offset), _same

    def fetch_partitions(self, stream: UUID, topic: str, reads: Sequence[tuple[int, int, int]],
                         committed: bool = False,
                         ) -> tuple[dict[int, tuple[int, int]], list[Fetched], list[TxnView]]:
        """The topic's watermarks, and `fetch` of each (partition, offset, max_bytes) read
        with them, on one connection (PostgreSQL: in one round trip, the statements in the
        order the calls one by one would run them); `committed` (read_committed): each read
        with `txn_view` (else the high watermark is stable) and stopped at it. A partition
        the topic lacks fetches nothing; so may an offset outside the watermarks, which the
        caller refuses from them."""
        with self._reading() as conn:
            pids = []
            for partition, _, _ in reads:
                try:
                    pids.append(self._pid(conn, stream, topic, partition))
                except PartitionOutOfRange:
                    pids.append(None)
            queries, rows_of = [(WATERMARKS, (self._key(stream), topic))], []
            for pid, (_, offset, max_bytes) in zip(pids, reads, strict=True):
                if pid is not None:
                    queries += [(STABLE, (pid,)), (ABORTED_FROM, (pid, offset))] if committed \
                        else []
                    query, args, finish = self._fetch_statement(pid, offset, max_bytes)
                    queries.append((query, args))
                    rows_of.append(finish)
            answers = iter(self._read_all(conn, queries))
            finishes = iter(rows_of)
        marks = {p: (low, high) for p, low, high in next(answers)}
        if not marks:
            raise UnknownTopic(f"topic {topic!r} does not exist in stream {stream}")
        found, views = [], []
        for pid, (partition, offset, _) in zip(pids, reads, strict=True):
            high = marks.get(partition, (0, 0))[1]
            view = TxnView(high, [])
            if pid is not None and committed:
                first = next(answers)[0][0]
                stable = high if first is None else min(first, high)
                view = TxnView(stable, [(int(p), int(f)) for p, f in next(answers)
                                        if f < stable and offset < stable])
            got = Fetched((), 0, 0) if pid is None else fetched(next(finishes)(next(answers)),
                                                                 offset)
            found.append(fetched_below(got, view.stable) if view.stable < high else got)
            views.append(view)
        return marks, found, views

    def _read_all(self, conn: Connection, queries: list[tuple[str, tuple]]) -> list[list]:
        """The rows of each (statement, arguments), bytes in binary."""
        return [self._binary(conn).execute(self._sql(q), args).fetchall() for q, args in queries]

    def offset_for_time(self, stream: UUID, topic: str, partition: int,
                        timestamp_ms: int) -> tuple[int, int] | None:
        with self._reading() as conn:
            pid = self._pid(conn, stream, topic, partition)
            low, _ = self._range(conn, stream, topic, pid)
            row = self._binary(conn).execute(self._sql(TIME_BATCH),
                                             (pid, low, timestamp_ms)).fetchone()
        return None if row is None else first_at_time(row[0], low, timestamp_ms)

    def max_timestamp(self, stream: UUID, topic: str, partition: int) -> tuple[int, int] | None:
        with self._reading() as conn:
            pid = self._pid(conn, stream, topic, partition)
            low, _ = self._range(conn, stream, topic, pid)
            row = self._binary(conn).execute(self._sql(MAX_TS_BATCH),
                                             (pid, pid, low)).fetchone()
        return None if row is None else latest_in(row[0], low)

    def batch_holding(self, stream: UUID, topic: str, partition: int,
                      offset: int) -> StoredBatch | None:
        """The stored batch holding `offset`, header and bytes (None if none does): which
        producer, epoch and sequence wrote a message, for diagnosis."""
        batches, _, _ = self._source_batches(stream, topic, partition, offset, offset + 1)
        return batches[0] if batches else None

    def partition_stats(self, stream: UUID, topic: str) -> list[PartitionStats]:
        with self._reading() as conn:
            rows = self._all(conn, BATCH_PARTITION_STATS, (self._key(stream), topic))
        return partition_stats_from(rows, topic)

    # --- retention and truncation: whole batches ---------------------------------------------

    def _expire_partition(self, pid: int, before_ms: int, limit: int) -> int:
        with self._writing() as conn:
            low = self._marks(conn, pid)[0]
            end = expired_end(self._all(conn, OLDEST_BATCHES, (pid, low, 1000)), before_ms,
                              limit)
            return 0 if end is None else self._cut_prefix(conn, pid, low, end)

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

    def _delete_range(self, conn: Connection, pid: int, low: int, end: int) -> tuple[int, int]:
        """Whole batches ending below `end` (a prefix: retention and purge)."""
        rows = self._all(conn, DELETE_BATCHES_BELOW, (pid, end))
        return sum(r[0] for r in rows), sum(r[1] for r in rows)

    def truncate(self, stream: UUID, topic: str, partition: int, offset: int) -> int:
        """As the row store's; a batch that straddles `offset` keeps its records below it,
        written again as a batch of its own (with the same origin)."""
        with self._writing() as conn:
            pid = self._pid(conn, stream, topic, partition)
            nxt = self._lock(conn, pid)[1]
            if offset >= nxt:
                return 0
            rows = sorted(self._binary(conn).execute(
                self._sql(DELETE_BATCHES_FROM), (pid, offset, offset)).fetchall(),
                key=itemgetter(2))
            count, size = sum(r[0] for r in rows), sum(r[1] for r in rows)
            kept = kept_prefix(*rows[0][2:], offset) if rows and rows[0][2] < offset else None
            if kept is not None:
                self._copy(conn, pid, [kept])
                count, size = count - kept.records, size - kept.size
            conn.execute(self._sql(TRUNCATE), (offset, offset, count, size, pid))
            self._truncate_ranges(conn, pid, offset)
            for statement in TRUNCATE_CURSORS:
                conn.execute(self._sql(statement), (offset, pid, offset))
        return nxt - offset

    # --- replication -------------------------------------------------------------------------

    def _apply(self, stream: UUID, runs: dict[Key, list[Message]], link: str,
               origin_low: dict[Key, int] | None) -> tuple[Trimmed, Ends]:
        """Replicated messages (from a row store, or read through a store router): each
        partition's run as batches, one per stretch of equal origin and producer (a batch has
        one of each: a run across a failover holds two origins, and one batch would give the
        later messages the first's)."""
        with self._writing() as conn:
            pids = self._apply_pids(conn, stream, runs)
            marks = self._lock_many(conn, list(set(pids.values())))
            self._refuse_ended(conn, link)
            trimmed = trim_runs(runs, {key: marks[pid] for key, pid in pids.items()}, origin_low)
            for key, start in trimmed.starts.items():
                conn.execute(self._sql(START_AT), (start, start, pids[key]))
            ends: Ends = {}
            for key, run in trimmed.todo.items():
                if run:
                    batches = [message_batch(list(alike)) for _, alike in groupby(
                        run, key=lambda m: (m.origin, m.producer))]
                    self._copy(conn, pids[key], batches)
                    ends[pids[key]] = (run[-1].offset + 1, len(run),
                                       sum(b.size for b in batches))
            conn.cursor().executemany(self._sql(ADVANCE_ONE),
                                      [(*end, pid) for pid, end in ends.items()])
            conn.cursor().executemany(self._sql(LINK_CURSOR), [
                (pids[key], link, run[-1].offset + 1) for key, run in runs.items()])
        return trimmed, ends

    def apply_from(self, source: MessageStore, source_stream: UUID, stream: UUID, topic: str,
                   partition: int, start: int, end: int, *, link: str) -> Applied | None:
        """Replication between batch stores (PostgreSQL or SQLite, either way): the source's
        batch rows of [start, end), copied as they are (a replica's batches are
        byte-identical to its origin's, CRCs equal), under the replica partition's lock,
        whole batches or nothing. None for another kind of source (the caller then applies
        messages)."""
        if not isinstance(source, BatchLayout):
            return None
        batches, low, high = source._source_batches(source_stream, topic, partition, start,
                                                    end)
        if any(UUID(bytes=b.origin) == stream for b in batches):
            raise ReturnToOrigin(f"{topic}:{partition}: its messages originate in stream "
                                 f"{stream}, and a message is never replicated back to its "
                                 "origin")
        # The source holds no record in [start, the first batch) (or in all of [start, end)
        # when none came) though it retains them: compaction removed them (issue 31), and
        # the replica's copy has the same gap, as a Kafka follower's log has its leader's.
        gap = start if start >= low else None
        if not batches:
            return Applied({}) if gap is None else self._skip_gap(
                stream, (topic, partition), gap, min(end, high), link)
        return self._apply_batches(stream, (topic, partition), batches, link, low, gap)

    def _source_batches(self, stream: UUID, topic: str, partition: int, start: int,
                        end: int) -> tuple[list[StoredBatch], int, int]:
        """This store's batches of [start, end) as a source, and its low and high
        watermarks."""
        with self._reading() as conn:
            try:
                pid = self._pid(conn, stream, topic, partition)
            except PartitionOutOfRange:
                # Said as the row layout says it: the operator reads it in the replica list,
                # where "at the source" tells which side lacks the partition.
                raise StoreError(f"{topic}:{partition} does not exist at the source") from None
            low, high = self._range(conn, stream, topic, pid)
            rows = self._binary(conn).execute(self._sql(SOURCE_BATCHES), (
                pid, max(start, low), min(end, high))).fetchall()
        return [StoredBatch(*row[:10], bytes(row[10]), *row[11:13], bytes(row[13]))
                for row in rows], low, high

    def _skip_gap(self, stream: UUID, key: Key, start: int, end: int, link: str) -> Applied:
        """A source range compaction emptied: the replica partition's end moves past it
        (when it reached the range), as its origin's did."""
        with self._writing() as conn:
            pid = self._apply_pids(conn, stream, {key: []})[key]
            nxt = self._lock(conn, pid)[1]
            self._refuse_ended(conn, link)
            if start <= nxt < end:
                conn.execute(self._sql(ADVANCE_ONE), (end, 0, 0, pid))
                nxt = end
            conn.execute(self._sql(LINK_CURSOR), (pid, link, end))
        return Applied({key: nxt})

    def _apply_batches(self, stream: UUID, key: Key, batches: list[StoredBatch], link: str,
                       origin_low: int, gap: int | None = None) -> Applied:
        with self._writing() as conn:
            pid = self._apply_pids(conn, stream, {key: []})[key]
            low, nxt = self._lock(conn, pid)
            self._refuse_ended(conn, link)
            todo, start = take_batches(key, batches, low, nxt, origin_low, gap)
            if start is not None:
                nxt = start
                conn.execute(self._sql(START_AT), (start, start, pid))
            written = sum(b.records for b in todo)
            size = sum(b.size for b in todo)
            end = todo[-1].last_offset + 1 if todo else nxt
            if todo:
                self._copy(conn, pid, todo)
                self._track_ranges(conn, pid, todo)
                conn.execute(self._sql(ADVANCE_ONE), (end, written, size, pid))
            conn.execute(self._sql(LINK_CURSOR), (pid, link, batches[-1].last_offset + 1))
        return Applied({key: max(end, nxt)}, {key: written}, size)


def _headers(m: Message) -> bytes | None:
    return encode_headers(m.headers) if m.headers else None


def _same(rows: list) -> list:
    return rows
