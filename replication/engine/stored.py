"""Record batches as the batch store keeps them (issue 30): a Kafka record batch v2 exactly as
a producer sent it (its records section compressed as it was), with the header fields the
store indexes beside it. The producer's bytes are checked (framing, magic, CRC, and what they
take decompressed) and numbered by writing their base offset, which the CRC does not cover;
records are decoded only where a reader wants messages (REST consume, the browser, checks).

Logical bytes, for a stream's `logicalsize` and the partitions' counters: a batch's records
section uncompressed (keys, values and headers with each record's few bytes of framing).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from typing import NamedTuple
from uuid import UUID

from crc32c import crc32c

from replication.engine.recordbatch import (
    _CRC_FROM,
    _HEAD,
    CONTROL,
    HEAD_SIZE,
    MAGIC,
    RECORD_COST,
    TIMESTAMP_LOG_APPEND,
    TRANSACTIONAL,
    BatchTooLarge,
    Budget,
    CorruptRecord,
    compress,
    decode_records,
    decompress,
    decompressed_size,
    encode_body,
    frame_batch,
    frames,
)
from replication.engine.recordscan import entries, gapless
from replication.engine.store import Message, Record, build_message

_BASE = struct.Struct(">q")  # baseOffset, the batch's first 8 bytes
_TIMES = struct.Struct(">hiqq")  # attributes, lastOffsetDelta, baseTimestamp, maxTimestamp
_TIMES_AT = 21
_CRC = struct.Struct(">I")
_CRC_AT = 17


class StoredBatch(NamedTuple):
    """One row of the batch store: the batch's header fields, then its bytes."""

    base_offset: int
    last_offset: int
    records: int
    first_ts: int
    max_ts: int
    producer_id: int
    epoch: int
    base_sequence: int
    attributes: int
    crc: int
    origin: bytes  # the UUID of the stream the batch was first produced in
    producer: str | None
    size: int  # logical bytes: the records section uncompressed
    data: bytes


class RawBatch(NamedTuple):
    """A producer's batch, checked, before the store numbers it."""

    data: bytes
    records: int
    first_ts: int
    max_ts: int
    producer_id: int
    epoch: int
    base_sequence: int
    attributes: int
    size: int


def check_batches(data: bytes | None, budget: Budget | None = None, *,
                  transactional: bool = False) -> list[RawBatch]:
    """Every batch of a Produce partition's `records`, checked without decoding a record:
    framing, magic, CRC32C, the record count against the offset deltas, and what a compressed
    records section takes decompressed (against `budget`: a bomb is refused before it
    expands). Transactional batches only from a `transactional` producer's request; control
    batches never (the transaction coordinator writes them)."""
    budget = budget or Budget()
    return [_check_one(data[pos:end], head, budget, transactional)
            for data, pos, end, head in frames(data)]


def _check_one(data: bytes, head: tuple, budget: Budget, transactional: bool) -> RawBatch:
    (_, _, _, magic, crc, attributes, last_delta, base_ts, max_ts, pid, epoch, base_seq,
     count) = head
    if magic != MAGIC:
        raise CorruptRecord(f"record batch magic {magic}: only magic 2 (Kafka 0.11+) is taken")
    if crc32c(memoryview(data)[_CRC_FROM:]) != crc:  # a view: no copy of the batch
        raise CorruptRecord("the record batch's CRC32C does not match its contents")
    if attributes & CONTROL:
        raise CorruptRecord("a control batch comes from the transaction coordinator (EndTxn), "
                            "never from a producer")
    if attributes & TRANSACTIONAL and not transactional:
        raise CorruptRecord("a transactional batch in a produce request without a "
                            "transactional id: set transactional.id and begin a transaction")
    if count < 1 or last_delta != count - 1:
        raise CorruptRecord(f"a batch of {count} records whose last offset delta is "
                            f"{last_delta}: a producer's batch numbers its records 0..n-1")
    codec, limit = attributes & 0x07, budget.allowed(count)
    size = len(data) - HEAD_SIZE
    if codec:
        try:  # the check decompresses and drops: memory is the batch plus one step
            size = decompressed_size(codec, data[HEAD_SIZE:], limit)
        except BatchTooLarge:  # the budget's refusal names the setting and the fix
            raise budget.refusal() from None
    if size > limit:
        raise budget.refusal()
    budget.left -= size + count * RECORD_COST
    return RawBatch(data, count, base_ts, max_ts, pid, epoch, base_seq, attributes, size)


