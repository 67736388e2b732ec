"""Log compaction of the batch store (issue 31), on PostgreSQL and SQLite alike: the latest
record per key kept below the cleanable end, tombstones until the delete retention, offsets
kept (consumers see gaps, inside and between batches), batches rewritten valid, and
replicas that take compacted batches and compact to the same result."""

from __future__ import annotations

import uuid

import pytest
from crc32c import crc32c

from replication.engine import compactstore, open_store
from replication.engine import partitionmove as moving
from replication.engine.compactstore import Policy
from replication.engine.recordbatch import (
    HEAD_SIZE,
    LZ4,
    CorruptRecord,
    decode_batches,
    encode_batch,
)
from replication.engine.recordscan import entries, keyed_offsets
from replication.engine.store import Record
from tests.batches import split_batches

ORIGIN = uuid.UUID("0b1f6f0e-8d7c-4a6e-9d0a-5b0e0f4c2a11")
NOW = 10_000_000
EVERYTHING = 1 << 62  # replicas confirmed everything
POLICY = Policy(min_lag_ms=0, delete_retention_ms=1_000)


@pytest.fixture(params=["pg", "sqlite"])
def store(request):
    opened = open_store(request.getfixturevalue(f"{request.param}_batch_url"))
    yield opened
    opened.close()


@pytest.fixture
def stream() -> uuid.UUID:
    return uuid.uuid4()


def _keyed(pairs: list[tuple[bytes | None, bytes | None]], *, ts: int = 1_000,
           codec: int = 0) -> bytes:
    records = [Record(value, key=key, timestamp_ms=ts + i) for i, (key, value) in
               enumerate(pairs)]
    return encode_batch(records, codec=codec)


def _kept(store, stream) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(m.offset, m.key, m.value) for m in store.read(stream, "t", 0, 0)]


def _fetched_offsets(store, stream, offset: int = 0) -> list[list[int]]:
    """Each fetched batch's record offsets, as a Kafka client numbers them (base + delta)."""
    out = []
    for raw in split_batches(store.fetch(stream, "t", 0, offset, 1 << 20).data):
        assert crc32c(raw[21:]) == int.from_bytes(raw[17:21], "big")
        out.append([e.offset for e in entries(raw)])
    return out


def _fill(store, stream, *, codec: int = 0) -> None:
    store.ensure_topic(stream, "t", 1)
    store.append_raw(stream, "t", 0, _keyed([(b"a", b"a0"), (b"b", b"b0"), (b"c", b"c0")],
                                            codec=codec), origin=ORIGIN)
    store.append_raw(stream, "t", 0, _keyed([(b"a", b"a1"), (b"b", None)], codec=codec,
                                            ts=9_999_500), origin=ORIGIN)
    store.append_raw(stream, "t", 0, _keyed([(b"a", b"a2"), (b"d", b"d0")], codec=codec,
                                            ts=9_999_600), origin=ORIGIN)


@pytest.mark.parametrize("codec", [0, LZ4])
def test_compaction_keeps_the_latest_record_per_key_at_its_offset(store, stream, codec):
    _fill(store, stream, codec=codec)
    done = store.compact(stream, "t", 0, policy=POLICY, now_ms=NOW, replicated=EVERYTHING)
    assert (done.ran, done.end, done.removed, done.rewritten) == (True, 7, 3, 2)
    assert _kept(store, stream) == [(2, b"c", b"c0"), (4, b"b", None), (5, b"a", b"a2"),
                                    (6, b"d", b"d0")]
    # Offsets and the high watermark stay: a consumer sees the gaps (0, 1 and 3).
    assert store.watermarks(stream, "t") == {0: (0, 7)}
    assert _fetched_offsets(store, stream) == [[2], [4], [5, 6]]
    batches = decode_batches(store.fetch(stream, "t", 0, 0, 1 << 20).data)
    assert [(b.base_offset, b.last_offset_delta, b.codec) for b in batches] == [
        (0, 2, codec), (3, 1, codec), (5, 1, codec)]
    assert batches[1].records[0].value is None  # a tombstone stays null, never b""
    stats = store.partition_stats(stream, "t")[0]
    assert stats.messages == 4
    again = store.compact(stream, "t", 0, policy=POLICY, now_ms=NOW, replicated=EVERYTHING)
    assert (again.removed, again.rewritten) == (0, 0)
    assert store.append(stream, "t", [Record(b"e0", key=b"e")], origin=ORIGIN) == [(0, 7)]


def test_a_tombstone_goes_once_older_than_the_delete_retention_and_its_batch_with_it(
        store, stream):
    _fill(store, stream)
    later = 9_999_510 + POLICY.delete_retention_ms
    store.compact(stream, "t", 0, policy=POLICY, now_ms=later, replicated=EVERYTHING)
    assert _kept(store, stream) == [(2, b"c", b"c0"), (5, b"a", b"a2"), (6, b"d", b"d0")]
    assert _fetched_offsets(store, stream) == [[2], [5, 6]]
    # A read from inside the emptied range gets what follows the gap, not an empty answer.
    assert [m.offset for m in store.read(stream, "t", 0, 3, limit=1)] == [5]
    assert store.offset_for_time(stream, "t", 0, 9_999_500)[0] == 5


