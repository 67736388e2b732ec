"""The batch store (issue 30), on PostgreSQL and SQLite alike: a producer's record batch
stored as it came, numbered by its base offset; fetch returns the stored bytes; replication
copies batches byte for byte, between the two databases too; retention removes whole
batches. The rules every store shares run in test_store.py on both batch stores too."""

from __future__ import annotations

import sqlite3
import uuid

import psycopg
import pytest
from crc32c import crc32c

from replication.engine import open_store
from replication.engine.pgbatch.store import ByteaArray
from replication.engine.recordbatch import (
    LZ4,
    TIMESTAMP_LOG_APPEND,
    BatchTooLarge,
    Budget,
    CorruptRecord,
    decode_batches,
    encode_batch,
)
from replication.engine.store import (
    Message,
    Misordered,
    OffsetOutOfRange,
    Record,
    ReturnToOrigin,
    UnknownTopic,
    now_ms,
)
from replication.engine.stored import check_batches
from replication.engine.txnstate import fetched_below
from tests.batches import split_batches
from tests.replication.engine.conftest import _open_net, sqlite_rows

ORIGIN = uuid.UUID("0b1f6f0e-8d7c-4a6e-9d0a-5b0e0f4c2a11")


@pytest.fixture(params=["postgres", "sqlite"])
def batch_url(request: pytest.FixtureRequest) -> str:
    """A batch store's URL: a PostgreSQL database, a SQLite file."""
    return request.getfixturevalue(f"{_prefix(request.param)}_batch_url")


@pytest.fixture
def store(batch_url):
    opened = open_store(batch_url)
    yield opened
    opened.close()


@pytest.fixture
def stream() -> uuid.UUID:
    return uuid.uuid4()


def _batch(n: int, *, start: int = 0, codec: int = 0, ts: int = 1_000, pid: int = -1,
           seq: int = -1, value: bytes = b"v") -> bytes:
    records = [Record(value + b"%d" % i, timestamp_ms=ts + i) for i in range(start, start + n)]
    return encode_batch(records, codec=codec, producer_id=pid, producer_epoch=0 if pid >= 0
                        else -1, base_sequence=seq)


def _crc_ok(data: bytes) -> bool:
    return all(crc32c(b[21:]) == int.from_bytes(b[17:21], "big") for b in split_batches(data))


def test_a_store_keeps_the_layout_it_was_made_with(pg_batch_url, pg_url):
    for url, asked, kept in ((pg_batch_url, "rows", "batches"), (pg_url, "rows", "messages"),
                             (pg_url, "batches", "messages")):
        opened = open_store(url, layout=asked)
        table = opened.DATA_TABLE
        opened.close()
        assert table == kept


def test_a_sqlite_file_keeps_its_layout_and_a_new_one_gets_the_one_asked(tmp_path):
    rows, batches, default = (f"sqlite:///{tmp_path / name}.sqlite3"
                              for name in ("rows", "batches", "default"))
    for url, asked, kept in ((rows, "rows", "messages"), (batches, "batches", "batches"),
                             (rows, "batches", "messages"), (batches, "rows", "batches"),
                             (rows, None, "messages"), (default, None, "batches")):
        opened = open_store(url, layout=asked)
        opened.ensure_topic(ORIGIN, "t", 1)
        opened.append(ORIGIN, "t", [Record(b"v")], origin=ORIGIN)
        table, keeps = opened.DATA_TABLE, opened.KEEPS_BATCHES
        opened.close()
        assert (table, keeps) == (kept, kept == "batches")
    with sqlite3.connect(tmp_path / "batches.sqlite3") as conn:
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
    conn.close()
    assert "batches" in tables and "messages" not in tables


def test_a_produced_batch_is_stored_as_sent_with_only_its_base_offset_written(store, stream):
    store.ensure_topic(stream, "t", 1)
    first, second = _batch(3), _batch(2, start=3, codec=LZ4)
    assert store.append_raw(stream, "t", 0, first + second, origin=ORIGIN) == [(0, 3), (3, 2)]
    fetched = store.fetch(stream, "t", 0, 0, 1 << 20)
    data, records = fetched.data, fetched.records
    assert records == 5 and store.watermarks(stream, "t") == {0: (0, 5)}
    stored = split_batches(data)
    assert stored[0][8:] == first[8:] and stored[1][8:] == second[8:]  # the CRC too
    assert [int.from_bytes(b[:8], "big") for b in stored] == [0, 3]
    assert [m.value for m in store.read(stream, "t", 0, 1)] == [b"v1", b"v2", b"v3", b"v4"]


