"""Log compaction's rules on stored record batches (issue 31), no SQL: which records a
compacted partition keeps, and the batches rewritten without the others.

As Kafka's log cleaner: below the cleanable end, a record is kept when it is the latest of its
key (a keyless record is dropped, as Kafka's cleaner drops one), and a tombstone (null value)
that is the latest of its key is kept until it is older than the delete retention. A rewritten
batch keeps its header (baseOffset, lastOffsetDelta, timestamps, producer fields, attributes:
codec and timestamp type) and each kept record its offset and timestamp deltas, so consumers
see gaps in the offsets, inside a batch and between batches, as Kafka's consumers do; a batch
left with no record is dropped (producer state lives in the store's producer table, not in
the batches). The rule depends only on the records and the clock, so a replica compacting its
copy with it keeps what its origin keeps, at the same offsets.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from typing import NamedTuple, Protocol

from crc32c import crc32c

from replication.engine.recordbatch import _CRC_FROM, _HEAD, HEAD_SIZE, _zigzag_bytes, compress
from replication.engine.recordscan import Entry, entries, keyed_offsets
from replication.engine.store import Message
from replication.engine.stored import StoredBatch

_COUNT_AT = HEAD_SIZE - 4  # the records count, the header's last field
_DELTA_AT = 23  # lastOffsetDelta, after the attributes
_BASE, _INT, _UINT = struct.Struct(">q"), struct.Struct(">i"), struct.Struct(">I")


def null_keys(data: bytes) -> list[int]:
    """The batch indexes of a batch's records without a key (a compacted topic refuses
    them)."""
    return [i for i, (key, _) in enumerate(keyed_offsets(data)) if key is None]


def rebuild(batch: StoredBatch, kept: Sequence[Entry], *, base: int | None = None,
            last: int | None = None) -> StoredBatch:
    """`batch` holding only the `kept` records: its header as it was (count, length and CRC
    aside, and its base and last offsets when given: a batch cut by a truncate or a replica's
    end), each record's offset and timestamp deltas as they were."""
    base = batch.base_offset if base is None else base
    last = batch.last_offset if last is None else last
    parts = []
    for e in kept:
        record = b"\x00" + _zigzag_bytes(e.ts_delta) + _zigzag_bytes(e.offset - base) + e.body
        parts += (_zigzag_bytes(len(record)), record)
    body = b"".join(parts)
    codec = batch.attributes & 0x07
    data = bytearray(batch.data[:HEAD_SIZE] + (compress(codec, body) if codec else body))
    _BASE.pack_into(data, 0, base)
    _INT.pack_into(data, 8, len(data) - 12)
    _INT.pack_into(data, _DELTA_AT, last - base)
    _INT.pack_into(data, _COUNT_AT, len(kept))
    crc = crc32c(bytes(data[_CRC_FROM:]))
    _UINT.pack_into(data, 17, crc)
    return batch._replace(base_offset=base, last_offset=last, records=len(kept), crc=crc,
                          size=len(body), data=bytes(data))


def cut(data: bytes, origin: bytes, producer: str | None, start: int,
        end: int) -> StoredBatch | None:
    """The records of a stored batch within [start, end) as a batch of their own covering
    no offset outside it (same origin and producer); None when there are none. For batches
    with gaps, which `batch_of` would renumber."""
    data = bytes(data)
    head = _HEAD.unpack_from(data)
    kept = [e for e in entries(data) if start <= e.offset < end]
    if not kept:
        return None
    whole = StoredBatch(head[0], head[0] + head[6], head[12], head[7], head[8], head[9],
                        head[10], head[11], head[5], head[4], bytes(origin), producer, 0, data)
    return rebuild(whole, kept, base=max(whole.base_offset, start),
                   last=min(whole.last_offset, end - 1))


class Rules(NamedTuple):
    """What a compaction pass of one partition is given."""

    end: int  # the cleanable end: records at or past it are not touched
    tombstones_before: int  # a latest tombstone older than this (ms) is removed


class Keyed(Protocol):
    """What the keys' pass reads of a batch (a StoredBatch has it)."""

    last_offset: int
    data: bytes


def latest(batches: Iterable[Keyed], end: int, into: dict[bytes, int]) -> None:
    """Each key's latest offset below `end` among `batches`, into `into` (called once per
    page of batches, in offset order)."""
    for batch in batches:
        pairs = keyed_offsets(batch.data)
        # dict.update's loop is C's: this runs for every record of the partition.
        into.update(pairs if batch.last_offset < end else ((k, o) for k, o in pairs if o < end))
    into.pop(None, None)  # keyless records: not a key (compaction drops them)


def compacted(batch: StoredBatch, keys: dict[bytes, int], rules: Rules
              ) -> StoredBatch | bool | None:
    """`batch` compacted: False when it keeps every record (nothing to write), None when it
    keeps none (its row goes), else the rewritten batch."""
    if batch.last_offset >= rules.end:
        return False
    # A batch whose every record a later one of its key hides (most of a partition written
    # over and over) is dropped on its keys alone, without decoding the rest of its records.
    pairs = keyed_offsets(batch.data)
    if pairs and all(key is None or keys.get(key, -1) > offset for key, offset in pairs):
        return None
    found = entries(batch.data)
    kept = [e for e in found if _keeps(e, keys, rules)]
    if len(kept) == len(found):
        return False
    return rebuild(batch, kept) if kept else None


def _keeps(e: Entry, keys: dict[bytes, int], rules: Rules) -> bool:
    if e.key is None or keys.get(e.key, -1) > e.offset:
        return False
    return not (e.tombstone and e.timestamp < rules.tombstones_before)


def cleanable_end(oldest_young: int | None, high: int, replicated: int) -> int:
    """Where compaction stops: the first batch younger than min.compaction.lag (None: all
    are older), never past what every replica confirmed nor past the high watermark."""
    end = high if oldest_young is None else min(oldest_young, high)
    return min(end, replicated)


def dirty_ratio(cleaned_end: int, end: int, low: int) -> float:
    """Kafka's min.cleanable.dirty.ratio measure, in offsets: the share of [low, end) not
    compacted yet."""
    total = end - low
    if total <= 0:
        return 0.0
    return (end - max(cleaned_end, low)) / total


def kept_view(messages: Iterable[Message]) -> dict[bytes, Message]:
    """What a compacted partition stands for: each key's latest record, a key whose latest
    is a tombstone absent (whether the tombstone itself is still held or already expired),
    keyless records left out (compaction drops them). Two copies compacted at different
    moments hold different records but the same view."""
    view: dict[bytes, Message] = {}
    for m in messages:
        if m.key is None:
            continue
        if m.value is None:
            view.pop(m.key, None)
        else:
            view[m.key] = m
    return view


def view_difference(a: dict[bytes, Message], b: dict[bytes, Message]) -> int | None:
    """The lowest offset where two views differ (a key's latest record not the same on both
    sides, or held on one side only); None when they are equal."""
    found = [min(m.offset for m in (a.get(k), b.get(k)) if m is not None)
             for k in a.keys() | b.keys() if a.get(k) != b.get(k)]
    return min(found, default=None)