def test_nothing_younger_than_the_lag_nor_past_the_replicated_end_is_touched(store, stream):
    _fill(store, stream)
    lagging = Policy(min_lag_ms=NOW - 9_999_550, delete_retention_ms=1_000)
    done = store.compact(stream, "t", 0, policy=lagging, now_ms=NOW, replicated=EVERYTHING)
    assert done.end == 5  # the third batch is younger than the lag: a2 does not hide a1
    assert [o for o, _, _ in _kept(store, stream)] == [2, 3, 4, 5, 6]
    fresh = uuid.uuid4()
    _fill(store, fresh)
    done = store.compact(fresh, "t", 0, policy=POLICY, now_ms=NOW, replicated=4)
    assert done.end == 4  # a replica confirmed offsets below 4 only: the first batch alone
    assert [o for o, _, _ in _kept(store, fresh)] == list(range(7))


def test_keyless_records_are_dropped_by_the_compactor_as_kafkas_cleaner_drops_them(
        store, stream):
    store.ensure_topic(stream, "t", 1)
    store.append_raw(stream, "t", 0, _keyed([(None, b"x"), (b"k", b"v")]), origin=ORIGIN)
    store.compact(stream, "t", 0, policy=POLICY, now_ms=NOW, replicated=EVERYTHING)
    assert _kept(store, stream) == [(1, b"k", b"v")]


def test_a_truncate_inside_a_compacted_batch_keeps_the_offsets_below_it(store, stream):
    store.ensure_topic(stream, "t", 1)
    store.append_raw(stream, "t", 0, _keyed([(b"a", b"1"), (b"b", b"1"), (b"a", b"2"),
                                             (b"c", b"1"), (b"b", b"2")]), origin=ORIGIN)
    store.append_raw(stream, "t", 0, _keyed([(b"z", b"1")]), origin=ORIGIN)
    store.compact(stream, "t", 0, policy=POLICY, now_ms=NOW, replicated=EVERYTHING)
    assert [o for o, _, _ in _kept(store, stream)] == [2, 3, 4, 5]
    store.truncate(stream, "t", 0, 4)
    assert _kept(store, stream) == [(2, b"a", b"2"), (3, b"c", b"1")]
    assert _fetched_offsets(store, stream) == [[2, 3]]
    assert store.append(stream, "t", [Record(b"n", key=b"n")], origin=ORIGIN) == [(0, 4)]


@pytest.mark.parametrize("kinds", [("pg", "sqlite"), ("sqlite", "pg")], ids="->".join)
def test_replicas_take_compacted_batches_with_their_gaps_and_compact_to_the_same(
        kinds, stream, request):
    source, replica = (open_store(request.getfixturevalue(f"{kind}_batch_url"))
                       for kind in kinds)
    request.addfinalizer(source.close)
    request.addfinalizer(replica.close)
    target, late = uuid.uuid4(), uuid.uuid4()
    _fill(source, stream)
    later = 9_999_510 + POLICY.delete_retention_ms
    replica.apply_from(source, stream, target, "t", 0, 0, 5, link="l")  # confirmed below 5
    source.compact(stream, "t", 0, policy=POLICY, now_ms=later, replicated=5)
    assert [o for o, _, _ in _kept(source, stream)] == [2, 3, 5, 6]
    replica.apply_from(source, stream, target, "t", 0, 5, 7, link="l")
    source.compact(stream, "t", 0, policy=POLICY, now_ms=later, replicated=7)
    replica.compact(target, "t", 0, policy=POLICY, now_ms=later, replicated=EVERYTHING)
    assert _kept(replica, target) == _kept(source, stream) == [
        (2, b"c", b"c0"), (5, b"a", b"a2"), (6, b"d", b"d0")]
    assert replica.fetch(target, "t", 0, 0, 1 << 20) == source.fetch(stream, "t", 0, 0, 1 << 20)
    # A replica that starts late receives the compacted batches, gaps and all.
    assert replica.apply_from(source, stream, late, "t", 0, 0, 7, link="m").ends == {
        ("t", 0): 7}
    assert _kept(replica, late) == _kept(source, stream)
    assert replica.watermarks(late, "t") == source.watermarks(stream, "t") == {0: (0, 7)}
    assert replica.partition_stats(late, "t")[0].messages == 3