def test_fetch_returns_whole_batches_the_first_always_then_while_they_fit(store, stream):
    store.ensure_topic(stream, "t", 1)
    for start in (0, 10, 20):
        store.append_raw(stream, "t", 0, _batch(10, start=start), origin=ORIGIN)
    one = len(store.fetch(stream, "t", 0, 0, 1).data)
    assert len(split_batches(store.fetch(stream, "t", 0, 15, 1).data)) == 1  # the batch holding 15
    assert len(split_batches(store.fetch(stream, "t", 0, 5, 2 * one).data)) == 2
    assert store.fetch(stream, "t", 0, 30, 1 << 20) == ((), 0, 0)
    assert store.fetch(stream, "t", 0, 15, 1).records == 5
    records = [r for b in decode_batches(store.fetch(stream, "t", 0, 0, 1 << 20).data)
               for r in b.records]
    assert [r.value for r in records] == [b"v%d" % i for i in range(30)]


def test_a_fetch_of_several_partitions_at_once_reads_what_each_fetch_would(store, stream):
    store.ensure_topic(stream, "t", 3)
    for start in (0, 10, 20):
        store.append_raw(stream, "t", 0, _batch(10, start=start), origin=ORIGIN)
    store.append_raw(stream, "t", 2, _batch(4), origin=ORIGIN)
    one = len(store.fetch(stream, "t", 0, 0, 1).data)
    reads = [(0, 15, 2 * one), (1, 0, 1 << 20), (2, 1, 1 << 20), (7, 0, 1 << 20)]
    for committed in (False, True):
        marks, got, views = store.fetch_partitions(stream, "t", reads, committed)
        assert marks == store.watermarks(stream, "t") == {0: (0, 30), 1: (0, 0), 2: (0, 4)}
        assert got[:3] == [store.fetch(stream, "t", p, o, n) for p, o, n in reads[:3]]
        assert got[0].records == 15 and got[2].records == 3
        assert got[3] == ((), 0, 0)  # a partition the topic lacks: nothing
        assert views[:3] == [(30, []), (0, []), (4, [])]  # no transaction: all stable
    with pytest.raises(UnknownTopic):
        store.fetch_partitions(stream, "nope", [(0, 0, 1)])


def test_corrupt_or_oversized_batches_are_refused_and_nothing_is_written(store, stream):
    store.ensure_topic(stream, "t", 1)
    bad = bytearray(_batch(3))
    bad[-1] ^= 0xFF
    with pytest.raises(CorruptRecord, match="CRC32C"):
        store.append_raw(stream, "t", 0, _batch(2) + bytes(bad), origin=ORIGIN)
    bomb = _batch(1, codec=LZ4, value=b"\x00" * 1_000_000)
    # The refusal names the setting to raise, as the decoding path's does.
    with pytest.raises(BatchTooLarge, match="more than 100000 bytes decoded "
                                            r"\(STREAMGATE_KAFKA_MAX_BATCH_BYTES\): send smaller"):
        check_batches(bomb, Budget(batch_bytes=100_000))
    assert store.watermarks(stream, "t") == {0: (0, 0)}


def test_log_append_time_rewrites_the_timestamps_and_the_crc_as_kafka_does(store, stream):
    store.ensure_topic(stream, "t", 1)
    before = now_ms()
    store.append_raw(stream, "t", 0, _batch(3, ts=5), origin=ORIGIN, log_append_time=True)
    data = store.fetch(stream, "t", 0, 0, 1 << 20).data
    assert _crc_ok(data)
    assert int.from_bytes(data[21:23], "big") & TIMESTAMP_LOG_APPEND
    stamps = {m.timestamp_ms for m in store.read(stream, "t", 0, 0)}
    assert len(stamps) == 1 and stamps.pop() >= before


