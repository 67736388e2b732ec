"""Log compaction of a batch store's partition (issue 31), written once for PostgreSQL and
SQLite (the rules are compaction.py's).

A pass reads the cleanable batches without a lock, a page at a time: first each key's latest
offset, then the batches to rewrite. The second pass reads every batch's header, and the
records only of a batch whose offsets hold some key's latest: a batch holding none has every
record hidden by a later one and goes whole, so a partition written over and over is read
about once. Each page's changes are written in chunks of WRITE_BATCHES batches, each a short
transaction under the partition's lock, so producers wait for a chunk's writes at most, never
for the reading. What a pass reads, writes and drops is paced by the operator's `Pacing`
(pacing.py: bytes a second, and a lower CPU priority for its thread). A batch is replaced
only if it is still the one that was read (same last offset and CRC): retention, a purge or a
truncate meanwhile leave it alone. Only whole batches below the cleanable end are touched,
and offsets never move: the partition's low and next offsets stay, its record and byte
counters go down by what was removed.

The two passes work on ranges of offsets (a batch belongs to the range holding its last
offset), so a caller can hand in `Passes` that run them elsewhere: the worker's Spark job for
a large partition (workers/spark/compaction.py), a task per range, each reading and writing
its range with the same methods (`compact_keys`, `compact_rewrite`). The crash argument is
the same in every task: a rewrite commits a chunk's drops, copies and counter update together,
and drops a batch only if it is still as read, so a task retried, a job run again over a
half-rewritten partition, or a pass beside another one re-reads what is there now, finds the
batches already rewritten keep every record (nothing to write) and those not yet rewritten as
they were: no record is lost or doubled, and counters shrink once per batch changed.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple, Protocol, TypeVar
from uuid import UUID

from replication.engine.compaction import Rules, cleanable_end, compacted, dirty_ratio, latest
from replication.engine.pacing import UNPACED, Pace, Pacing, niced
from replication.engine.storebase import Connection, MessageStore
from replication.engine.stored import StoredBatch

COLUMNS = ("base_offset, last_offset, records, first_ts, max_ts, producer_id, epoch, "
           "base_sequence, attributes, crc, uuid_send(origin), producer, size, data")
# What a compaction pass has done on each partition (shown by `stream info` and the API), and
# how far a pass run elsewhere (Spark) is while it runs: steps done of its total, noted by its
# caller every few seconds (`updated`, ms), deleted with the pass's record. A row whose
# `updated` stops moving is a pass that died (shown as running no more: compaction.py).
STATE_TABLE = """
CREATE TABLE IF NOT EXISTS compaction_state (
    pid integer PRIMARY KEY,
    cleaned_end bigint NOT NULL,
    runs bigint NOT NULL,
    removed bigint NOT NULL,
    reclaimed bigint NOT NULL,
    last_run bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS compaction_progress (
    pid integer PRIMARY KEY,
    done bigint NOT NULL,
    total bigint NOT NULL,
    updated bigint NOT NULL
);
"""
NOTE_EVERY = 2.0  # seconds between a running pass's progress notes
FIRST_BATCH = ("SELECT base_offset FROM batches WHERE pid = %s AND last_offset >= %s "
               "ORDER BY last_offset LIMIT 1")
FIRST_YOUNG = """
SELECT base_offset FROM batches WHERE pid = %s AND last_offset >= %s AND max_ts >= %s
ORDER BY last_offset LIMIT 1
"""
HEADS = """
SELECT base_offset, last_offset, crc, records, size FROM batches
WHERE pid = %s AND last_offset >= %s AND last_offset < %s ORDER BY last_offset LIMIT %s
"""
# Pass 1 reads of a batch what holds its keys and offsets.
KEYS = """
SELECT last_offset, data FROM batches WHERE pid = %s AND last_offset >= %s AND last_offset < %s
ORDER BY last_offset LIMIT %s
"""
PAGE = f"""
SELECT {COLUMNS} FROM batches WHERE pid = %s AND last_offset >= %s AND last_offset < %s
ORDER BY last_offset LIMIT %s
"""
DROP_BATCH = ("DELETE FROM batches WHERE pid = %s AND last_offset = %s AND crc = %s "
              "RETURNING records, size")
SHRINK = "UPDATE partitions SET rows = rows - %s, bytes = bytes - %s WHERE id = %s"
SIZE = "SELECT bytes FROM partitions WHERE id = %s"
STATE = "SELECT cleaned_end, runs, removed, reclaimed, last_run FROM compaction_state " \
        "WHERE pid = %s"
# A pass's end: where it compacted to, and one run more (what it removed is counted page by
# page, with the page's writes, so a pass that dies half-way still counts what it removed).
SAVE_STATE = """
INSERT INTO compaction_state (pid, cleaned_end, runs, removed, reclaimed, last_run)
VALUES (%s, %s, 1, 0, 0, %s)
ON CONFLICT (pid) DO UPDATE SET cleaned_end = excluded.cleaned_end,
    runs = compaction_state.runs + 1, last_run = excluded.last_run
"""
COUNT_REMOVED = """
INSERT INTO compaction_state (pid, cleaned_end, runs, removed, reclaimed, last_run)
VALUES (%s, 0, 0, %s, %s, 0)
ON CONFLICT (pid) DO UPDATE SET removed = compaction_state.removed + excluded.removed,
    reclaimed = compaction_state.reclaimed + excluded.reclaimed
"""
SAVE_PROGRESS = """
INSERT INTO compaction_progress (pid, done, total, updated) VALUES (%s, %s, %s, %s)
ON CONFLICT (pid) DO UPDATE SET done = excluded.done, total = excluded.total,
    updated = excluded.updated
"""
DROP_PROGRESS = "DELETE FROM compaction_progress WHERE pid = %s"
STREAM_STATE = """
SELECT p.topic, p.partition, coalesce(s.cleaned_end, 0), coalesce(s.runs, 0),
    coalesce(s.removed, 0), coalesce(s.reclaimed, 0), coalesce(s.last_run, 0),
    coalesce(r.done, 0), coalesce(r.total, 0), coalesce(r.updated, 0)
FROM partitions p LEFT JOIN compaction_state s ON s.pid = p.id
    LEFT JOIN compaction_progress r ON r.pid = p.id
WHERE p.stream = %s AND (s.pid IS NOT NULL OR r.pid IS NOT NULL)
ORDER BY p.topic, p.partition
"""


class Policy(NamedTuple):
    """A compacted topic's settings (Kafka's names), in milliseconds."""

    min_lag_ms: int = 0  # min.compaction.lag.ms
    delete_retention_ms: int = 86_400_000  # delete.retention.ms
    min_dirty_ratio: float = 0.0  # min.cleanable.dirty.ratio (0: compact whenever dirty)


class Compacted(NamedTuple):
    """What one pass did on one partition."""

    end: int  # the cleanable end it compacted below (its low offset when it skipped)
    removed: int  # records removed
    reclaimed: int  # logical bytes removed
    rewritten: int  # batches rewritten or dropped
    ran: bool  # False: nothing was cleanable, or too little was dirty


class CompactionState(NamedTuple):
    """A partition's compaction record, as `compaction_state` returns it."""

    topic: str
    partition: int
    cleaned_end: int
    runs: int  # passes finished
    removed: int  # records removed, by passes finished and by any that died half-way
    reclaimed: int
    last_run_ms: int  # 0: no pass finished yet
    running_done: int = 0  # a running pass's steps done of running_total (0: none noted)
    running_total: int = 0
    running_updated_ms: int = 0  # when it noted them last


