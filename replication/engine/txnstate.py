"""Kafka transactions on the batch store (issue 31): each partition's transaction ranges, and
the control batches (COMMIT and ABORT markers) that close them.

A transactional batch appended to a partition opens a range for its producer id (its first
offset), in the append's transaction; the coordinator's marker closes it, in the marker's
transaction, as Kafka's transaction index does. So a read_committed fetch asks one small table:
the last stable offset is the first offset of the earliest open range (else the high
watermark), and the aborted transactions of a fetched range are the aborted ranges that
overlap it. A marker is written at most once per range (the open range is looked up under the
partition's lock), so a coordinator that completes a transaction again after a crash, or two
listeners completing it at once, write nothing twice (invariant 13).

Plain Python, no Django; the statements are in PostgreSQL's dialect (`_sql` gives SQLite's).
"""

from __future__ import annotations

import contextlib
from abc import abstractmethod
from collections.abc import Iterable, Sequence
from typing import NamedTuple
from uuid import UUID

from replication.engine.producers import ProducerState
from replication.engine.recordbatch import CONTROL, TRANSACTIONAL, encode_body, frame_batch, frames
from replication.engine.statements import ADVANCE_ONE
from replication.engine.store import PartitionOutOfRange, Record, UnknownTopic, now_ms
from replication.engine.storebase import Connection, MessageStore
from replication.engine.stored import Fetched, StoredBatch, records_of

TXN_SCHEMA = """
CREATE TABLE IF NOT EXISTS txn_ranges (
    pid integer NOT NULL,
    producer_id bigint NOT NULL,
    first_offset bigint NOT NULL,
    marker_offset bigint,
    aborted boolean NOT NULL DEFAULT false,
    PRIMARY KEY (pid, producer_id, first_offset)
);
CREATE UNIQUE INDEX IF NOT EXISTS txn_ranges_open ON txn_ranges (pid, producer_id)
    WHERE marker_offset IS NULL;
CREATE INDEX IF NOT EXISTS txn_ranges_aborted ON txn_ranges (pid, marker_offset)
    WHERE aborted;
"""
OPEN_RANGE = """
INSERT INTO txn_ranges (pid, producer_id, first_offset) VALUES (%s, %s, %s)
ON CONFLICT (pid, producer_id) WHERE marker_offset IS NULL DO NOTHING
"""
FIND_OPEN = """
SELECT first_offset FROM txn_ranges
WHERE pid = %s AND producer_id = %s AND marker_offset IS NULL
"""
CLOSE_RANGE = """
UPDATE txn_ranges SET marker_offset = %s, aborted = %s
WHERE pid = %s AND producer_id = %s AND marker_offset IS NULL
"""
STABLE = "SELECT min(first_offset) FROM txn_ranges WHERE pid = %s AND marker_offset IS NULL"
ABORTED = """
SELECT producer_id, first_offset FROM txn_ranges
WHERE pid = %s AND aborted AND marker_offset >= %s AND first_offset < %s
ORDER BY first_offset
"""
# The same from `offset` on, to any stable offset: a fetch's pipeline (batchlayout.py) sends
# it before it knows the last stable offset, and keeps those starting below it.
ABORTED_FROM = """
SELECT producer_id, first_offset FROM txn_ranges
WHERE pid = %s AND aborted AND marker_offset >= %s ORDER BY first_offset
"""
OPEN_RANGES = """
SELECT producer_id, first_offset FROM txn_ranges
WHERE pid = %s AND marker_offset IS NULL ORDER BY first_offset
"""
# An open range's producer and the epoch of its latest batch there (a marker carries it).
OPEN_EPOCHS = """
SELECT r.producer_id, (SELECT b.epoch FROM batches b WHERE b.pid = r.pid
                       AND b.producer_id = r.producer_id ORDER BY b.last_offset DESC LIMIT 1)
FROM txn_ranges r WHERE r.pid = %s AND r.marker_offset IS NULL
"""
TRUNCATE_OPENED = "DELETE FROM txn_ranges WHERE pid = %s AND first_offset >= %s"
TRUNCATE_CLOSED = """
UPDATE txn_ranges SET marker_offset = NULL, aborted = false
WHERE pid = %s AND marker_offset >= %s
"""
ABORT, COMMIT = 0, 1  # a control record's type (its key's second int16)
# What a message browser marks (issue 31): a transaction's markers, and data records of a
# transaction that aborted or is still open (read_committed skips or waits at them).
MARK_COMMIT, MARK_ABORT, MARK_ABORTED, MARK_PENDING = "commit marker", "abort marker", \
    "aborted", "pending"
