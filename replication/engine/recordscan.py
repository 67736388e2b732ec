"""A stored record batch's records scanned with their own offsets (base plus each record's
offset delta), keys and raw bodies, without building `Record`s: what log compaction (issue
31) reads and rewrites, and what tells a compacted batch's offsets (it has gaps)."""

from __future__ import annotations

from typing import NamedTuple

from replication.engine.recordbatch import (
    _HEAD,
    HEAD_SIZE,
    TIMESTAMP_LOG_APPEND,
    _varint,
    decompress,
)


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
    body, codec = bytes(data[HEAD_SIZE:]), attributes & 0x07
    if codec:
        body = decompress(codec, body, 1 << 31)
    append_time = bool(attributes & TIMESTAMP_LOG_APPEND)
    out, pos = [], 0
    for _ in range(count):
        length, pos = _varint(body, pos)
        end = pos + length
        ts, at = _varint(body, pos + 1)  # after the record's attributes byte
        delta, at = _varint(body, at)
        key_len, key_at = _varint(body, at)
        key = body[key_at:key_at + key_len] if key_len >= 0 else None
        value_len, _ = _varint(body, key_at + max(key_len, 0))
        out.append(Entry(base + delta, max_ts if append_time else base_ts + ts, key,
                         value_len < 0, ts, body[at:end]))
        pos = end
    return out


def gapless(data: bytes) -> bool:
    """True when a stored batch holds every offset from its base to its last (never
    compacted): its records are numbered by their order."""
    head = _HEAD.unpack_from(data)
    return head[12] == head[6] + 1
