"""A stored record batch's records scanned with their own offsets (base plus each record's
offset delta), keys and raw bodies, without building `Record`s: what log compaction (issue
31) reads and rewrites, and what tells a compacted batch's offsets (it has gaps)."""

from __future__ import annotations

import struct
from typing import NamedTuple

from aiokafka.errors import CorruptRecordException
from aiokafka.record._crecords import DefaultRecordBatch

from replication.engine.recordbatch import (
    _HEAD,
    HEAD_SIZE,
    TIMESTAMP_LOG_APPEND,
    CorruptRecord,
    _varint,
    decompress,
)

_LENGTH, _ATTRIBUTES = struct.Struct(">i"), struct.Struct(">h")


class Entry(NamedTuple):
    """One record of a stored batch as compaction sees it."""

    offset: int
    timestamp: int
    key: bytes | None
    tombstone: bool  # a null value
    ts_delta: int  # as the record has it (a LogAppendTime batch's records keep theirs)
    body: bytes  # the record from its key on (key, value, headers) as encoded


def entries(data: bytes) -> list[Entry]:
    """Every record of a stored batch with its own offset (base plus its offset delta)."""
    (base, _, _, _, _, attributes, _, base_ts, max_ts, _, _, _, count) = _HEAD.unpack_from(data)
    body = _body(data, attributes)
    append_time = bool(attributes & TIMESTAMP_LOG_APPEND)
    out, pos = [], 0
    for _ in range(count):
        length, pos = _var(body, pos)
        end = pos + length
        ts, at = _var(body, pos + 1)  # after the record's attributes byte
        delta, at = _var(body, at)
        key_len, key_at = _var(body, at)
        key = body[key_at:key_at + key_len] if key_len >= 0 else None
        value_len, _ = _var(body, key_at + max(key_len, 0))
        out.append(Entry(base + delta, max_ts if append_time else base_ts + ts, key,
                         value_len < 0, ts, body[at:end]))
        pos = end
    return out


def keyed_offsets(data: bytes) -> list[tuple[bytes | None, int]]:
    """(key, offset) of each record of a stored batch: what compaction's first pass reads
    (and its second, to drop a batch every record of which a later one hides), without the
    rest of `entries`. This runs for every record of a compacted partition, twice a pass, so
    the records are read by aiokafka's Cython batch reader (0.2 µs a record here, against
    1.5 µs for the same loop in Python), a compressed batch's records once decompressed."""
    attributes = _HEAD.unpack_from(data)[5]
    if attributes & 0x07:
        data = _decompressed(data, attributes)
    try:
        return [(r.key, r.offset) for r in DefaultRecordBatch(data)]
    except (CorruptRecordException, IndexError, ValueError) as err:
        raise CorruptRecord(f"a record does not decode: {err}") from None


def _decompressed(data: bytes, attributes: int) -> bytes:
    """The batch with its records decompressed and its codec bits cleared (its length and
    attributes fields to match; the CRC, which a reader of stored batches does not check
    again, left as it was)."""
    body = _body(data, attributes)
    head = bytearray(data[:HEAD_SIZE])
    _LENGTH.pack_into(head, 8, HEAD_SIZE - 12 + len(body))
    _ATTRIBUTES.pack_into(head, 21, attributes & ~0x07)
    return bytes(head) + body


def _body(data: bytes, attributes: int) -> bytes:
    body, codec = bytes(data[HEAD_SIZE:]), attributes & 0x07
    return decompress(codec, body, 1 << 31) if codec else body


def _var(body: bytes, pos: int) -> tuple[int, int]:
    """`_varint` with the one- and two-byte cases (most of a record's) done here: compaction
    decodes every record of a partition, and the loop's call was half its time."""
    try:
        b = body[pos]
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
        c = body[pos + 1]
    except IndexError:
        return _varint(body, pos)  # raises CorruptRecord
    if c < 0x80:
        raw = (b & 0x7F) | (c << 7)
        return (raw >> 1) ^ -(raw & 1), pos + 2
    return _varint(body, pos)


def gapless(data: bytes) -> bool:
    """True when a stored batch holds every offset from its base to its last (never
    compacted): its records are numbered by their order."""
    head = _HEAD.unpack_from(data)
    return head[12] == head[6] + 1
