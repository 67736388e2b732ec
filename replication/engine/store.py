"""The message store of one cluster: interface, data classes, partitioner, header codec.

Plain Python (no Django): gateways, Spark executors and tests use it alike (DESIGN.md).
Two implementations share every rule written here: `PostgresStore` (production, binary COPY)
and `SqliteStore` (embedded default). `open_store(url)` picks one from the store URL.
"""

from __future__ import annotations

import functools
import struct
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import groupby
from operator import attrgetter
from typing import TYPE_CHECKING, Protocol
from uuid import UUID

if TYPE_CHECKING:
    from replication.engine.producers import ProducerBatch, ProducerState

Key = tuple[str, int]  # (topic, partition)
CursorKey = tuple[str, str, int]  # (group, topic, partition)


@dataclass(slots=True)
class Record:
    """What a producer hands in. Not frozen: a produce builds thousands of these per batch, and
    a frozen dataclass's `__init__` costs four times as much (`object.__setattr__` per field)."""

    value: bytes
    key: bytes | None = None
    headers: tuple[tuple[str, bytes], ...] = ()
    partition: int | None = None
    timestamp_ms: int | None = None  # create time; None -> now


@dataclass(frozen=True, slots=True)
class Message:
    """What is stored and read back."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    origin: UUID
    producer: str | None


@dataclass(frozen=True, slots=True)
class PartitionStats:
    """What `stream topic info` shows of a partition."""

    partition: int
    low: int  # earliest retained offset
    high: int  # next offset
    messages: int
    bytes: int  # logical: keys, values and headers
    first_ts: int | None  # timestamps of the first and last retained messages
    last_ts: int | None
    consumers: int  # consumer groups with a committed cursor
    min_cursor: int | None


# One query for both stores; `{p}` is the driver's placeholder.
PARTITION_STATS = """
SELECT p.partition, p.low_offset, p.next_offset, p.rows, p.bytes,
    (SELECT ts FROM messages m WHERE m.pid = p.id AND m."offset" = p.low_offset),
    (SELECT ts FROM messages m WHERE m.pid = p.id AND m."offset" = p.next_offset - 1),
    (SELECT count(*) FROM consumer_cursors c WHERE c.pid = p.id),
    (SELECT min(c."offset") FROM consumer_cursors c WHERE c.pid = p.id)
FROM partitions p WHERE p.stream = {p} AND p.topic = {p} ORDER BY p.partition
"""


def partition_stats_from(rows: Iterable[Sequence], topic: str) -> list[PartitionStats]:
    stats = [PartitionStats(*row) for row in rows]
    if not stats:
        raise UnknownTopic(f"topic {topic!r} does not exist")
    return stats


class _MessageBuilder:
    """Builds a `Message` without the frozen dataclass `__init__`, whose nine
    `object.__setattr__` calls cost ~1.6 us a message and kept reads under 300k messages/s.
    The slots are Message's own, so the instance becomes a Message (frozen from then on)."""

    __slots__ = Message.__slots__  # type: ignore[attr-defined]

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        timestamp_ms: int,
        key: bytes | None,
        value: bytes,
        headers: tuple[tuple[str, bytes], ...],
        origin: UUID,
        producer: str | None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.timestamp_ms = timestamp_ms
        self.key = key
        self.value = value
        self.headers = headers
        self.origin = origin
        self.producer = producer
        self.__class__ = Message  # type: ignore[assignment]


build_message = _MessageBuilder  # same arguments as Message(...), returns a Message


class StoreError(Exception):
    """A request the store refuses; the message says what to do instead."""


class UnknownTopic(StoreError):
    pass


class PartitionOutOfRange(StoreError):
    pass


class OffsetOutOfRange(StoreError):
    def __init__(self, offset: int, low: int, high: int) -> None:
        super().__init__(
            f"offset {offset} is out of range: valid offsets are {low}..{high} (messages "
            f"below {low} have expired; {high} is the next offset to be written)"
        )
        self.offset, self.low, self.high = offset, low, high


