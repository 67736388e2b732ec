"""The batch layout's rules that no SQL dialect touches (issue 30), shared by the PostgreSQL
and the SQLite batch stores: how records become a batch per partition, which replicated
batches a replica takes and where a fresh partition starts, how a batch cut by a truncate or
by a replica's end is written again, and what a fetch of stored batches answers."""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter

from replication.engine.compaction import cut
from replication.engine.recordscan import gapless
from replication.engine.store import Key, Misordered, Plan, Produce, Record, now_ms
from replication.engine.stored import Fetched, StoredBatch, batch_of, numbered, records_of


def record_batches(records: Sequence[Record], plan: Plan,
                   produce: Produce) -> dict[int, list[StoredBatch]]:
    """The records of an append (REST, the CLI, the browser) as one batch per partition the
    plan gives them, numbered from 0 (the store writes the base offset it reserves)."""
    seq = produce.sequence
    sequence = (seq.producer_id, seq.epoch, seq.first_seq) if seq else (-1, -1, -1)
    now, batches = now_ms(), {}
    for p in plan.totals:
        part = [r for r, q in zip(records, plan.parts, strict=True) if q == p]
        batches[p] = [batch_of(part, 0, now, origin=produce.origin, producer=produce.producer,
                               sequence=sequence, log_append_time=produce.log_append_time,
                               codec=produce.codec)]
    return batches


def placed(plan: Plan, firsts: dict[int, int]) -> list[tuple[int, int]]:
    """(partition, offset) per record, in input order, given each partition's first offset."""
    nxt, out = dict(firsts), []
    for p in plan.parts:
        out.append((p, nxt[p]))
        nxt[p] += 1
    return out


def renumbered(batch: StoredBatch, base: int) -> StoredBatch:
    """The batch with base offset `base`: the baseOffset field, which its CRC does not cover."""
    if batch.base_offset == base:
        return batch
    data = bytearray(batch.data)
    data[:8] = base.to_bytes(8, "big", signed=True)
    return batch._replace(base_offset=base, last_offset=base + batch.records - 1,
                          data=bytes(data))


def take_batches(key: Key, batches: list[StoredBatch], low: int, nxt: int,
                 origin_low: int, gap: int | None = None
                 ) -> tuple[list[StoredBatch], int | None]:
    """Invariant 2 for batches copied from a batch store, given the replica partition's (low,
    next offset) read under its lock: the batches it lacks (one it ends inside keeps its
    tail, re-encoded), and the offset a fresh partition starts at (None: where it is). A
    first batch past its end leaves a gap: Misordered, nothing is taken.

    As `trim_runs` for messages, only a partition that never held a message may start past
    0, and only with the batch holding the origin's low watermark `origin_low` (what came
    before it expired at the origin and can never be sent): a batch beginning past that
    would leave a gap at the replica, as would any start of a partition that held messages
    once (its own retention emptied it: what follows its end may still come).

    `gap`: the source holds no record from there to the first batch, though it retains
    that range (compaction removed them): a first batch past the replica's end, when `gap`
    is at or below it, is taken, leaving the origin's gap."""
    todo = [b for b in batches if b.last_offset >= nxt]
    if not todo or todo[0].base_offset == nxt:
        return todo, None
    first = todo[0].base_offset
    if first < nxt:
        kept = kept_suffix(todo[0], nxt)
        return (todo[1:] if kept is None else [kept, *todo[1:]]), None
    if gap is not None and gap <= nxt:
        return todo, None
    return todo, fresh_start(key, first, low, nxt, origin_low)


def fresh_start(key: Key, first: int, low: int, nxt: int, origin_low: int) -> int:
    """Where a replica partition whose next offset is `nxt` begins when the first batch it
    is sent begins past it (`take_batches`' rule): only a partition that never held a
    message, and only with the batch holding the origin's low watermark; Misordered else."""
    if low == nxt == 0 and first <= origin_low:
        return first
    raise Misordered(key, nxt, first)


def kept_prefix(base: int, data: bytes, origin: bytes, producer: str | None,
                offset: int) -> StoredBatch | None:
    """The records of a stored batch (base offset, bytes) below `offset`, as a batch of their
    own with the same origin and producer; None when there are none."""
    if not gapless(data):  # compacted: its records keep their offsets
        return cut(data, origin, producer, base, offset)
    _, records = records_of(bytes(data))
    kept = records[: offset - base]
    if not kept:
        return None
    return batch_of(kept, base, kept[0].timestamp_ms or 0, origin=bytes(origin),
                    producer=producer)


def kept_suffix(batch: StoredBatch, offset: int) -> StoredBatch | None:
    """The records of `batch` from `offset` on, as a batch of their own (None: a compacted
    batch with none there)."""
    if not gapless(batch.data):
        return cut(batch.data, batch.origin, batch.producer, offset, batch.last_offset + 1)
    base, records = records_of(batch.data)
    kept = records[offset - base:]
    return batch_of(kept, offset, kept[0].timestamp_ms or 0, origin=batch.origin,
                    producer=batch.producer)


def fetched(rows: Sequence[tuple], offset: int) -> Fetched:
    """A fetch's answer from the stored batches the store's byte budget kept (data, base
    offset, records, logical bytes), in offset order: the records a consumer at `offset`
    gets out of them (it skips what precedes its offset in the first)."""
    if not rows:
        return Fetched((), 0, 0)
    first = rows[0][1]
    return Fetched(tuple(bytes(row[0]) for row in rows),
                   # a compacted first batch (issue 31) may hold fewer records than it skips
                   max(sum(map(itemgetter(2), rows)) - max(offset - first, 0), 0),
                   sum(map(itemgetter(3), rows)))


def first_at_time(data: bytes, low: int, timestamp_ms: int) -> tuple[int, int] | None:
    """(offset, timestamp) of a stored batch's first retained record at or after the time."""
    for at, r in numbered(bytes(data)):
        if at >= low and r.timestamp_ms >= timestamp_ms:
            return at, r.timestamp_ms
    return None


def latest_in(data: bytes, low: int) -> tuple[int, int]:
    """(offset, timestamp) of a stored batch's retained record with the largest timestamp,
    the earliest of equals (KIP-734)."""
    kept = [(r.timestamp_ms, -at) for at, r in numbered(bytes(data)) if at >= low]
    ts, neg = max(kept)
    return -neg, ts


def expired_end(oldest: Sequence[tuple[int, int, int]], before_ms: int,
                limit: int) -> int | None:
    """Retention on whole batches: the end of the prefix of a partition's oldest batches
    (last offset, max timestamp, records) wholly older than `before_ms`, of at most `limit`
    records (one batch at least); None when the first is young."""
    end, taken = None, 0
    for last, max_ts, records in oldest:
        if max_ts >= before_ms or (taken and taken + records > limit):
            break
        end, taken = last + 1, taken + records
    return end