Counts = tuple[int, int, int]  # (records removed, logical bytes removed, batches changed)
Seen = Callable[[int], None]  # told the last offset of each page a pass went through
Changes = list[tuple["Head | StoredBatch", StoredBatch | None]]  # batches read, their new selves
T = TypeVar("T")


class Passes(Protocol):
    """The two heavy passes of a partition's compaction run elsewhere (the worker's Spark
    job), for the partitions it `takes`; the engine decides the cleanable end before them and
    records the pass after them, as for its own passes."""

    def takes(self, store: CompactionMethods, pid: int, size: int) -> bool:
        """Whether these passes compact the partition (`size`: its bytes)."""

    def run(self, store: CompactionMethods, pid: int, low: int, end: int,
            rules: Rules) -> Counts:
        """`compact_keys` over [low, end) merged (each key's max), then `compact_rewrite`
        of [low, end) with them, summed."""


class CompactionMethods(MessageStore):
    """Compaction of a batch store's partitions (mixed into BatchLayout)."""

    PAGE_BATCHES = 500  # batches read a query
    # Batches written a transaction: a producer to the partition waits behind one such
    # transaction at most (a few ms), where a page's 500 held it for tens of ms.
    WRITE_BATCHES = 50
    # Run first in each chunk's transaction (None: nothing); see PgBatchStore's.
    CHUNK_COMMIT: str | None = None

    def compact(self, stream: UUID, topic: str, partition: int, *, policy: Policy,
                now_ms: int, replicated: int, passes: Passes | None = None,
                pacing: Pacing = UNPACED) -> Compacted:
        """One pass over the partition: below the cleanable end (the first batch younger
        than the lag, what every replica confirmed: `replicated`, the high watermark), each
        key's latest record kept, and its tombstone until older than the delete retention.
        `passes`: where its two passes run when they take the partition (they pace
        themselves), else here at `pacing`."""
        with self._reading() as conn:
            pid = self._pid(conn, stream, topic, partition)
            low, high = self._range(conn, stream, topic, pid)
            young = self._one(conn, FIRST_YOUNG, (pid, low, now_ms - policy.min_lag_ms))
            end = cleanable_end(young and young[0], high, replicated)
            state = self._one(conn, STATE, (pid,))
            size = self._one(conn, SIZE, (pid,))[0]
        cleaned = state[0] if state else low
        if end <= low or dirty_ratio(cleaned, end, low) < policy.min_dirty_ratio:
            return Compacted(low, 0, 0, 0, False)
        rules = Rules(end, now_ms - policy.delete_retention_ms)
        if passes is not None and passes.takes(self, pid, size):
            removed, reclaimed, rewritten = passes.run(self, pid, low, end, rules)
        else:
            removed, reclaimed, rewritten = niced(pacing.nice, lambda: self._compact_here(
                pid, low, end, rules, Pace(pacing.max_bytes_per_sec)))
        with self._writing() as conn:
            conn.execute(self._sql(SAVE_STATE), (pid, end, now_ms))
            conn.execute(self._sql(DROP_PROGRESS), (pid,))
        return Compacted(end, removed, reclaimed, rewritten, True)

    def _compact_here(self, pid: int, low: int, end: int, rules: Rules, pace: Pace) -> Counts:
        progress = _Progress(self, pid, low, end)
        keys = self.compact_keys(pid, low, end, seen=progress.of(0), pace=pace)
        return self.compact_rewrite(pid, low, end, keys, rules, seen=progress.of(1), pace=pace)

    def compact_keys(self, pid: int, low: int, end: int, *, seen: Seen | None = None,
                     pace: Pace | None = None) -> dict[bytes, int]:
        """Pass 1 over the batches whose last offset is in [low, end): each key's latest
        offset (the max: merging ranges' maps is taking each key's max). `seen`: told each
        page's last offset; `pace`: told the bytes of each page read."""
        keys: dict[bytes, int] = {}
        for page in self._paged(KEYS, _Keyed._make, pid, low, end, seen, pace=pace,
                                weigh=lambda b: len(b.data)):
            _spent(pace, sum(len(b.data) for b in page))
            latest(page, end, keys)
        return keys

    def compact_rewrite(self, pid: int, low: int, end: int, keys: dict[bytes, int],
                        rules: Rules, *, seen: Seen | None = None,
                        pace: Pace | None = None) -> Counts:
        """Pass 2 over the batches whose last offset is in [low, end): each rewritten by the
        rules, WRITE_BATCHES per transaction, if still as read (see the module's docstring:
        safe to run again, from any process). A batch holding no key's latest offset has every
        record hidden by a later one: it goes on its header alone, its records never read (most
        of a partition written over and over). `seen`: told each page's last offset; `pace`:
        told the bytes read, written and dropped (a dropped batch's stored bytes: its delete
        rewrites their pages)."""
        newest = sorted(keys.values())
        removed = reclaimed = rewritten = 0
        for page in self._paged(HEADS, Head._make, pid, low, end, seen):
            held: list[Head] = []
            changes: Changes = []
            for h in page:
                if h.last_offset < rules.end:
                    held.append(h) if _holds_one(newest, h) else changes.append((h, None))
            if held:
                changes += self._rewritten(pid, held, keys, rules, pace)
            step = _step(pace, self.WRITE_BATCHES, sum(h.size for h in page) / len(page))
            for at in range(0, len(changes), step):
                n, size, count = self._write_chunk(pid, changes[at:at + step], pace)
                removed, reclaimed, rewritten = removed + n, reclaimed + size, rewritten + count
        return removed, reclaimed, rewritten

    def _rewritten(self, pid: int, held: list[Head], keys: dict[bytes, int], rules: Rules,
                   pace: Pace | None) -> Changes:
        """The `held` batches (of one page of heads) read, a step's worth of batches a query
        when paced (those between two held ones are read too: one range a query), each with
        its compacted self if it changes."""
        lasts, out = [h.last_offset for h in held], []
        step = _step(pace, self.PAGE_BATCHES, sum(h.size for h in held) / len(held))
        at = 0
        while at < len(held):
            read = self._page(PAGE, _stored, pid, lasts[at], lasts[-1] + 1, step)
            if not read:  # gone meanwhile (retention, a truncate): nothing to rewrite
                break
            _spent(pace, sum(len(b.data) for b in read))
            done = bisect.bisect_right(lasts, read[-1].last_offset)
            wanted, at = set(lasts[at:done]), done
            out += [(b, new) for b in read if b.last_offset in wanted
                    if (new := compacted(b, keys, rules)) is not False]
        return out

    def holding_bytes(self, pid: int, low: int, end: int, keys: dict[bytes, int]) -> int:
        """The stored bytes of the batches in [low, end) that hold some key's latest offset:
        what `compact_rewrite` would read of their records (the others go on their
        headers)."""
        newest = sorted(keys.values())
        return sum(h.size for page in self._paged(HEADS, Head._make, pid, low, end)
                   for h in page if _holds_one(newest, h))

    def note_compaction_progress(self, pid: int, done: int, total: int, now_ms: int) -> None:
        """How far the running pass of partition `pid` is, for `compaction_state`."""
        with self._writing() as conn:
            conn.execute(self._sql(SAVE_PROGRESS), (pid, done, total, now_ms))

    def compaction_state(self, stream: UUID) -> list[CompactionState]:
        """Every compacted partition's record of the stream, and each running pass's progress
        noted (a partition's first pass: runs 0)."""
        with self._reading() as conn:
            rows = self._all(conn, STREAM_STATE, (self._key(stream),))
        return [CompactionState(*row) for row in rows]

    def _paged(self, query: str, make: Callable[[tuple], T], pid: int, low: int, end: int,
               seen: Seen | None = None, *, pace: Pace | None = None,
               weigh: Callable[[T], int] | None = None) -> Iterator[list[T]]:
        """The rows of `query` (batches whose last offset is in [low, end), in its order, the
        last offset second) a page at a time, each made by `make`: PAGE_BATCHES a page, or
        when `pace` is, a step's worth of bytes (each row's `weigh`, as the last page had)."""
        start, limit = low, _step(pace, self.PAGE_BATCHES, 0)
        while page := self._page(query, make, pid, start, end, limit):
            yield page
            if weigh is not None:
                limit = _step(pace, self.PAGE_BATCHES, sum(map(weigh, page)) / len(page))
            start = page[-1].last_offset + 1  # type: ignore[attr-defined]
            if seen is not None:
                seen(start - 1)

    def _page(self, query: str, make: Callable[[tuple], T], pid: int, start: int,
              end: int, limit: int | None = None) -> list[T]:
        with self._reading() as conn:
            rows = self._binary(conn).execute(self._sql(query), (
                pid, start, end, limit or self.PAGE_BATCHES)).fetchall()
        return [make(row) for row in rows]

    def _write_chunk(self, pid: int, changes: Changes, pace: Pace | None) -> Counts:
        """Replace each batch still as it was read by its compacted self (or by nothing), in
        one transaction: (records removed, logical bytes removed, batches changed)."""
        if not changes:
            return 0, 0, 0
        removed = reclaimed = 0
        with self._writing() as conn:
            if self.CHUNK_COMMIT:
                conn.execute(self.CHUNK_COMMIT)
            self._lock(conn, pid)
            dropped = self._drop_if_same(conn, pid, [old for old, _new in changes])
            changed = [(old, new) for old, new in changes if old.last_offset in dropped]
            kept = [new for _old, new in changed if new is not None]
            for old, new in changed:
                removed += old.records - (new.records if new else 0)
                reclaimed += old.size - (new.size if new else 0)
            if kept:
                self._copy(conn, pid, kept)
            if changed:
                conn.execute(self._sql(SHRINK), (removed, reclaimed, pid))
                conn.execute(self._sql(COUNT_REMOVED), (pid, removed, reclaimed))
        _spent(pace, sum(old.size for old, _new in changed) + sum(len(b.data) for b in kept))
        return removed, reclaimed, len(changed)

    def _drop_if_same(self, conn: Connection, pid: int,
                      batches: Sequence[Head | StoredBatch]) -> set[int]:
        """Delete each of `batches` still as it was read (same last offset and CRC): the last
        offsets of those deleted (a statement each here; PostgreSQL's store deletes them in
        one)."""
        return {b.last_offset for b in batches
                if self._all(conn, DROP_BATCH, (pid, b.last_offset, b.crc))}