# The transactional batches overlapping an offset range; a control batch's bytes (one small
# record) to tell a COMMIT from an ABORT, not a data batch's.
TXN_BATCHES = """
SELECT base_offset, last_offset, producer_id, attributes,
       CASE WHEN (attributes & 32) <> 0 THEN data END
FROM batches WHERE pid = %s AND last_offset >= %s AND base_offset <= %s AND (attributes & 16) <> 0
"""
TXN_RANGES_OVER = """
SELECT producer_id, first_offset, marker_offset, aborted FROM txn_ranges
WHERE pid = %s AND first_offset <= %s AND (marker_offset IS NULL OR marker_offset >= %s)
"""
MarkerAt = tuple[UUID, str, int]  # (stream, topic, partition) a transaction's marker goes to


class TxnView(NamedTuple):
    """What a read_committed fetch of a partition needs: its last stable offset and the
    aborted transactions (producer id, first offset) overlapping the fetched range."""

    stable: int
    aborted: list[tuple[int, int]]


def control_batch(base_offset: int, producer_id: int, epoch: int, commit: bool, origin: UUID,
                  coordinator_epoch: int = 0) -> StoredBatch:
    """A marker as Kafka writes it: a control batch (transactional) of one record whose key
    is (version 0, type) and whose value is (version 0, the coordinator's epoch)."""
    now = now_ms()
    key = (0).to_bytes(2, "big") + (COMMIT if commit else ABORT).to_bytes(2, "big")
    value = (0).to_bytes(2, "big") + coordinator_epoch.to_bytes(4, "big", signed=True)
    records = [Record(value, key, (), None, now)]
    attributes = TRANSACTIONAL | CONTROL
    data = frame_batch(encode_body(records), records, base_offset=base_offset,
                       producer=(producer_id, epoch, -1), attributes=attributes)
    crc = int.from_bytes(data[17:21], "big")
    return StoredBatch(base_offset, base_offset, 1, now, now, producer_id, epoch, -1, attributes,
                       crc, origin.bytes, None, len(value) + len(key), data)


def control_type(data: bytes) -> int:
    """A control batch's record type: ABORT or COMMIT (its key's second int16)."""
    return int.from_bytes(records_of(data)[1][0].key[2:4], "big")  # type: ignore[index]


def transactional_starts(rows: Iterable[tuple[int, StoredBatch]]) -> list[tuple[int, int, int]]:
    """(pid, producer id, first offset) of each partition's first transactional data batch
    among `rows` (pid, numbered batch) of an append: the ranges it may open."""
    seen: dict[tuple[int, int], int] = {}
    for pid, batch in rows:
        if batch.attributes & TRANSACTIONAL and not batch.attributes & CONTROL:
            seen.setdefault((pid, batch.producer_id), batch.base_offset)
    return [(pid, producer, first) for (pid, producer), first in seen.items()]