def test_a_replica_behind_a_batch_compaction_emptied_jumps_the_gap(stream, request):
    source = open_store(request.getfixturevalue("sqlite_batch_url"))
    replica = open_store(request.getfixturevalue("pg_batch_url"))
    request.addfinalizer(source.close)
    request.addfinalizer(replica.close)
    target = uuid.uuid4()
    _fill(source, stream)
    replica.apply_from(source, stream, target, "t", 0, 0, 3, link="l")
    later = 9_999_510 + POLICY.delete_retention_ms
    source.compact(stream, "t", 0, policy=POLICY, now_ms=later, replicated=EVERYTHING)
    # Offsets 3 and 4 are gone at the source (a tombstone past its retention and the record
    # it hid): the replica's end jumps that gap, as its origin's log has it.
    applied = replica.apply_from(source, stream, target, "t", 0, 3, 7, link="l")
    assert applied.ends == {("t", 0): 7}
    assert [o for o, _, _ in _kept(replica, target)] == [0, 1, 2, 5, 6]


def test_a_replica_moves_past_a_range_compaction_emptied(stream, request):
    source = open_store(request.getfixturevalue("pg_batch_url"))
    replica = open_store(request.getfixturevalue("sqlite_batch_url"))
    request.addfinalizer(source.close)
    request.addfinalizer(replica.close)
    target = uuid.uuid4()
    source.ensure_topic(stream, "t", 1)
    source.append_raw(stream, "t", 0, _keyed([(b"a", b"1")]), origin=ORIGIN)
    source.append_raw(stream, "t", 0, _keyed([(b"a", b"2")]), origin=ORIGIN)
    source.append_raw(stream, "t", 0, _keyed([(b"b", b"1")]), origin=ORIGIN)
    source.compact(stream, "t", 0, policy=POLICY, now_ms=NOW, replicated=EVERYTHING)
    assert replica.apply_from(source, stream, target, "t", 0, 0, 1, link="l").ends == {
        ("t", 0): 1}
    assert replica.watermarks(target, "t") == {0: (0, 1)}
    replica.apply_from(source, stream, target, "t", 0, 1, 3, link="l")
    assert _kept(replica, target) == [(1, b"a", b"2"), (2, b"b", b"1")]


def test_a_batch_holding_no_keys_latest_record_goes_without_its_records_read_again(
        store, stream, monkeypatch):
    """A partition written over and over: the rewrite pass decides its batches that hold no
    key's latest offset on their headers, and decodes only the batch holding the latest."""
    store.ensure_topic(stream, "t", 1)
    for n in range(4):
        store.append_raw(stream, "t", 0, _keyed([(b"a", b"a%d" % n), (None, b"x"),
                                                 (b"b", b"b%d" % n)]), origin=ORIGIN)
    decoded: list[int] = []
    decode = compactstore.compacted
    monkeypatch.setattr(compactstore, "compacted",
                        lambda batch, *rest: decoded.append(batch.last_offset) or
                        decode(batch, *rest))
    done = store.compact(stream, "t", 0, policy=POLICY, now_ms=NOW, replicated=EVERYTHING)
    assert decoded == [11]  # the last batch only: offsets 9 to 11
    assert (done.removed, done.rewritten) == (10, 4)
    assert _kept(store, stream) == [(9, b"a", b"a3"), (11, b"b", b"b3")]
    assert store.watermarks(stream, "t") == {0: (0, 12)}


def test_a_write_drops_only_the_batches_still_as_they_were_read(store, stream):
    """A chunk's drops in one statement (PostgreSQL) or one each (SQLite): a batch whose CRC
    changed since it was read (rewritten meanwhile) stays, the others go."""
    _fill(store, stream)
    pid = moving.pid_of(store, stream, "t", 0)
    first, second, third = [h for page in store._paged(compactstore.HEADS, compactstore.Head._make,
                                                       pid, 0, EVERYTHING) for h in page]
    stale = second._replace(crc=second.crc ^ 1)
    assert store._write_chunk(pid, [(first, None), (stale, None), (third, None)], None) == (
        first.records + third.records, first.size + third.size, 2)
    assert [o for o, _, _ in _kept(store, stream)] == [3, 4]


@pytest.mark.parametrize("codec", [0, LZ4])
def test_the_first_pass_reads_each_records_key_and_offset_as_a_full_decode_does(codec):
    """keyed_offsets decodes one-byte varints inline: every width of them (a key of 200
    bytes, offset deltas past 8,191, timestamps before the batch's first), none and empty
    keys, read as `entries` reads them."""
    keys = [None, b"", b"k" * 200, b"a"]
    records = [Record(None if i % 7 == 0 else b"v" * (i % 300), key=keys[i % 4],
                      timestamp_ms=1_000_000 + (i * 37 % 5_000) - 2_500) for i in range(9_000)]
    data = encode_batch(records, codec=codec)
    assert keyed_offsets(data) == [(e.key, e.offset) for e in entries(data)]
    with pytest.raises(CorruptRecord):
        keyed_offsets(encode_batch(records[:3])[:HEAD_SIZE + 3])  # cut in a record's header