def place(raw: RawBatch, base_offset: int, origin: bytes, producer: str | None,
          append_time: int | None) -> StoredBatch:
    """The batch numbered from `base_offset`; with `append_time` (a LogAppendTime topic), its
    timestamp type and max timestamp set to it as Kafka's broker does, the CRC recomputed
    (the only case where the producer's CRC changes)."""
    attributes, max_ts = raw.attributes, raw.max_ts
    if append_time is None:  # the common case: one copy of the batch, its base offset first
        data = b"".join((_BASE.pack(base_offset), memoryview(raw.data)[_BASE.size:]))
        crc = _CRC.unpack_from(data, _CRC_AT)[0]
        return StoredBatch(base_offset, base_offset + raw.records - 1, raw.records,
                           raw.first_ts, max_ts, raw.producer_id, raw.epoch, raw.base_sequence,
                           attributes, crc, origin, producer, raw.size, data)
    stamped = bytearray(raw.data)
    _BASE.pack_into(stamped, 0, base_offset)
    attributes |= TIMESTAMP_LOG_APPEND
    max_ts = append_time
    _, last_delta, base_ts, _ = _TIMES.unpack_from(stamped, _TIMES_AT)
    _TIMES.pack_into(stamped, _TIMES_AT, attributes, last_delta, base_ts, max_ts)
    crc = crc32c(memoryview(stamped)[_CRC_FROM:])
    _CRC.pack_into(stamped, _CRC_AT, crc)
    return StoredBatch(base_offset, base_offset + raw.records - 1, raw.records, raw.first_ts,
                       max_ts, raw.producer_id, raw.epoch, raw.base_sequence, attributes, crc,
                       origin, producer, raw.size, bytes(stamped))


def batch_of(records: Sequence[Record], base_offset: int, now: int, *, origin: bytes,
             producer: str | None, log_append_time: bool = False, codec: int = 0,
             sequence: tuple[int, int, int] = (-1, -1, -1)) -> StoredBatch:
    """The records of one partition as one batch (REST, the CLI, the browser, replication
    from a row store), compressed with `codec`: a record without a timestamp, or every record
    of a LogAppendTime topic, stamped `now`."""
    stamped = [r if r.timestamp_ms is not None and not log_append_time
               else Record(r.value, r.key, r.headers, r.partition, now) for r in records]
    body = encode_body(stamped)
    attributes = codec | (TIMESTAMP_LOG_APPEND if log_append_time else 0)
    data = frame_batch(compress(codec, body) if codec else body, stamped,
                       base_offset=base_offset, producer=sequence, attributes=attributes)
    (_, _, _, _, crc, _, _, base_ts, max_ts, *_) = _HEAD.unpack_from(data)
    return StoredBatch(base_offset, base_offset + len(records) - 1, len(records), base_ts,
                       max_ts, *sequence, attributes, crc, origin, producer, len(body), data)


def message_batch(messages: Sequence[Message]) -> StoredBatch:
    """Replicated messages of one partition (from a row store) as one batch, keeping their
    offsets, timestamps and origin (invariant 1)."""
    first = messages[0]
    return batch_of(messages, first.offset, first.timestamp_ms,  # type: ignore[arg-type]
                    origin=first.origin.bytes, producer=first.producer)


def records_of(data: bytes, partition: int | None = None) -> tuple[int, list[Record]]:
    """A stored batch's base offset and records (naming `partition`), each with its timestamp
    as Kafka's clients read it (a LogAppendTime batch's max timestamp for every record)."""
    (base, _, _, _, _, attributes, _, base_ts, max_ts, _, _, _, count) = _HEAD.unpack_from(data)
    body, codec = data[HEAD_SIZE:], attributes & 0x07
    if codec:
        body = decompress(codec, body, 1 << 31)
    records = decode_records(body, count, base_ts, partition)
    if attributes & TIMESTAMP_LOG_APPEND:
        for record in records:
            record.timestamp_ms = max_ts
    return base, records


def numbered(data: bytes, partition: int | None = None) -> list[tuple[int, Record]]:
    """A stored batch's records with their offsets, gaps included (a compacted batch)."""
    base, records = records_of(bytes(data), partition)
    if gapless(data):
        return [(base + i, r) for i, r in enumerate(records)]
    return [(e.offset, r) for e, r in zip(entries(data), records, strict=True)]


class Fetched(NamedTuple):
    """A partition's part of a Kafka Fetch: record batches as they go on the wire, in parts
    (a batch a part from the batch store: sent as they are, never joined on the way)."""

    parts: tuple[bytes, ...]
    records: int  # the records from the fetch offset on that they carry
    nbytes: int  # their logical bytes, for the counters and quotas

    @property
    def data(self) -> bytes:
        return b"".join(self.parts)

    @property
    def size(self) -> int:
        return sum(map(len, self.parts))


def messages_of(rows: Sequence[tuple[bytes, bytes, str | None]], topic: str, partition: int,
                offset: int, limit: int, origins: dict[bytes, UUID]) -> Iterator[Message]:
    """Messages from `offset` on, at most `limit`, out of stored batches' (data, origin,
    producer) rows in offset order; a batch that begins before `offset` is skipped into."""
    for data, origin_bytes, producer in rows:
        origin = origins.get(origin_bytes)
        if origin is None:
            origin = origins[origin_bytes] = UUID(bytes=bytes(origin_bytes))
        for at, r in numbered(bytes(data)):
            if at < offset:
                continue
            if limit <= 0:
                return
            limit -= 1
            yield build_message(topic, partition, at, r.timestamp_ms, r.key, r.value,
                                r.headers, origin, producer)
