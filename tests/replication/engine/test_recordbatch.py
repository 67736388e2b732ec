"""Record batch v2: encode -> decode round trips for every codec (hypothesis), xerial snappy as
the Java client sends it, the CRC and framing checks (CORRUPT_MESSAGE), and the limits on what a
batch and a request take decoded (RECORD_LIST_TOO_LARGE), compression bombs included."""

from __future__ import annotations

import contextlib
import struct
import tracemalloc

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replication.engine.recordbatch import (
    CHUNK,
    CODECS,
    RECORD_COST,
    SNAPPY,
    BatchTooLarge,
    Budget,
    CorruptRecord,
    compress,
    decode_batches,
    decompress,
    encode_batch,
    encode_rows,
)
from replication.engine.store import Message, Record

COMPRESSED = sorted(set(CODECS.values()) - {0})

_records = st.lists(
    st.builds(
        Record,
        value=st.none() | st.binary(max_size=300),  # None: a null value, apart from b""
        key=st.none() | st.binary(max_size=40),
        headers=st.lists(st.tuples(st.text(max_size=10), st.none() | st.binary(max_size=20)),
                         max_size=3).map(tuple),
        timestamp_ms=st.integers(0, 1 << 42),
    ),
    min_size=1,
    max_size=80,
)


@settings(max_examples=60, deadline=None)
@given(records=_records, codec=st.sampled_from(sorted(CODECS.values())))
def test_encode_decode_round_trip_for_every_codec(records: list[Record], codec: int) -> None:
    raw = encode_batch(records, codec=codec, producer_id=5, producer_epoch=1, base_sequence=9)
    (batch,) = decode_batches(raw)
    assert batch.records == records
    assert (batch.codec, batch.producer_id, batch.producer_epoch, batch.base_sequence) == (
        codec, 5, 1, 9)
    assert batch.last_offset_delta == len(records) - 1


def test_several_batches_in_one_records_field_decode_in_order() -> None:
    one = [Record(b"a", timestamp_ms=1)]
    two = [Record(b"b", key=b"k", timestamp_ms=2), Record(b"c", timestamp_ms=3)]
    batches = decode_batches(encode_batch(one) + encode_batch(two, codec=CODECS["lz4"]))
    assert [r.value for b in batches for r in b.records] == [b"a", b"b", b"c"]


def test_stored_messages_encode_with_their_offsets_and_timestamps() -> None:
    import uuid

    origin = uuid.uuid4()
    msgs = [Message("t", 0, 40 + i, 1000 + i, None, b"v%d" % i, (("h", b"x"),), origin, None)
            for i in range(3)]
    raw = encode_batch(msgs)
    assert struct.unpack_from(">q", raw)[0] == 40
    (batch,) = decode_batches(raw)
    assert [r.timestamp_ms for r in batch.records] == [1000, 1001, 1002]
    assert batch.records[2].headers == (("h", b"x"),)


def test_xerial_framed_snappy_decodes() -> None:
    records = [Record(b"java %d" % i, timestamp_ms=7) for i in range(50)]
    plain = encode_batch(records)
    body = plain[61:]
    blocks = [bytes(cramjam.snappy.compress_raw(body[i : i + 100]))
              for i in range(0, len(body), 100)]
    framed = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + b"".join(
        struct.pack(">i", len(b)) + b for b in blocks)
    assert decode_batches(_rebuild(plain, framed, SNAPPY))[0].records == records


def _rebuild(plain: bytes, body: bytes, codec: int) -> bytes:
    """`plain`'s header with `body` as its records section and the codec set, CRC redone."""
    from crc32c import crc32c

    attrs = struct.unpack_from(">h", plain, 21)[0] | codec
    tail = struct.pack(">h", attrs) + plain[23:61] + body
    return plain[:8] + struct.pack(">iibI", len(tail) + 9, 0, 2, crc32c(tail)) + tail


def test_bad_crc_is_corrupt() -> None:
    raw = bytearray(encode_batch([Record(b"hello", timestamp_ms=1)]))
    raw[-3] ^= 0xFF
    with pytest.raises(CorruptRecord, match="CRC32C"):
        decode_batches(bytes(raw))


@pytest.mark.parametrize("cut", [10, 61, 70])
def test_truncated_batch_is_corrupt(cut: int) -> None:
    raw = encode_batch([Record(b"x" * 50, timestamp_ms=1)] * 3)
    with pytest.raises(CorruptRecord):
        decode_batches(raw[:cut])


