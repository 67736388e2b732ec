"""The message store's data classes, errors, partitioner and header codec.

Plain Python (no Django): gateways, Spark executors and tests use it alike (DESIGN.md).
The interface, `MessageStore` (storebase.py), has two implementations sharing every rule
written here: `PostgresStore` (production, binary COPY) and `SqliteStore` (embedded default).
`open_store(url)` picks one from the store URL.
"""

from __future__ import annotations

import functools
import struct
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import groupby, repeat
from operator import attrgetter
from typing import TYPE_CHECKING, NamedTuple, TypedDict
from uuid import UUID

if TYPE_CHECKING:
    from replication.engine.producers import ProducerBatch

Key = tuple[str, int]  # (topic, partition)
# Header values may be null too (Kafka's header value length -1), kept apart from b"".
Headers = tuple[tuple[str, bytes | None], ...]
CursorKey = tuple[str, str, int]  # (group, topic, partition)


class Committed(NamedTuple):
    """A consumer group's committed cursor with its commit's metadata string and leader epoch
    (Kafka's OffsetCommit carries both; they are the consumer's own, kept and handed back as
    given; -1: no epoch committed)."""

    group: str
    topic: str
    partition: int
    offset: int
    metadata: str = ""
    leader_epoch: int = -1


@dataclass(slots=True)
class Record:
    """What a producer hands in. Not frozen: a produce builds thousands of these per batch, and
    a frozen dataclass's `__init__` costs four times as much (`object.__setattr__` per field)."""

    value: bytes | None  # None: Kafka's null value (a tombstone), apart from b""
    key: bytes | None = None
    headers: Headers = ()
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
    value: bytes | None
    headers: Headers
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
        value: bytes | None,
        headers: Headers,
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


class LinkEnded(StoreError):
    """A replicated batch of a link a failover ended: nothing of it was written."""

    def __init__(self, link: str) -> None:
        super().__init__(f"link {link} was ended by a failover: its replica takes none of its "
                         "batches any more")


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


# Records without a key go "sticky round robin", as MapR-ES / HPE Data Fabric Streams documents
# ("How Partitions are Chosen for Messages"): a run of them, up to a batch of this size, goes to
# one partition, the next run to the next partition. One produce call is then one append per
# partition it touches, and one replication batch, not one a partition (Kafka's KIP-480 does
# the same in its clients).
STICKY_RUN = 1000


