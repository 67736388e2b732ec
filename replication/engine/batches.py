"""How batches become rows and rows become messages, and the rule a replicated batch obeys.

Shared by both stores, so they lay out, trim and refuse batches identically.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import accumulate, count, repeat
from operator import attrgetter
from uuid import UUID

from replication.engine.store import (
    Key,
    Message,
    Misordered,
    Plan,
    Record,
    all_none,
    build_message,
    decode_headers,
    encode_headers,
    now_ms,
)

Emit = Callable[[tuple], object]  # takes (pid, offset, ts, key, value, headers, origin, producer)
Ends = dict[int, tuple[int, int, int]]  # partition id -> (next offset, rows, logical bytes)


def layout_batch(
    records: Sequence[Record],
    plan: Plan,
    pids: dict[int, int],
    firsts: dict[int, int],
    origin: bytes,
    producer: str | None,
    log_append_time: bool,
    emit: Emit,
) -> list[tuple[int, int]]:
    """Emit a row per record, in input order; return (partition, offset) per record. `firsts`
    holds the first offset each target partition gives this batch, reserved under the
    partition's lock, so offsets are gap-free and unique. Rows are emitted as they are made so
    that binary COPY streams them to the server while later ones are still being laid out."""
    now = now_ms()
    if plan.plain and len(firsts) == 1 and (log_append_time or all_none(records, "timestamp_ms")):
        ((p, first),) = firsts.items()
        return _layout_plain(records, p, pids[p], first, now, origin, producer, emit)
    if plan.runs is not None:
        return _layout_runs(records, plan.runs, pids, firsts, now, origin, producer,
                            log_append_time, emit)
    nxt, placed = dict(firsts), []
    for record, p in zip(records, plan.parts, strict=True):
        off = nxt[p]
        nxt[p] = off + 1
        ts = record.timestamp_ms
        if ts is None or log_append_time:
            ts = now
        head = encode_headers(record.headers) if record.headers else None
        emit((pids[p], off, ts, record.key, record.value, head, origin, producer))
        placed.append((p, off))
    return placed


def _layout_plain(
    records: Sequence[Record],
    p: int,
    pid: int,
    first: int,
    ts: int,
    origin: bytes,
    producer: str | None,
    emit: Emit,
) -> list[tuple[int, int]]:
    """The common producer batch (one partition, no keys, headers or timestamps) with the least
    work per record: it ran at 0.88x raw COPY where the general loop ran at 0.80x."""
    for off, value in zip(count(first), map(attrgetter("value"), records)):
        emit((pid, off, ts, None, value, None, origin, producer))
    return list(zip(repeat(p), range(first, first + len(records))))


def _layout_runs(
    records: Sequence[Record],
    runs: list[tuple[int, int]],
    pids: dict[int, int],
    firsts: dict[int, int],
    now: int,
    origin: bytes,
    producer: str | None,
    log_append_time: bool,
    emit: Emit,
) -> list[tuple[int, int]]:
    """Records without keys or headers in runs of one named partition (a Kafka produce's
    batches), each run laid out as the plain loop does, with the records' own timestamps."""
    nxt, placed, at = dict(firsts), [], 0
    for p, n in runs:
        run, pid, first = records[at : at + n], pids[p], nxt[p]
        at += n
        nxt[p] = first + n
        if log_append_time:
            stamps: Iterable[int] = repeat(now, n)
        else:
            stamps = [now if t is None else t for t in map(attrgetter("timestamp_ms"), run)]
        for off, ts, value in zip(count(first), stamps, map(attrgetter("value"), run)):
            emit((pid, off, ts, None, value, None, origin, producer))
        placed += zip(repeat(p), range(first, first + n))
    return placed


def layout_apply(runs: dict[Key, list[Message]], pids: dict[Key, int], emit: Emit) -> Ends:
    """Emit rows for replicated messages, keeping the origin's offset, timestamp and origin
    (invariant 1); return the partitions' new ends."""
    ends = {}
    for key, run in runs.items():
        if not run:
            continue
        pid, nbytes = pids[key], 0
        for m in run:
            head = encode_headers(m.headers) if m.headers else None
            nbytes += ((len(m.value) if m.value else 0) + (len(m.key) if m.key else 0)
                       + (len(head) if head else 0))
            emit((pid, m.offset, m.timestamp_ms, m.key, m.value, head, m.origin.bytes, m.producer))
        ends[pid] = (run[-1].offset + 1, len(run), nbytes)
    return ends