class Misordered(StoreError):
    """A replicated batch starts past the replica partition's end (invariant 2): `expected` is
    that end, where the sender re-plans from."""

    def __init__(self, key: Key, expected: int, got: int, why: str = "") -> None:
        topic, partition = key
        super().__init__(
            why
            or f"{topic}:{partition}: the batch starts at offset {got} but the replica "
            f"expects {expected}: resend from {expected}"
        )
        self.key, self.expected, self.got = key, expected, got


class ReturnToOrigin(StoreError):
    """A batch would carry messages back to the stream they were first produced in."""


@dataclass(frozen=True, slots=True)
class Applied:
    """What one `apply` did."""

    ends: dict[Key, int]  # each replica partition's next offset after the batch
    written: dict[Key, int] = field(default_factory=dict)  # messages newly stored
    bytes: int = 0  # their logical bytes (keys, values, headers), as `sizes()` counts them

    @property
    def count(self) -> int:
        return sum(self.written.values())


class MessageStore(Protocol):
    """The message store of one cluster. Streams are named by UUID, partitions by number."""

    def ensure_topic(self, stream: UUID, topic: str, partitions: int) -> None:
        """Create the topic or grow it to `partitions`; never shrinks (fewer is a no-op)."""

    def partitions(self, stream: UUID, topic: str) -> int: ...

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
        """Store a batch in one transaction; (partition, offset) per record, in input order.
        Offsets are gap-free per partition whatever the number of concurrent appenders.
        With `sequence` (an idempotent producer's batch; every record names one partition),
        the producer's state is checked and kept in the same transaction (`sequence_check`):
        a retried batch returns its original offsets and writes nothing."""

    def apply(
        self,
        stream: UUID,
        messages: Sequence[Message],
        *,
        link: str,
        origin_low: dict[Key, int] | None = None,
    ) -> Applied:
        """Replication: store messages keeping their origin offsets, timestamps and origin, in
        one transaction. Each (topic, partition) run must be contiguous. Under the partition's
        lock, its next offset decides, whichever link sends (see `trim_runs`): a run starting
        past it refuses the whole batch (Misordered, nothing written), an overlap is trimmed.
        `origin_low` names the origin's low watermark per partition: a partition that never
        held a message accepts a run starting exactly there. The link's status cursor moves
        in the same transaction."""

    def replication_cursor(self, stream: UUID, link: str, topic: str, partition: int) -> int:
        """For status only, never a check: the end of the furthest run this link delivered
        to the partition (0 before any). The replica holds every offset below it."""

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
        """Messages from `offset` in order, at least one if any (even past max_bytes); [] at
        the high watermark; OffsetOutOfRange below the low one or past the high one."""

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
        """`read` without building Messages, for the Kafka fetch path that re-encodes them at
        once: rows (offset, ts, key, value, encoded headers or None, origin bytes, producer,
        logical bytes), the same rules and errors as `read`."""

    def watermarks(self, stream: UUID, topic: str) -> dict[int, tuple[int, int]]:
        """partition -> (low, high): earliest retained offset, next offset."""

    def partition_stats(self, stream: UUID, topic: str) -> list[PartitionStats]: ...

    def sizes(self, stream: UUID) -> dict:
        """{"logicalsize", "physicalsize", "numtopics"}, as maprcli stream info reports."""

    def expire(self, stream: UUID, *, before_ms: int, batch: int = 10_000) -> int:
        """Delete up to `batch` messages older than before_ms (a prefix of each partition);
        raises low watermarks, never touches next offsets. Callers loop until it returns 0."""

    def trim(self, stream: UUID, topic: str, partition: int, end: int, *,
             batch: int = 10_000) -> int:
        """`stream purge`: delete up to `batch` of the partition's messages below `end` (a
        prefix, as retention removes); raises the low watermark, never touches the next
        offset. Callers loop until it returns 0."""

    def commit_cursor(
        self, stream: UUID, group: str, topic: str, partition: int, offset: int
    ) -> None: ...

    def fetch_cursor(self, stream: UUID, group: str, topic: str, partition: int) -> int | None: ...

    def cursors(self, stream: UUID) -> list[tuple[str, str, int, int]]:
        """Every consumer cursor of the stream as (group, topic, partition, offset)."""

    def merge_cursors(
        self, stream: UUID, cursors: Sequence[tuple[str, str, int, int]]
    ) -> dict[CursorKey, int]:
        """Replication of committed cursors, in one transaction: each (group, topic, partition,
        offset) is clamped to the partition's next offset (a replica's cursor past what it holds
        would skip messages on failover) and never moves a cursor back. Partitions the stream
        does not have are skipped. Returns each merged cursor's stored offset."""

    def truncate(self, stream: UUID, topic: str, partition: int, offset: int) -> int:
        """diffstreams' repair: delete the partition's messages from `offset` on and move its
        next offset back there (replication and consumer cursors with it), in one
        transaction. Returns the messages deleted (0 when `offset` is at or past the end)."""

    def producer_state(
        self, stream: UUID, topic: str, partition: int, producer_id: int
    ) -> ProducerState | None:
        """An idempotent producer's state on a partition (None before its first batch)."""

    def offset_for_time(
        self, stream: UUID, topic: str, partition: int, timestamp_ms: int
    ) -> tuple[int, int] | None:
        """Kafka's ListOffsets by time: (offset, timestamp) of the first retained message with
        a timestamp at or after `timestamp_ms`, None when there is none."""

    def drop_stream(self, stream: UUID) -> None: ...
    def drop_topic(self, stream: UUID, topic: str) -> None: ...

    def close(self) -> None: ...