def choose_partition(key: bytes | None, partitions: int, counter: int) -> int:
    """Kafka's default for keyed records (positive murmur2 modulo the partition count), stable
    across processes and runs; the partition of sticky run `counter` for records without."""
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
    counter: int  # sticky runs counter after the batch
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
    parts, totals, keyless = [], {}, 0
    for record in records:
        p = record.partition
        if p is None:
            p = choose_partition(record.key, partitions, counter + keyless // STICKY_RUN)
            keyless += record.key is None
        elif not 0 <= p < partitions:
            raise PartitionOutOfRange(
                f"partition {p} does not exist: the topic has partitions 0..{partitions - 1}"
            )
        n, size = totals.get(p, (0, 0))
        totals[p] = (n + 1, size + record_size(record))
        parts.append(p)
    return Plan(parts, totals, counter + -(-keyless // STICKY_RUN))


def _plan_named(records: Sequence[Record], parts: list[int], partitions: int,
                counter: int) -> Plan:
    if not 0 <= min(parts) <= max(parts) < partitions:
        wrong = next(p for p in parts if not 0 <= p < partitions)
        raise PartitionOutOfRange(
            f"partition {wrong} does not exist: the topic has partitions 0..{partitions - 1}"
        )
    runs, totals, at = [], {}, 0
    sizes = value_sizes(records)
    for p, group in groupby(parts):
        n = len(list(group))
        runs.append((p, n))
        had, size = totals.get(p, (0, 0))
        totals[p] = (had + n, size + sum(sizes[at : at + n]))
        at += n
    return Plan(parts, totals, counter, runs=runs)


def _plan_round_robin(records: Sequence[Record], partitions: int, counter: int) -> Plan:
    """Sticky runs (STICKY_RUN): a call of up to a run's size goes to one partition whole."""
    sizes = value_sizes(records)
    runs, parts, totals = [], [], {}
    for run, at in enumerate(range(0, len(sizes), STICKY_RUN)):
        p, share = (counter + run) % partitions, sizes[at : at + STICKY_RUN]
        runs.append((p, len(share)))
        parts += repeat(p, len(share))
        had, size = totals.get(p, (0, 0))
        totals[p] = (had + len(share), size + sum(share))
    return Plan(parts, totals, counter + len(runs), plain=True, runs=runs)


def record_size(record: Record | Message) -> int:
    """Logical bytes: key + value + encoded headers (what `sizes()` reports as logicalsize);
    a null key or value counts 0 bytes, as the stores' coalesce(octet_length(...), 0) do."""
    size = (len(record.value) if record.value else 0) + (len(record.key) if record.key else 0)
    return size + headers_size(record.headers) if record.headers else size


def value_sizes(records: Sequence[Record]) -> list[int]:
    """Each record's value length, a null value 0. `map(len)` runs in C for the common batch;
    a null (a tombstone) makes it raise, and only then is each value looked at in Python."""
    values = list(map(attrgetter("value"), records))
    try:
        return list(map(len, values))
    except TypeError:
        return [0 if value is None else len(value) for value in values]


# --- headers ---------------------------------------------------------------------------------

_HEAD = struct.Struct(">HI")  # name length, value length; then the name (UTF-8) and the value
# A null header value's length: no stored value comes near 4 GiB, so headers stored before
# nulls were kept read back as they did.
NULL_LENGTH = 0xFFFFFFFF


def headers_size(headers: Iterable[tuple[str, bytes | None]]) -> int:
    """len(encode_headers(headers)) without encoding them."""
    return sum(_HEAD.size + len(name.encode()) + (len(value) if value else 0)
               for name, value in headers)


def encode_headers(headers: Iterable[tuple[str, bytes | None]]) -> bytes | None:
    """Length-prefixed pairs; None for no headers, so the common case stores a NULL."""
    parts = []
    for name, value in headers:
        raw = name.encode()
        if value is None:
            parts += (_HEAD.pack(len(raw), NULL_LENGTH), raw)
        else:
            parts += (_HEAD.pack(len(raw), len(value)), raw, bytes(value))
    return b"".join(parts) if parts else None


def decode_headers(blob: bytes | None) -> Headers:
    if not blob:
        return ()
    out: list[tuple[str, bytes | None]] = []
    pos, view = 0, memoryview(blob)
    while pos < len(blob):
        nlen, vlen = _HEAD.unpack_from(blob, pos)
        pos += _HEAD.size
        name = str(view[pos : pos + nlen], "utf-8")
        pos += nlen
        if vlen == NULL_LENGTH:
            out.append((name, None))
            continue
        out.append((name, bytes(view[pos : pos + vlen])))
        pos += vlen
    return tuple(out)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Produce(NamedTuple):
    """How an append batch is stored, besides its records."""

    origin: bytes  # the stream the messages are first produced in
    producer: str | None
    log_append_time: bool  # the store's clock stamps every record
    sequence: ProducerBatch | None  # an idempotent producer's batch
    # Called inside the append's transaction once its partitions are locked, before anything
    # is written: it raises to refuse the batch (the failover fence, see `fence_appends`).
    admit: Callable[[], None] | None = None
    codec: int = 0  # the batch store compresses the batch it makes with this Kafka codec


def partition_stats_from(rows: Iterable[Sequence], topic: str) -> list[PartitionStats]:
    stats = [PartitionStats(*row) for row in rows]
    if not stats:
        raise UnknownTopic(f"topic {topic!r} does not exist")
    return stats


class ReadBounds(TypedDict, total=False):
    limit: int  # at most this many messages (default 1000)
    max_bytes: int  # and about this many logical bytes, but at least one (default 1 MiB)