class _Keyed(NamedTuple):
    last_offset: int
    data: bytes


class Head(NamedTuple):
    """What pass 2 reads of every batch (its records only where it must)."""

    base_offset: int
    last_offset: int
    crc: int
    records: int
    size: int


def _step(pace: Pace | None, most: int, size: float) -> int:
    return most if pace is None else pace.step(most, size)


def _spent(pace: Pace | None, n: int) -> None:
    if pace is not None:
        pace.spent(n)


def _stored(row: tuple) -> StoredBatch:
    return StoredBatch(*row[:10], bytes(row[10]), *row[11:13], bytes(row[13]))


def _holds_one(newest: list[int], head: Head) -> bool:
    """Whether one of the keys' `newest` offsets (sorted) is in the batch's range."""
    at = bisect.bisect_left(newest, head.base_offset)
    return at < len(newest) and newest[at] <= head.last_offset


class _Progress:
    """An in-process pass's progress, in offsets gone through of its two passes over
    [low, end), noted in the store every NOTE_EVERY seconds (a pass shorter than that notes
    nothing)."""

    def __init__(self, store: CompactionMethods, pid: int, low: int, end: int) -> None:
        self.store, self.pid, self.low, self.span = store, pid, low, end - low
        self.last = time.monotonic()

    def of(self, n: int) -> Seen:
        """The `seen` of pass `n` (0 or 1)."""
        return lambda offset: self._note(n * self.span + offset + 1 - self.low)

    def _note(self, done: int) -> None:
        if time.monotonic() - self.last < NOTE_EVERY:
            return
        self.last = time.monotonic()
        total = 2 * self.span
        self.store.note_compaction_progress(self.pid, min(done, total), total,
                                            int(time.time() * 1000))