def group_runs(messages: Sequence[Message]) -> dict[Key, list[Message]]:
    """Messages per (topic, partition); each run must be contiguous and increasing in offset."""
    runs: dict[Key, list[Message]] = {}
    for m in messages:
        run = runs.setdefault((m.topic, m.partition), [])
        if run and m.offset != run[-1].offset + 1:
            key = (m.topic, m.partition)
            raise Misordered(
                key,
                run[-1].offset + 1,
                m.offset,
                f"{key[0]}:{key[1]}: offsets in a batch must be contiguous: "
                f"{m.offset} follows {run[-1].offset}",
            )
        run.append(m)
    return runs


@dataclass(slots=True)
class Trimmed:
    """What an apply writes once the replica partitions' ends are known."""

    todo: dict[Key, list[Message]]  # runs cut to what the replica lacks
    ends: dict[Key, int]  # each partition's next offset once they are written
    starts: dict[Key, int]  # empty partitions that begin at the origin's low watermark


def trim_runs(
    runs: dict[Key, list[Message]],
    marks: dict[Key, tuple[int, int]],
    origin_low: dict[Key, int] | None = None,
) -> Trimmed:
    """Invariant 2 at the replica, given each partition's (low, next offset) read under its
    lock. A replica partition is a prefix of its origin partition whichever link brought it,
    so its next offset is the one authority, shared by every link (a link's own cursor is
    stale as soon as a second path feeds the partition, as in a fan-in diamond). A run starting
    past it would leave a gap, so the whole batch is refused; a run overlapping it (a
    redelivery, or the same messages by another path) is cut to what is new.

    A partition that never held a message may begin at the origin's low watermark instead of
    0: the messages before it expired at the origin and can never be sent, and offsets are
    kept (invariant 1), so the replica starts where the origin does."""
    todo, ends, starts = {}, {}, {}
    for key, run in runs.items():
        low, nxt = marks[key]
        first = run[0].offset
        if low == nxt == 0 and origin_low and 0 < first == origin_low.get(key):
            starts[key] = nxt = first
        if first > nxt:
            raise Misordered(key, nxt, first)
        todo[key] = run[nxt - first :]
        ends[key] = max(nxt, run[-1].offset + 1)
    return Trimmed(todo, ends, starts)


class OriginCache(dict):
    """Origin UUIDs by their 16 bytes: a batch has few origins, so each UUID is built once."""

    def __missing__(self, raw: bytes) -> UUID:
        value = self[raw] = UUID(bytes=raw)
        return value


def messages_from_rows(
    topic: str, partition: int, rows: Iterable[tuple], origins: OriginCache
) -> list[Message]:
    """Messages from read rows (offset, ts, key, value, headers, origin bytes, producer, size)."""
    return [
        build_message(
            topic,
            partition,
            off,
            ts,
            key,
            value,
            decode_headers(head) if head else (),
            origins[origin],
            producer,
        )
        for off, ts, key, value, head, origin, producer, _ in rows
    ]


def cut_to_bytes(sizes: Iterable[int], max_bytes: int) -> int:
    """How many leading messages fit in max_bytes: at least one, so a consumer never stalls
    on a message larger than its fetch size (as Kafka does)."""
    total = list(accumulate(sizes))
    if not total or total[-1] <= max_bytes:
        return len(total)
    return max(bisect_right(total, max_bytes), 1)


def expire_end(first_young: int | None, last: int | None) -> int | None:
    """The end (exclusive) of the expired prefix of a partition, given the first offset not
    older than the cut-off and the last offset among the batch's candidates.

    Retention removes a prefix: a partition keeps one contiguous range [low, high), as a log
    does, so reads and replicas never meet holes. A message younger than the ttl therefore
    keeps the ones after it until it expires too, as Kafka's segments do."""
    if first_young is not None:
        return first_young
    return None if last is None else last + 1