class TransactionRanges(MessageStore):
    """The batch layout's transaction methods (a base of BatchLayout): what a store gives the
    coordinator (markers) and read_committed readers (last stable offsets, aborted ranges)."""

    @abstractmethod
    def _copy(self, conn: Connection, pid: int, batches: Sequence[StoredBatch]) -> None:
        """Insert the batches into partition `pid` (in the caller's transaction)."""

    @abstractmethod
    def _lock_many(self, conn: Connection, pids: list[int]) -> dict[int, tuple[int, int]]:
        """(low, next offset) of each partition, locked until the commit, in id order."""

    def _open_ranges(self, conn: Connection, rows: Iterable[tuple[int, StoredBatch]]) -> None:
        """In an append's transaction: open a range for each transactional producer writing
        to a partition where it has none open."""
        starts = transactional_starts(rows)
        if starts:
            conn.cursor().executemany(self._sql(OPEN_RANGE), starts)

    def _track_ranges(self, conn: Connection, pid: int, batches: Sequence[StoredBatch]) -> None:
        """Replicated batches (copied as they are, in offset order): the ranges their
        transactional batches open and their markers close, as at the origin, so a
        read_committed consumer of a replica sees what one of the origin sees (invariant 13)."""
        for b in batches:
            if not b.attributes & TRANSACTIONAL:
                continue
            if b.attributes & CONTROL:
                conn.execute(self._sql(CLOSE_RANGE), (b.base_offset, control_type(b.data) == ABORT,
                                                      pid, b.producer_id))
            else:
                conn.execute(self._sql(OPEN_RANGE), (pid, b.producer_id, b.base_offset))

    def write_marker(self, stream: UUID, topic: str, partition: int, *, producer_id: int,
                     epoch: int, commit: bool, origin: UUID) -> int | None:
        """Close the producer's open transaction in the partition with a COMMIT or ABORT
        marker: the marker's offset, or None when none is open (nothing was produced, or the
        marker is there already)."""
        return self.write_markers([(stream, topic, partition)], producer_id=producer_id,
                                  epoch=epoch, commit=commit, origin=origin)[
            (stream, topic, partition)]

    def write_markers(self, partitions: Sequence[MarkerAt], *, producer_id: int, epoch: int,
                      commit: bool, cursors: Sequence[tuple[UUID, str, Sequence[tuple]]] = (),
                      origin: UUID | None = None) -> dict[MarkerAt, int | None]:
        """A transaction's end in this store, in one store transaction (one commit, however
        many partitions): a marker in each partition of `partitions` (stream, topic,
        partition) where the producer has an open range (the marker's origin is `origin`,
        else the partition's stream),
        and `cursors` (stream, group, commits) committed with them. Each marker's offset,
        None where none was open (nothing produced, the marker there already, the topic
        gone). Partitions are locked in id order, as appends lock theirs: no deadlock."""
        out: dict[MarkerAt, int | None] = dict.fromkeys(partitions)
        with self._writing() as conn:
            pids: dict[int, MarkerAt] = {}
            for at in partitions:
                with contextlib.suppress(UnknownTopic, PartitionOutOfRange):
                    pids[self._pid(conn, *at)] = at
            ends = self._lock_many(conn, list(pids)) if pids else {}
            rows = [(pid, control_batch(ends[pid][1], producer_id, epoch, commit,
                                         origin or pids[pid][0]))
                    for pid in self._opened(conn, sorted(pids), producer_id)]
            if rows:
                self._put_markers(conn, rows, producer_id, epoch, commit)
            for pid, marker in rows:
                out[pids[pid]] = marker.base_offset
            for stream, group, commits in cursors:
                self._commit_cursors(conn, stream, group, commits)
        return out

    def _insert_rows(self, conn: Connection, rows: Sequence[tuple[int, StoredBatch]]) -> None:
        """Insert batches (partition id, batch) in the caller's transaction."""
        for pid, batch in rows:
            self._copy(conn, pid, [batch])

    def _opened(self, conn: Connection, pids: Sequence[int], producer_id: int) -> list[int]:
        """Those of `pids` where the producer has an open range (PostgreSQL: one query)."""
        return [pid for pid in pids if self._one(conn, FIND_OPEN, (pid, producer_id))]

    def _put_markers(self, conn: Connection, rows: Sequence[tuple[int, StoredBatch]],
                     producer_id: int, epoch: int, commit: bool) -> None:
        """Append the markers (partition id, control batch) and close their ranges."""
        self._insert_rows(conn, rows)
        cur = conn.cursor()
        cur.executemany(self._sql(ADVANCE_ONE), [(m.base_offset + 1, 1, m.size, pid)
                                                 for pid, m in rows])
        cur.executemany(self._sql(CLOSE_RANGE), [(m.base_offset, not commit, pid, producer_id)
                                                 for pid, m in rows])
        for pid, _ in rows:
            state = self._state(conn, pid, producer_id)
            if state is None or state.epoch < epoch:
                # A marker of a bumped epoch (a timeout, a new producer) fences the old one
                # here too: its late batches are refused, not left past the marker.
                self._put_state(conn, pid, producer_id, ProducerState(epoch, (-1,), (-1,), (-1,)))

    def abort_open(self, stream: UUID, topic: str) -> int:
        """An ABORT marker for every open transaction of the topic (a promoted replica: their
        coordinator served the old origin, whose partitions they were added as); how many."""
        aborted = 0
        for partition in range(self.partitions(stream, topic)):
            with self._reading() as conn:
                pid = self._pid(conn, stream, topic, partition)
                found = self._all(conn, OPEN_EPOCHS, (pid,))
            for producer_id, epoch in found:
                aborted += self.write_marker(
                    stream, topic, partition, producer_id=producer_id, epoch=max(epoch or 0, 0),
                    commit=False, origin=stream) is not None
        return aborted

    def _truncate_ranges(self, conn: Connection, pid: int, offset: int) -> None:
        """A truncate at `offset`: the ranges opened from it go, those closed from it reopen."""
        conn.execute(self._sql(TRUNCATE_OPENED), (pid, offset))
        conn.execute(self._sql(TRUNCATE_CLOSED), (pid, offset))

    def txn_view(self, stream: UUID, topic: str, partition: int, offset: int,
                 high: int) -> TxnView:
        """The partition's last stable offset (at most `high`) and the aborted transactions
        overlapping [offset, the last stable offset)."""
        with self._reading() as conn:
            pid = self._pid(conn, stream, topic, partition)
            first = self._one(conn, STABLE, (pid,))[0]  # type: ignore[index]
            stable = high if first is None else min(first, high)
            aborted = [] if offset >= stable else [
                (int(p), int(f)) for p, f in self._all(conn, ABORTED, (pid, offset, stable))]
        return TxnView(stable, aborted)

    def txn_kinds(self, stream: UUID, topic: str, partition: int, low: int,
                  high: int) -> dict[int, str]:
        """The offsets in [low, high] a browser marks: markers (MARK_COMMIT, MARK_ABORT) and
        records of aborted (MARK_ABORTED) or open (MARK_PENDING) transactions; others are
        absent."""
        with self._reading() as conn:
            pid = self._pid(conn, stream, topic, partition)
            batches = self._all(conn, TXN_BATCHES, (pid, low, high))
            ranges = self._all(conn, TXN_RANGES_OVER, (pid, high, low)) if batches else []
        kinds: dict[int, str] = {}
        for base, last, producer_id, attributes, data in batches:
            if attributes & CONTROL:
                kinds[base] = MARK_COMMIT if control_type(bytes(data)) == COMMIT \
                    else MARK_ABORT
                continue
            kind = _range_kind(ranges, producer_id, base)
            if kind is not None:
                kinds.update(dict.fromkeys(range(max(base, low), min(last, high) + 1), kind))
        return kinds

    def open_transactions(self, stream: UUID, topic: str,
                          partitions: Sequence[int]) -> dict[int, list[tuple[int, int]]]:
        """Each partition's open transactions: (producer id, first offset), oldest first."""
        out: dict[int, list[tuple[int, int]]] = {}
        with self._reading() as conn:
            for p in partitions:
                pid = self._pid(conn, stream, topic, p)
                out[p] = [(int(a), int(b)) for a, b in self._all(conn, OPEN_RANGES, (pid,))]
        return out


def _range_kind(ranges: Sequence[tuple], producer_id: int, offset: int) -> str | None:
    """MARK_ABORTED or MARK_PENDING for a producer's transactional batch at `offset` by the
    range holding it, None when its transaction committed."""
    for producer, first, marker, aborted in ranges:
        if producer == producer_id and first <= offset and (marker is None or marker > offset):
            return MARK_PENDING if marker is None else MARK_ABORTED if aborted else None
    return None


def fetched_below(found: Fetched, stable: int) -> Fetched:
    """A fetch's batches that begin below the last stable offset `stable` (a read_committed
    consumer gets nothing of an open transaction; no batch straddles it, since the offset is
    a transactional batch's first)."""
    for _, pos, _, head in frames(found.data):
        if head[0] >= stable:
            dropped = sum(h[12] for *_, h in frames(found.data[pos:]))
            return Fetched((found.data[:pos],), max(found.records - dropped, 0), found.nbytes)
    return found