def test_an_idempotent_producers_retried_batch_is_written_once(store, stream):
    store.ensure_topic(stream, "t", 1)
    batch = _batch(4, pid=7, seq=0)
    assert store.append_raw(stream, "t", 0, batch, origin=ORIGIN) == [(0, 4)]
    assert store.append_raw(stream, "t", 0, batch, origin=ORIGIN) == [(0, 4)]
    assert store.append_raw(stream, "t", 0, _batch(2, pid=7, seq=4), origin=ORIGIN) == [(4, 2)]
    assert store.watermarks(stream, "t") == {0: (0, 6)}


def test_records_appended_by_rest_become_one_batch_a_partition(store, stream):
    store.ensure_topic(stream, "t", 2)
    records = [Record(b"a%d" % i, partition=i % 2, key=b"k", headers=(("h", None),))
               for i in range(6)]
    assert store.append(stream, "t", records, origin=ORIGIN) == [
        (0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]
    data = store.fetch(stream, "t", 0, 0, 1 << 20).data
    assert len(split_batches(data)) == 1 and _crc_ok(data)
    (message,) = store.read(stream, "t", 1, 2)
    assert (message.value, message.key, message.headers) == (b"a5", b"k", (("h", None),))


def test_logical_bytes_count_the_records_sections_uncompressed(store, stream):
    store.ensure_topic(stream, "t", 1)
    plain = _batch(100, value=b"x" * 200)
    store.append_raw(stream, "t", 0, plain, origin=ORIGIN)
    store.append_raw(stream, "t", 0, _batch(100, codec=LZ4, value=b"x" * 200), origin=ORIGIN)
    (stats,) = store.partition_stats(stream, "t")
    assert stats.bytes == 2 * (len(plain) - 61) and stats.messages == 200
    assert store.sizes(stream)["logicalsize"] == stats.bytes


def test_retention_removes_whole_batches_a_young_record_keeps_its_batch(store, stream):
    store.ensure_topic(stream, "t", 1)
    old, young = now_ms() - 3_600_000, now_ms()
    store.append(stream, "t", [Record(b"o", timestamp_ms=old)] * 4, origin=ORIGIN)
    store.append(stream, "t", [Record(b"o", timestamp_ms=old), Record(b"y", timestamp_ms=young)],
                 origin=ORIGIN)
    assert store.expire(stream, before_ms=young - 1000) == 4
    assert store.watermarks(stream, "t") == {0: (4, 6)}
    assert [m.value for m in store.read(stream, "t", 0, 4)] == [b"o", b"y"]


def test_a_purge_inside_a_batch_hides_what_is_below_it(store, stream):
    store.ensure_topic(stream, "t", 1)
    store.append_raw(stream, "t", 0, _batch(10), origin=ORIGIN)
    store.trim(stream, "t", 0, 4)
    assert store.watermarks(stream, "t") == {0: (4, 10)}
    with pytest.raises(OffsetOutOfRange):
        store.read(stream, "t", 0, 2)
    assert [m.offset for m in store.read(stream, "t", 0, 4)] == list(range(4, 10))


def test_truncate_inside_a_batch_keeps_the_records_below_it(store, stream):
    store.ensure_topic(stream, "t", 1)
    store.append_raw(stream, "t", 0, _batch(10), origin=ORIGIN)
    store.append_raw(stream, "t", 0, _batch(5, start=10), origin=ORIGIN)
    assert store.truncate(stream, "t", 0, 7) == 8
    assert store.watermarks(stream, "t") == {0: (0, 7)}
    assert [m.value for m in store.read(stream, "t", 0, 0)] == [b"v%d" % i for i in range(7)]
    assert _crc_ok(store.fetch(stream, "t", 0, 0, 1 << 20).data)
    assert store.append(stream, "t", [Record(b"n")], origin=ORIGIN) == [(0, 7)]


@pytest.mark.parametrize("kinds", [("postgres", "postgres"), ("sqlite", "sqlite"),
                                   ("postgres", "sqlite"), ("sqlite", "postgres")],
                         ids="->".join)
def test_replication_copies_batches_byte_for_byte(kinds, stream, request):
    source, replica = (open_store(request.getfixturevalue(f"{_prefix(kind)}_batch_url"))
                       for kind in kinds)
    request.addfinalizer(source.close)
    request.addfinalizer(replica.close)
    target = uuid.uuid4()
    source.ensure_topic(stream, "t", 1)
    for start in (0, 5, 10):
        source.append_raw(stream, "t", 0, _batch(5, start=start, codec=LZ4), origin=ORIGIN)
    applied = replica.apply_from(source, stream, target, "t", 0, 0, 10, link="l")
    assert (applied.ends, applied.count) == ({("t", 0): 10}, 10)
    again = replica.apply_from(source, stream, target, "t", 0, 0, 15, link="l")
    assert again.count == 5  # a redelivered range: only what the replica lacks
    assert replica.fetch(target, "t", 0, 0, 1 << 20) == source.fetch(stream, "t", 0, 0, 1 << 20)
    assert replica.partition_stats(target, "t") == source.partition_stats(stream, "t")
    with pytest.raises(Misordered):
        other = uuid.uuid4()
        replica.ensure_topic(other, "t", 1)
        replica.append(other, "t", [Record(b"x")], origin=other)
        replica.apply_from(source, stream, other, "t", 0, 5, 15, link="m")


@pytest.mark.parametrize("kinds", [("postgres", "sqlite"), ("sqlite", "postgres")],
                         ids="->".join)
def test_replication_between_databases_takes_the_tail_of_a_batch_the_replica_ends_inside(
        kinds, stream, request):
    source, replica = (open_store(request.getfixturevalue(f"{_prefix(kind)}_batch_url"))
                       for kind in kinds)
    request.addfinalizer(source.close)
    request.addfinalizer(replica.close)
    target = uuid.uuid4()
    source.ensure_topic(stream, "t", 1)
    source.append_raw(stream, "t", 0, _batch(10), origin=ORIGIN)
    replica.apply(target, source.read(stream, "t", 0, 0, limit=4), link="l")
    applied = replica.apply_from(source, stream, target, "t", 0, 4, 10, link="l")
    assert (applied.ends, applied.count) == ({("t", 0): 10}, 6)
    assert replica.read(target, "t", 0, 0) == source.read(stream, "t", 0, 0)
    assert _crc_ok(replica.fetch(target, "t", 0, 0, 1 << 20).data)
    with pytest.raises(ReturnToOrigin):
        source.apply_from(replica, target, ORIGIN, "t", 0, 0, 10, link="back")


def _prefix(kind: str) -> str:
    return "pg" if kind == "postgres" else "sqlite"


@pytest.fixture
def batch_net(pg_batch_url, sqlite_batch_url):
    """Streams on a PostgreSQL batch store and a SQLite one, in turn."""
    yield from _open_net([pg_batch_url, sqlite_batch_url])


def test_the_replicator_copies_batches_between_postgresql_and_sqlite_both_ways(batch_net):
    net = batch_net
    net.add("pg", "lite")
    for _ in range(3):  # a batch per partition each
        net.produce("pg", "a", 100)
        net.produce("lite", "b", 100)
    assert net.pump("pg", "lite") == 300 and net.pump("lite", "pg") == 300
    net.assert_replica("pg", "lite")
    net.assert_replica("lite", "pg")
    for topic, src, dst in (("a", "pg", "lite"), ("b", "lite", "pg")):
        for p in range(3):
            assert net.store(dst).fetch(net.id(dst), topic, p, 0, 1 << 30) == net.store(
                src).fetch(net.id(src), topic, p, 0, 1 << 30)


@pytest.fixture(params=["postgres", "sqlite"])
def mixed_layout_net(request, sqlite_batch_url, tmp_path):
    """A SQLite batch store and a row store (PostgreSQL's or SQLite's), in turn."""
    rows = (request.getfixturevalue("pg_url") if request.param == "postgres"
            else sqlite_rows(tmp_path / "rows.sqlite3"))
    yield from _open_net([sqlite_batch_url, rows])


def test_replication_between_a_sqlite_batch_store_and_a_row_store_goes_as_messages(
        mixed_layout_net):
    net = mixed_layout_net
    net.add("batches", "rows")
    for _ in range(2):
        net.produce("batches", "a", 50)
        net.produce("rows", "b", 50)
    assert net.pump("batches", "rows") == 100 and net.pump("rows", "batches") == 100
    net.assert_replica("batches", "rows")
    net.assert_replica("rows", "batches")
    assert (net.store("batches").DATA_TABLE, net.store("rows").DATA_TABLE) == (
        "batches", "messages")


def _three_batches(store, stream) -> None:
    store.ensure_topic(stream, "t", 1)
    for start in (0, 5, 10):
        store.append_raw(stream, "t", 0, _batch(5, start=start), origin=ORIGIN)


def test_a_fresh_replica_starts_with_the_batch_holding_the_origins_low_watermark(store, stream):
    _three_batches(store, stream)
    store.trim(stream, "t", 0, 7)  # the low watermark stops inside the second batch
    replica = uuid.uuid4()
    applied = store.apply_from(store, stream, replica, "t", 0, 0, 15, link="l")
    assert (applied.ends, applied.count) == ({("t", 0): 15}, 10)
    assert store.watermarks(replica, "t") == {0: (5, 15)}
    assert store.fetch(replica, "t", 0, 5, 1 << 20) == store.fetch(stream, "t", 0, 5, 1 << 20)


def test_replicated_messages_of_two_origins_in_one_run_keep_each_its_origin(store, stream):
    """A replica applying messages read through a row store or a store router (the chaos soak
    with newyork on two store groups, issue 33): a run that spans a failover holds the old
    origin's messages then the new one's, and each keeps its own origin and producer."""
    other = uuid.uuid4()
    who = [(ORIGIN, "p1"), (ORIGIN, "p1"), (other, None), (other, None), (ORIGIN, "p2")]
    messages = [Message("t", 0, offset, 1_000 + offset, None, b"v%d" % offset, (), origin,
                        producer) for offset, (origin, producer) in enumerate(who)]
    applied = store.apply(stream, messages, link="l")
    assert (applied.ends, applied.count) == ({("t", 0): 5}, 5)
    got = store.read(stream, "t", 0, 0, limit=10)
    assert [(m.origin, m.producer) for m in got] == who
    assert [m.value for m in got] == [m.value for m in messages]


def test_a_batch_store_replica_refuses_batches_that_would_leave_a_gap(store, stream):
    _three_batches(store, stream)
    fresh = uuid.uuid4()
    with pytest.raises(Misordered) as caught:  # the origin still holds 0..4
        store.apply_from(store, stream, fresh, "t", 0, 5, 15, link="l")
    assert (caught.value.expected, caught.value.got) == (0, 5)
    with pytest.raises(UnknownTopic):  # the refused batch created nothing
        store.watermarks(fresh, "t")
    store.trim(stream, "t", 0, 7)
    lagging = uuid.uuid4()  # held 0..1, emptied by its own retention: 2..4 may still come
    store.ensure_topic(lagging, "t", 1)
    store.append(lagging, "t", [Record(b"x")] * 2, origin=ORIGIN)
    store.trim(lagging, "t", 0, 2)
    with pytest.raises(Misordered) as caught:
        store.apply_from(store, stream, lagging, "t", 0, 2, 15, link="l")
    assert (caught.value.expected, caught.value.got) == (2, 5)
    assert store.watermarks(lagging, "t") == {0: (2, 2)}


def _transactional(n: int, pid: int, seq: int) -> list:
    """A transactional producer's batch of `n` records, checked as the listener checks it."""
    data = bytearray(encode_batch([Record(b"t%d" % i, timestamp_ms=1_000) for i in range(n)],
                                  producer_id=pid, producer_epoch=0, base_sequence=seq))
    data[22] |= 0x10  # attributes' transactional bit (the CRC covers it: computed again)
    data[17:21] = crc32c(bytes(data[21:])).to_bytes(4, "big")
    return check_batches(bytes(data), transactional=True)


@pytest.mark.parametrize("kinds", [("postgres", "postgres"), ("postgres", "sqlite")],
                         ids="->".join)
def test_a_replica_keeps_the_origins_transactions_so_read_committed_reads_alike(
        kinds, stream, request):
    source, replica = (open_store(request.getfixturevalue(f"{_prefix(kind)}_batch_url"))
                       for kind in kinds)
    request.addfinalizer(source.close)
    request.addfinalizer(replica.close)
    target = uuid.uuid4()
    source.ensure_topic(stream, "t", 1)
    source.append_batches(stream, "t", {0: _transactional(3, 41, 0)}, origin=ORIGIN)
    assert source.write_marker(stream, "t", 0, producer_id=41, epoch=0, commit=False,
                               origin=ORIGIN) == 3
    assert source.write_marker(stream, "t", 0, producer_id=41, epoch=0, commit=False,
                               origin=ORIGIN) is None  # written once, however often asked
    source.append_batches(stream, "t", {0: _transactional(2, 41, 3)}, origin=ORIGIN)
    source.append_batches(stream, "t", {0: _transactional(2, 42, 0)}, origin=ORIGIN)
    source.write_marker(stream, "t", 0, producer_id=41, epoch=0, commit=True, origin=ORIGIN)
    origin_view = source.txn_view(stream, "t", 0, 0, 10)
    assert origin_view == (6, [(41, 0)])  # 42's transaction is open from offset 6
    replica.apply_from(source, stream, target, "t", 0, 0, 10, link="l")
    assert replica.txn_view(target, "t", 0, 0, 10) == origin_view
    assert replica.fetch(target, "t", 0, 0, 1 << 20) == source.fetch(stream, "t", 0, 0, 1 << 20)


def test_a_promoted_replica_aborts_the_transactions_left_open_and_a_truncate_reopens_them(
        store, stream):
    target = uuid.uuid4()
    store.ensure_topic(stream, "t", 1)
    store.append_batches(stream, "t", {0: _transactional(3, 51, 0)}, origin=ORIGIN)
    store.apply_from(store, stream, target, "t", 0, 0, 3, link="l")
    assert store.txn_view(target, "t", 0, 0, 3) == (0, [])  # open: read_committed waits
    assert store.abort_open(target, "t") == 1
    assert store.abort_open(target, "t") == 0  # once
    assert store.txn_view(target, "t", 0, 0, 4) == (4, [(51, 0)])
    assert store.truncate(target, "t", 0, 3) == 1  # the marker goes: the range is open again
    assert store.txn_view(target, "t", 0, 0, 3) == (0, [])
    assert store.truncate(target, "t", 0, 0) == 3
    assert store.txn_view(target, "t", 0, 0, 0) == (0, [])
    store.append(target, "t", [Record(b"plain")], origin=target)
    assert store.txn_view(target, "t", 0, 0, 1) == (1, [])  # no range left behind


def test_a_read_committed_fetch_of_several_partitions_stops_where_one_by_one_does(store, stream):
    store.ensure_topic(stream, "t", 2)
    store.append_batches(stream, "t", {0: _transactional(3, 61, 0)}, origin=ORIGIN)
    store.write_marker(stream, "t", 0, producer_id=61, epoch=0, commit=False, origin=ORIGIN)
    store.append_raw(stream, "t", 0, _batch(2), origin=ORIGIN)  # 4, 5
    store.append_batches(stream, "t", {0: _transactional(2, 62, 0)}, origin=ORIGIN)  # open, 6
    store.append_raw(stream, "t", 1, _batch(2), origin=ORIGIN)
    reads = [(0, 0, 1 << 20), (0, 5, 1 << 20), (1, 0, 1 << 20), (0, 6, 1 << 20)]
    marks, got, views = store.fetch_partitions(stream, "t", reads, committed=True)
    for (partition, offset, n), found, view in zip(reads, got, views, strict=True):
        high = marks[partition][1]
        expected = store.txn_view(stream, "t", partition, offset, high)
        assert view == expected
        if offset < view.stable:
            assert found == fetched_below(store.fetch(stream, "t", partition, offset, n),
                                          view.stable)
    assert views[0] == (6, [(61, 0)]) and got[0].records == 6  # the open one held back
    assert views[1] == (6, []) and views[2] == (2, [])


def test_the_batches_bytes_go_as_one_ready_array_that_postgresql_reads_as_psycopgs(pg_url):
    """The append's bytea[] of batches is built in one join (no per-element dump and second
    copy); PostgreSQL reads it exactly as the list psycopg would have dumped."""
    items = [b"", b"\x00\x01batch", bytes(range(256)) * 40]
    with psycopg.connect(pg_url) as conn:
        ours, theirs = conn.cursor(binary=True).execute(
            "SELECT %b::bytea[], %b::bytea[]", (ByteaArray(items), items)).fetchone()
        empty = conn.cursor(binary=True).execute("SELECT cardinality(%b::bytea[])",
                                                 (ByteaArray([]),)).fetchone()[0]
    assert ours == theirs == items and empty == 0
