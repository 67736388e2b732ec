"""Kafka's record batch v2 (magic 2), decoded into the store's `Record` and encoded from its
`Message`: the on-disk and on-wire format that Produce carries in and Fetch carries out.

The format (kafka.apache.org/documentation/#recordbatch) is not in the message schemas that kio
is generated from, so it is written here. A batch is a fixed 61-byte header followed by its
records, each a varint-framed structure of zigzag varints; the CRC32C covers the batch from
`attributes` on, and `attributes` bits 0-2 name the codec compressing the records section.

Speed: this runs once per produced and fetched message, so the record loops inline the common
one-byte varint and build nothing beyond the `Record` the store appends.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from crc32c import crc32c

from replication.engine.codecs import (  # noqa: F401 (the codecs are part of this module's API)
    CHUNK,
    CODECS,
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    ZSTD,
    BatchTooLarge,
    CorruptRecord,
    compress,
    decompress,
    decompressed_size,
)
from replication.engine.store import Message, Record, decode_headers

MAGIC = 2
TIMESTAMP_LOG_APPEND = 0x08
TRANSACTIONAL = 0x10
CONTROL = 0x20

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta,
# baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, records count.
_HEAD = struct.Struct(">qiibIhiqqqhii")
HEAD_SIZE = _HEAD.size  # 61
_CRC_FROM = 21  # attributes start here: the CRC covers the batch from them on
_LENGTH_FROM = 12  # batchLength counts the bytes after itself


# What a batch may take once decoded, unless the caller says (the settings' defaults:
# STREAMGATE_KAFKA_MAX_BATCH_BYTES, and STREAMGATE_KAFKA_MAX_REQUEST_BYTES for a request).
BATCH_BYTES, REQUEST_BYTES = 8 << 20, 100 << 20
# A decoded record costs about this much memory beyond its bytes (the Record, its timestamp,
# the list slot, what the append builds): a batch of many tiny records is charged for them,
# so a few KB of compressed 7-byte records cannot become millions of objects.
RECORD_COST = 200


@dataclass(slots=True)
class Budget:
    """What one Produce request's batches may still take decoded: each batch at most
    `batch_bytes`, all of them together `left`. Compressed or not, a request never holds more
    than an uncompressed request of the largest frame allowed could carry."""

    batch_bytes: int = BATCH_BYTES
    request_bytes: int = REQUEST_BYTES
    left: int = -1  # what the request's batches have not taken yet

    def __post_init__(self) -> None:
        if self.left < 0:
            self.left = self.request_bytes

    def allowed(self, count: int) -> int:
        """The bytes a batch of `count` records may decode to (its records' cost deducted)."""
        room = min(self.batch_bytes, self.left) - max(count, 0) * RECORD_COST
        if room < 0:
            raise self.refusal()
        return room

    def refusal(self) -> BatchTooLarge:
        if self.batch_bytes <= self.left:
            return BatchTooLarge(f"the batch's records take more than {self.batch_bytes} bytes "
                                 "decoded (STREAMGATE_KAFKA_MAX_BATCH_BYTES): send smaller "
                                 "batches")
        return BatchTooLarge(f"the request's batches take more than {self.request_bytes} bytes "
                             "decoded, all together (STREAMGATE_KAFKA_MAX_REQUEST_BYTES): send "
                             "fewer batches a request")


@dataclass(slots=True)
class Batch:
    """One decoded record batch: its header fields and its records."""

    base_offset: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records: list[Record]

    @property
    def codec(self) -> int:
        return self.attributes & 0x07


# --- varints -------------------------------------------------------------------------------------


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint (Kafka's varint and varlong) at pos: (value, position after it)."""
    shift = result = 0
    while True:
        try:
            b = buf[pos]
        except IndexError:
            raise CorruptRecord("a record ends inside a varint") from None
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptRecord("a varint is longer than 10 bytes")


def _zigzag_bytes(value: int) -> bytes:
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# Lengths, deltas and small counts are almost always below 16 Ki: encode those by table lookup.
_SMALL = 1 << 14
_ZZ = [_zigzag_bytes(i) for i in range(_SMALL)]
_MINUS_ONE = _zigzag_bytes(-1)


def varint(value: int) -> bytes:
    return _ZZ[value] if 0 <= value < _SMALL else _zigzag_bytes(value)


# --- compression ---------------------------------------------------------------------------------


# --- decode --------------------------------------------------------------------------------------


def decode_batches(data: bytes | None, partition: int | None = None,
                   budget: Budget | None = None) -> list[Batch]:
    """Every batch in a Produce partition's `records` bytes, checked (magic, length, CRC, and
    what it takes decoded against `budget`); each record names `partition`."""
    budget = budget or Budget()
    return [_decode_one(data, pos, end, head, partition, budget)
            for data, pos, end, head in frames(data)]


def frames(data: bytes | None) -> Iterator[tuple[bytes, int, int, tuple]]:
    """Each batch's place in a Produce partition's `records` bytes: (the bytes, its start, its
    end, its header's fields), its framing checked (a header's room, its length)."""
    if not data:
        return
    data, pos = bytes(data), 0
    while pos < len(data):
        if len(data) - pos < HEAD_SIZE:
            raise CorruptRecord(f"{len(data) - pos} bytes left: too short for a batch header")
        head = _HEAD.unpack_from(data, pos)
        end = pos + _LENGTH_FROM + head[1]
        if head[1] < HEAD_SIZE - _LENGTH_FROM or end > len(data):
            raise CorruptRecord(f"batch length {head[1]} does not fit the {len(data)} bytes sent")
        yield data, pos, end, head
        pos = end


def _decode_one(data: bytes, pos: int, end: int, head: tuple, partition: int | None,
                budget: Budget) -> Batch:
    (base_offset, _, _, magic, crc, attributes, last_delta, base_ts, max_ts, pid, epoch,
     base_seq, count) = head
    if magic != MAGIC:
        raise CorruptRecord(f"record batch magic {magic}: only magic 2 (Kafka 0.11+) is taken")
    if crc32c(data[pos + _CRC_FROM : end]) != crc:
        raise CorruptRecord("the record batch's CRC32C does not match its contents")
    if attributes & (TRANSACTIONAL | CONTROL):
        raise CorruptRecord("transactional and control batches are not supported")
    body, codec, limit = data[pos + HEAD_SIZE : end], attributes & 0x07, budget.allowed(count)
    try:
        body = decompress(codec, body, limit) if codec else body
    except BatchTooLarge:
        raise budget.refusal() from None
    if len(body) > limit:
        raise budget.refusal()
    budget.left -= len(body) + count * RECORD_COST
    records = decode_records(body, count, base_ts, partition)
    return Batch(base_offset, attributes, last_delta, base_ts, max_ts, pid, epoch, base_seq,
                 records)


def decode_records(
    buf: bytes, count: int, base_ts: int, partition: int | None = None
) -> list[Record]:
    """`count` records from buf; each record's timestamp is the batch's plus its delta. One
    loop with one- and two-byte varints inlined (a 200-byte value's length takes two): this is
    the listener's hottest code, and a call per varint cost a third of it."""
    out: list[Record] = []
    append, pos, size, slow = out.append, 0, len(buf), _varint
    try:
        for _ in range(count):
            b = buf[pos]  # the record's length
            if b < 0x80:
                pos += 1
                end = pos + (b >> 1)
            elif (c := buf[pos + 1]) < 0x80:
                pos += 2
                end = pos + ((b & 0x7F | c << 7) >> 1)
            else:
                n, pos = slow(buf, pos)
                end = pos + n
            b = buf[pos + 1]  # the timestamp delta, after the attributes byte
            if b < 0x80:
                ts, pos = (b >> 1) ^ -(b & 1), pos + 2
            else:
                ts, pos = slow(buf, pos + 1)
            b = buf[pos]  # the offset delta: implied by the order, skipped
            if b < 0x80:
                pos += 1
            elif buf[pos + 1] < 0x80:
                pos += 2
            else:
                pos = slow(buf, pos)[1]
            b = buf[pos]
            if b == 1:  # key length -1: no key (the common case)
                key, pos = None, pos + 1
            else:
                n, pos = slow(buf, pos)
                key, pos = buf[pos : pos + n], pos + n
            b = buf[pos]  # the value's length
            if b < 0x80:
                n, pos = (b >> 1) ^ -(b & 1), pos + 1
            elif (c := buf[pos + 1]) < 0x80:
                n, pos = (b & 0x7F | c << 7) >> 1, pos + 2
            else:
                n, pos = slow(buf, pos)
            if n >= 0:
                value, pos = buf[pos : pos + n], pos + n
            else:  # length -1: a null value (a tombstone), kept apart from b""
                value = None
            if buf[pos] == 0:  # no headers
                headers: tuple = ()
                pos += 1
            else:
                headers, pos = _headers(buf, pos)
            if pos != end:
                raise CorruptRecord("a record's length does not match its contents")
            append(Record(value, key, headers, partition, base_ts + ts))
    except IndexError:
        raise CorruptRecord("the records end before the batch's record count is read") from None
    if pos != size:
        raise CorruptRecord(f"{size - pos} bytes follow the batch's {count} records")
    return out


def _headers(buf: bytes, pos: int) -> tuple[tuple, int]:
    count, pos = _varint(buf, pos)
    headers = []
    for _ in range(count):
        n, pos = _varint(buf, pos)
        name = buf[pos : pos + n].decode("utf-8", "replace")
        pos += n
        n, pos = _varint(buf, pos)
        value = buf[pos : pos + n] if n >= 0 else None  # -1: a null header value
        pos += max(n, 0)
        headers.append((name, value))
    return tuple(headers), pos


# --- encode --------------------------------------------------------------------------------------


def encode_batch(
    messages: Sequence[Message] | Sequence[Record],
    *,
    base_offset: int = 0,
    codec: int = NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    attributes: int = 0,
) -> bytes:
    """One batch holding `messages` (stored Messages, whose offsets must be contiguous, or
    Records, numbered from base_offset). Fetch sends these; tests build Produce batches."""
    first = messages[0]
    if isinstance(first, Message):
        base_offset = first.offset
    body = encode_body(messages)
    return frame_batch(compress(codec, body) if codec else body, messages,
                       base_offset=base_offset, producer=(producer_id, producer_epoch,
                                                          base_sequence),
                       attributes=attributes | codec)


def encode_body(messages: Sequence[Message] | Sequence[Record]) -> bytes:
    """The records section of a batch of `messages`, uncompressed."""
    return b"".join(_encode_records(messages, _ts(messages[0])))


def frame_batch(body: bytes, messages: Sequence[Message] | Sequence[Record], *,
                base_offset: int, producer: tuple[int, int, int] = (-1, -1, -1),
                attributes: int = 0) -> bytes:
    """A batch around a records section (compressed as `attributes` says) of `messages`."""
    base_ts, max_ts = _ts(messages[0]), max(map(_ts, messages))
    tail = struct.pack(">hiqqqhii", attributes, len(messages) - 1, base_ts, max_ts,
                       *producer, len(messages)) + body
    return struct.pack(">qiibI", base_offset, len(tail) + 9, 0, MAGIC, crc32c(tail)) + tail


def _ts(m: Message | Record) -> int:
    ts = m.timestamp_ms
    return -1 if ts is None else ts


def _encode_records(messages: Sequence[Message] | Sequence[Record], base_ts: int) -> list[bytes]:
    zz, small, out = _ZZ, _SMALL, []
    append = out.append
    for delta, m in enumerate(messages):
        key, value, t = m.key, m.value, m.timestamp_ms
        t = 0 if t is None else t - base_ts
        parts = [b"\x00", zz[t] if 0 <= t < small else _zigzag_bytes(t),
                 zz[delta] if delta < small else _zigzag_bytes(delta),
                 _MINUS_ONE if key is None else varint(len(key)) + key,
                 _encode_value(value), _encode_headers(m.headers) if m.headers else b"\x00"]
        body = b"".join(parts)
        n = len(body)
        append(zz[n] if n < small else _zigzag_bytes(n))
        append(body)
    return out


def _encode_value(value: bytes | None) -> bytes:
    """A value (a record's or a header's) with its length; None as length -1 (null)."""
    if value is None:
        return _MINUS_ONE
    n = len(value)
    return (_ZZ[n] if n < _SMALL else _zigzag_bytes(n)) + value


def _encode_headers(headers: Sequence[tuple[str, bytes | None]]) -> bytes:
    parts = [varint(len(headers))]
    for name, value in headers:
        raw = name.encode()
        parts += (varint(len(raw)), raw, _encode_value(value))
    return b"".join(parts)


def encode_rows(rows: Sequence[tuple]) -> bytes:
    """One uncompressed batch from a store's read rows (offset, ts, key, value, encoded
    headers, ...), contiguous in offset: Fetch's hot path, with no Message built per row."""
    base_offset, base_ts = rows[0][0], rows[0][1]
    zz, small, out, max_ts = _ZZ, _SMALL, [], base_ts
    append = out.append
    for off, ts, key, value, head, *_ in rows:
        t, delta = ts - base_ts, off - base_offset
        if ts > max_ts:
            max_ts = ts
        if value is None:  # a null value (a tombstone): length -1, no bytes
            length, value = _MINUS_ONE, b""
        else:
            n = len(value)
            length = zz[n] if n < small else _zigzag_bytes(n)
        body = b"".join((b"\x00", zz[t] if 0 <= t < small else _zigzag_bytes(t),
                         zz[delta] if delta < small else _zigzag_bytes(delta),
                         _MINUS_ONE if key is None else varint(len(key)) + key, length, value,
                         _encode_headers(decode_headers(head)) if head else b"\x00"))
        n = len(body)
        append(zz[n] if n < small else _zigzag_bytes(n))
        append(body)
    tail = _TAIL.pack(0, len(rows) - 1, base_ts, max_ts, -1, -1, -1, len(rows)) + b"".join(out)
    return _FRONT.pack(base_offset, len(tail) + 9, 0, MAGIC, crc32c(tail)) + tail


_TAIL = struct.Struct(">hiqqqhii")
_FRONT = struct.Struct(">qiibI")