def first_at_or_after(low: int, high: int, ts_at: Callable[[int], int], target: int) -> int:
    """The first offset in [low, high) whose timestamp is at or after `target` (high when
    none), by binary search over primary-key lookups: no index on timestamps (it would cost
    every append), and timestamps grow with offsets as Kafka's time index assumes."""
    while low < high:
        mid = (low + high) // 2
        if ts_at(mid) >= target:
            high = mid
        else:
            low = mid + 1
    return low


# --- partitioner -----------------------------------------------------------------------------

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


@functools.lru_cache(maxsize=1 << 16)  # keys repeat (user ids, devices): hash each once
def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (seed 0x9747b28c), so a key lands where a Java producer puts it."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    n4 = length & ~3
    for (k,) in struct.iter_unpack("<I", data[:n4]):
        k = (k * _M) & _MASK
        k ^= k >> 24
        h = ((h * _M) & _MASK) ^ ((k * _M) & _MASK)
    tail = length & 3
    if tail:
        if tail == 3:
            h ^= data[n4 + 2] << 16
        if tail >= 2:
            h ^= data[n4 + 1] << 8
        h = ((h ^ data[n4]) * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    return h ^ (h >> 15)


def choose_partition(key: bytes | None, partitions: int, counter: int) -> int:
    """Kafka's default for keyed records (positive murmur2 modulo the partition count), stable
    across processes and runs; round-robin on `counter` for records without a key."""
    if key is None:
        return counter % partitions
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def all_none(records: Sequence[Record], field: str) -> bool:
    values = list(map(attrgetter(field), records))
    return values.count(None) == len(values)


@dataclass(slots=True)
class Plan:
    """Where an append batch goes, worked out before anything is written."""

    parts: list[int]  # partition per record
    totals: dict[int, tuple[int, int]]  # partition -> (records, logical bytes)
    counter: int  # round-robin counter after the batch
    plain: bool = False  # no record has a key, a partition or headers
    # Records without keys or headers that name their partitions, in contiguous runs of
    # (partition, count): a Kafka produce's partitions, laid out without a per-record branch.
    runs: list[tuple[int, int]] | None = None


def plan_partitions(records: Sequence[Record], partitions: int, counter: int) -> Plan:
    """Refuses the whole batch (nothing written) when a record names a partition that does not
    exist. Runs before the COPY starts, so the common batch (no keys, partitions or headers)
    takes a path without per-record Python calls."""
    simple = not any(map(attrgetter("headers"), records))
    if simple and all_none(records, "key"):
        named = list(map(attrgetter("partition"), records))
        if named.count(None) == len(named):
            return _plan_round_robin(records, partitions, counter)
        if None not in named:
            return _plan_named(records, named, partitions, counter)
    parts, totals = [], {}
    for record in records:
        p = record.partition
        if p is None:
            p = choose_partition(record.key, partitions, counter)
            counter += record.key is None
        elif not 0 <= p < partitions:
            raise PartitionOutOfRange(
                f"partition {p} does not exist: the topic has partitions 0..{partitions - 1}"
            )
        n, size = totals.get(p, (0, 0))
        totals[p] = (n + 1, size + record_size(record))
        parts.append(p)
    return Plan(parts, totals, counter)


def _plan_named(records: Sequence[Record], parts: list[int], partitions: int,
                counter: int) -> Plan:
    if not 0 <= min(parts) <= max(parts) < partitions:
        wrong = next(p for p in parts if not 0 <= p < partitions)
        raise PartitionOutOfRange(
            f"partition {wrong} does not exist: the topic has partitions 0..{partitions - 1}"
        )
    runs, totals, at = [], {}, 0
    sizes = list(map(len, map(attrgetter("value"), records)))
    for p, group in groupby(parts):
        n = len(list(group))
        runs.append((p, n))
        had, size = totals.get(p, (0, 0))
        totals[p] = (had + n, size + sum(sizes[at : at + n]))
        at += n
    return Plan(parts, totals, counter, runs=runs)


def _plan_round_robin(records: Sequence[Record], partitions: int, counter: int) -> Plan:
    sizes = list(map(len, map(attrgetter("value"), records)))
    n = len(sizes)
    parts = [(counter + i) % partitions for i in range(n)] if partitions > 1 else [0] * n
    totals = {}
    for first in range(min(n, partitions)):  # record `first` and every partitions-th after it
        share = sizes[first::partitions]
        totals[parts[first]] = (len(share), sum(share))
    return Plan(parts, totals, counter + n, plain=True)


def record_size(record: Record) -> int:
    """Logical bytes: key + value + encoded headers (what `sizes()` reports as logicalsize)."""
    size = len(record.value) + (len(record.key) if record.key else 0)
    return size + headers_size(record.headers) if record.headers else size


# --- headers ---------------------------------------------------------------------------------

_HEAD = struct.Struct(">HI")  # name length, value length; then the name (UTF-8) and the value


def headers_size(headers: Iterable[tuple[str, bytes]]) -> int:
    """len(encode_headers(headers)) without encoding them."""
    return sum(_HEAD.size + len(name.encode()) + len(value) for name, value in headers)


def encode_headers(headers: Iterable[tuple[str, bytes]]) -> bytes | None:
    """Length-prefixed pairs; None for no headers, so the common case stores a NULL."""
    parts = []
    for name, value in headers:
        raw = name.encode()
        parts += (_HEAD.pack(len(raw), len(value)), raw, bytes(value))
    return b"".join(parts) if parts else None


def decode_headers(blob: bytes | None) -> tuple[tuple[str, bytes], ...]:
    if not blob:
        return ()
    out, pos, view = [], 0, memoryview(blob)
    while pos < len(blob):
        nlen, vlen = _HEAD.unpack_from(blob, pos)
        pos += _HEAD.size
        name = str(view[pos : pos + nlen], "utf-8")
        pos += nlen
        out.append((name, bytes(view[pos : pos + vlen])))
        pos += vlen
    return tuple(out)


def now_ms() -> int:
    return time.time_ns() // 1_000_000