def test_old_magic_is_corrupt() -> None:
    raw = bytearray(encode_batch([Record(b"x", timestamp_ms=1)]))
    raw[16] = 1
    with pytest.raises(CorruptRecord, match="magic 1"):
        decode_batches(bytes(raw))


@settings(max_examples=200, deadline=None)
@given(junk=st.binary(min_size=61, max_size=400))
def test_random_bytes_never_decode_to_anything_but_corrupt(junk: bytes) -> None:
    with contextlib.suppress(CorruptRecord):
        decode_batches(junk)


def test_store_rows_encode_as_a_batch_with_their_offsets_and_headers() -> None:
    from replication.engine.store import encode_headers

    values = [b"v0", None, b"", b"v3"]  # a null value (a tombstone) and an empty one
    rows = [(7 + i, 1000 + i * 3, b"k" if i % 2 else None, values[i],
             encode_headers([("h", b"%d" % i), ("n", None)]) if i == 2 else None, b"o" * 16,
             None, 2)
            for i in range(4)]
    raw = encode_rows(rows)
    assert struct.unpack_from(">q", raw)[0] == 7
    (batch,) = decode_batches(raw)
    assert [(r.key, r.value, r.timestamp_ms) for r in batch.records] == [
        (None, b"v0", 1000), (b"k", None, 1003), (None, b"", 1006), (b"k", b"v3", 1009)]
    assert batch.records[2].headers == (("h", b"2"), ("n", None))
    assert batch.max_timestamp == 1009


@pytest.mark.parametrize("codec", COMPRESSED)
def test_a_compression_bomb_is_refused_before_it_expands(codec: int) -> None:
    bomb = compress(codec, bytes(64 << 20))  # 64 MiB of zeros, a few KB to 3 MB compressed
    tracemalloc.start()
    try:
        with pytest.raises(BatchTooLarge, match="more than 1048576 bytes"):
            decompress(codec, bomb, 1 << 20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < (1 << 20) + 2 * CHUNK + (1 << 20)  # the limit, a step, the buffer's growth


@pytest.mark.parametrize("codec", COMPRESSED)
def test_records_up_to_the_limit_decompress_whole_and_one_byte_more_is_refused(
        codec: int) -> None:
    data = bytes(range(256)) * 4096  # 1 MiB
    assert decompress(codec, compress(codec, data), len(data)) == data
    with pytest.raises(BatchTooLarge):
        decompress(codec, compress(codec, data + b"x"), len(data))


@pytest.mark.parametrize("codec", COMPRESSED)
def test_cut_compressed_records_are_corrupt_not_too_large(codec: int) -> None:
    packed = compress(codec, bytes(range(256)) * 64)
    with pytest.raises(CorruptRecord):
        decode_batches(_rebuild(encode_batch([Record(b"x", timestamp_ms=1)]),
                                packed[: len(packed) // 2], codec))


@pytest.mark.parametrize("codec", [0, *COMPRESSED])
def test_a_batch_over_the_batch_limit_is_refused_compressed_or_not(codec: int) -> None:
    raw = encode_batch([Record(bytes(300_000), timestamp_ms=1)] * 4, codec=codec)
    with pytest.raises(BatchTooLarge, match="STREAMGATE_KAFKA_MAX_BATCH_BYTES"):
        decode_batches(raw, 0, Budget(batch_bytes=1 << 20))
    (batch,) = decode_batches(raw, 0, Budget(batch_bytes=2 << 20))
    assert len(batch.records) == 4


def test_the_request_limit_spans_all_the_batches_of_a_request() -> None:
    raw = encode_batch([Record(bytes(600_000), timestamp_ms=1)], codec=CODECS["zstd"])
    budget = Budget(batch_bytes=1 << 20, request_bytes=3 << 20)
    for partition in range(5):
        decode_batches(raw, partition, budget)
    with pytest.raises(BatchTooLarge, match="STREAMGATE_KAFKA_MAX_REQUEST_BYTES"):
        decode_batches(raw, 5, budget)


def test_many_tiny_records_are_charged_for_the_objects_they_become() -> None:
    count = (1 << 20) // RECORD_COST + 1  # a few KB of zstd, over a MiB once decoded
    raw = encode_batch([Record(b"", timestamp_ms=1)] * count, codec=CODECS["zstd"])
    assert len(raw) < 64 << 10
    with pytest.raises(BatchTooLarge):
        decode_batches(raw, 0, Budget(batch_bytes=1 << 20))
