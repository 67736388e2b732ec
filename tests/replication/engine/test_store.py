"""The message store, on PostgreSQL and SQLite alike (see conftest.py)."""

import itertools
import multiprocessing
import os
import subprocess
import sys
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import FrozenInstanceError

import psycopg
import pytest

from replication.engine import Message, Record, choose_partition, create_database, open_store
from replication.engine.store import (
    STICKY_RUN,
    Misordered,
    OffsetOutOfRange,
    PartitionOutOfRange,
    StoreError,
    UnknownTopic,
    build_message,
    decode_headers,
    encode_headers,
    headers_size,
    now_ms,
)
from tests.replication.engine.conftest import _server_url, _with_db, wait_for_session

ORIGIN = uuid.UUID("0b1f6f0e-8d7c-4a6e-9d0a-5b0e0f4c2a11")
BINARY = bytes(range(256)) * 3 + b"\x00\x00tail\x00"


# Record-granular retention and logical bytes as key + value + headers: the row layouts'.
# The batch store's counterparts (whole batches, records sections) are in test_batchstore.py.
rows_only = pytest.mark.parametrize("store_url", ["postgres", "sqlite"], indirect=True)


def _values(store, stream, topic, partition, offset=0, limit=10_000):
    return [m.value for m in store.read(stream, topic, partition, offset, limit=limit)]


# --- the engine core stays Django-free ---------------------------------------------------------


def test_engine_imports_without_django():
    code = (
        "import sys; sys.modules['django'] = None\n"
        "import replication.engine, replication.engine.pg, replication.engine.sqlitestore\n"
        "import replication.engine.pgbatch, replication.engine.sqlitebatch\n"
        "import replication.engine.replicator, replication.engine.checker\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


# --- partitioner, codecs, factory --------------------------------------------------------------


def test_key_hash_is_kafkas_murmur2():
    # Partitions the Java client picks for these keys among 1000 partitions.
    expected = {b"": 681, b"a": 524, b"ab": 434, b"abc": 107, b"123456789": 566, b"\x00 ": 742}
    assert {k: choose_partition(k, 1000, 0) for k in expected} == expected


def test_key_hash_is_stable_across_processes():
    code = (
        "from replication.engine import choose_partition\n"
        "print([choose_partition(b'user-%d' % i, 7, 0) for i in range(20)])\n"
    )
    runs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "2")
    }
    assert runs == {str([choose_partition(b"user-%d" % i, 7, 0) for i in range(20)]) + "\n"}


def test_round_robin_without_key():
    assert [choose_partition(None, 3, c) for c in range(6)] == [0, 1, 2, 0, 1, 2]


def test_headers_codec_round_trips():
    headers = (("trace", b"\x00\x01\xff"), ("ünïcode", b""), ("", b"x" * 70_000))
    assert decode_headers(encode_headers(headers)) == headers
    assert encode_headers(()) is None and decode_headers(None) == ()


def test_headers_size_matches_their_encoding():
    headers = (("a", b"\x00" * 3), ("ключ", b"value"))
    assert headers_size(headers) == len(encode_headers(headers))


def test_fast_built_message_is_a_frozen_message():
    args = ("t", 1, 2, 3, None, b"v", (), ORIGIN, "p")
    built = build_message(*args)
    assert (
        type(built) is Message and built == Message(*args) and hash(built) == hash(Message(*args))
    )
    with pytest.raises(FrozenInstanceError):
        built.offset = 9


def test_open_store_refuses_unknown_schemes():
    with pytest.raises(StoreError, match="unsupported store URL"):
        open_store("mysql://x/y")


def test_create_database_is_idempotent(store_url):
    create_database(store_url)
    create_database(store_url)


# --- append and read ---------------------------------------------------------------------------


def test_round_trip_is_bit_for_bit(store, stream):
    store.ensure_topic(stream, "t", 1)
    records = [
        Record(value=BINARY, key=None, timestamp_ms=1_700_000_000_123),
        Record(value=b"", key=b"\x00key\x00", headers=(("h", b"\x00"), ("é", b"")), timestamp_ms=5),
        Record(value=b"plain", key=b"", headers=(("only", BINARY),), timestamp_ms=0),
    ]
    placed = store.append(stream, "t", records, origin=ORIGIN, producer="alice")
    assert placed == [(0, 0), (0, 1), (0, 2)]
    got = store.read(stream, "t", 0, 0)
    assert [(m.key, m.value, m.headers, m.timestamp_ms) for m in got] == [
        (r.key, r.value, r.headers, r.timestamp_ms) for r in records
    ]
    assert {(m.topic, m.partition, m.origin, m.producer) for m in got} == {
        ("t", 0, ORIGIN, "alice")
    }
    assert [m.offset for m in got] == [0, 1, 2]


def test_offsets_start_at_zero_without_gaps(store, stream):
    store.ensure_topic(stream, "t", 1)
    for size in (3, 1, 50):
        store.append(stream, "t", [Record(b"v")] * size, origin=ORIGIN)
    assert [m.offset for m in store.read(stream, "t", 0, 0)] == list(range(54))
    assert store.watermarks(stream, "t") == {0: (0, 54)}


def test_keyed_records_land_on_their_hash_partition(store, stream):
    store.ensure_topic(stream, "t", 6)
    keys = [b"a", b"abc", b"123456789", b"user-42"] * 2
    placed = store.append(stream, "t", [Record(b"v", key=k) for k in keys], origin=ORIGIN)
    # Fixed expectations: a key's partition may never change between runs or processes.
    assert [p for p, _ in placed] == [4, 3, 0, 4, 4, 3, 0, 4]
    assert [p for p, _ in placed] == [choose_partition(k, 6, 0) for k in keys]


def test_records_without_key_go_sticky_round_robin(store, stream):
    """MapR-ES's rule: a call's keyless records go to one partition, up to a run of
    STICKY_RUN, and the next run (of this call or the next) to the next partition."""
    store.ensure_topic(stream, "t", 3)
    calls = [[p for p, _ in store.append(stream, "t", [Record(b"v")] * 6, origin=ORIGIN)]
             for _ in range(3)]
    assert [len(set(parts)) for parts in calls] == [1, 1, 1]
    assert sorted(parts[0] for parts in calls) == [0, 1, 2]
    first = calls[0][0]
    assert [parts[0] for parts in calls] == [(first + i) % 3 for i in range(3)]

    big = [p for p, _ in store.append(stream, "t", [Record(b"v")] * (STICKY_RUN * 2 + 5),
                                      origin=ORIGIN)]
    runs = [(p, len(list(group))) for p, group in itertools.groupby(big)]
    after = (first + 3) % 3
    assert runs == [(after, STICKY_RUN), ((after + 1) % 3, STICKY_RUN), ((after + 2) % 3, 5)]
    mixed = store.append(stream, "t", [Record(b"v", key=b"a"), Record(b"v"), Record(b"v")],
                         origin=ORIGIN)
    assert mixed[0][0] == choose_partition(b"a", 3, 0) and mixed[1][0] == mixed[2][0] == after
    marks = store.watermarks(stream, "t")
    assert sum(high for _, high in marks.values()) == 18 + 2 * STICKY_RUN + 8


def test_given_partition_is_used(store, stream):
    store.ensure_topic(stream, "t", 3)
    placed = store.append(stream, "t", [Record(b"v", key=b"k", partition=1)], origin=ORIGIN)
    assert placed == [(1, 0)]


def test_append_follows_partitions_added_by_another_process(store, store_url, stream):
    store.ensure_topic(stream, "t", 2)
    store.append(stream, "t", [Record(b"v", key=b"abc")], origin=ORIGIN)
    other = open_store(store_url)
    try:
        other.ensure_topic(stream, "t", 6)
    finally:
        other.close()
    # Keyed records follow the new partition count at once, as every producer's do.
    assert store.append(stream, "t", [Record(b"v", key=b"abc")], origin=ORIGIN) == [(3, 0)]


def test_append_to_a_stream_dropped_by_another_process_is_refused(store, store_url, stream):
    store.ensure_topic(stream, "t", 1)
    store.append(stream, "t", [Record(b"v")], origin=ORIGIN)
    other = open_store(store_url)
    try:
        other.drop_stream(stream)
    finally:
        other.close()
    with pytest.raises(UnknownTopic):
        store.append(stream, "t", [Record(b"v")], origin=ORIGIN)


def test_partition_out_of_range_writes_nothing(store, stream):
    store.ensure_topic(stream, "t", 2)
    batch = [Record(b"ok", partition=0), Record(b"bad", partition=2)]
    with pytest.raises(PartitionOutOfRange, match=r"0\.\.1"):
        store.append(stream, "t", batch, origin=ORIGIN)
    assert store.watermarks(stream, "t") == {0: (0, 0), 1: (0, 0)}


def test_unknown_topic_is_refused(store, stream):
    with pytest.raises(UnknownTopic):
        store.append(stream, "nope", [Record(b"v")], origin=ORIGIN)
    with pytest.raises(UnknownTopic):
        store.read(stream, "nope", 0, 0)
    with pytest.raises(UnknownTopic):
        store.watermarks(stream, "nope")
    with pytest.raises(UnknownTopic):
        store.partitions(stream, "nope")


def test_failed_batch_writes_nothing_and_consumes_no_offsets(store, stream):
    store.ensure_topic(stream, "t", 1)
    store.append(stream, "t", [Record(b"before")] * 3, origin=ORIGIN)
    # The 500th record cannot be stored (its timestamp overflows a bigint): the database
    # rejects it halfway through the batch.
    batch = [Record(b"v", timestamp_ms=1)] * 499 + [Record(b"v", timestamp_ms=1 << 64)]
    with pytest.raises(Exception):  # noqa: B017 - each database words it its own way
        store.append(stream, "t", batch + [Record(b"v")] * 500, origin=ORIGIN)
    assert store.watermarks(stream, "t") == {0: (0, 3)}
    assert store.append(stream, "t", [Record(b"after")], origin=ORIGIN) == [(0, 3)]
    assert _values(store, stream, "t", 0) == [b"before"] * 3 + [b"after"]


def test_log_append_time_replaces_create_time(store, stream):
    store.ensure_topic(stream, "t", 1)
    before = now_ms()
    store.append(stream, "t", [Record(b"v", timestamp_ms=7)], origin=ORIGIN)
    store.append(stream, "t", [Record(b"v", timestamp_ms=7)], origin=ORIGIN, log_append_time=True)
    store.append(stream, "t", [Record(b"v")], origin=ORIGIN)
    created, appended, defaulted = (m.timestamp_ms for m in store.read(stream, "t", 0, 0))
    assert created == 7 and appended >= before and defaulted >= before


def _produce(url: str, stream: uuid.UUID, worker: int) -> list[tuple[int, int]]:
    store = open_store(url)
    try:
        placed = []
        for batch in range(20):
            records = [Record(f"{worker}:{batch}:{i}".encode()) for i in range(100)]
            placed += store.append(stream, "t", records, origin=ORIGIN, producer=str(worker))
        return placed
    finally:
        store.close()


def test_concurrent_appenders_from_processes_get_each_offset_once(store, store_url, stream):
    store.ensure_topic(stream, "t", 3)
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        placed = pool.starmap(_produce, [(store_url, stream, w) for w in range(4)])
    every = [pair for worker in placed for pair in worker]
    assert len(every) == len(set(every)) == 8000
    marks = store.watermarks(stream, "t")
    assert sum(high for _, high in marks.values()) == 8000
    for partition, (low, high) in marks.items():
        stored = store.read(stream, "t", partition, 0, limit=high, max_bytes=1 << 30)
        assert [m.offset for m in stored] == list(range(high)) and low == 0
    # Each producer's records keep their order within a partition.
    for worker in range(4):
        mine = [m for p in marks for m in store.read(stream, "t", p, 0, limit=10_000)]
        seqs = [m.value for m in sorted(mine, key=lambda m: m.offset) if m.producer == str(worker)]
        assert len(seqs) == 2000


def test_read_ranges_limits_and_bytes(store, stream):
    store.ensure_topic(stream, "t", 1)
    store.append(stream, "t", [Record(bytes([i]) * 100) for i in range(10)], origin=ORIGIN)
    assert [m.offset for m in store.read(stream, "t", 0, 3, limit=4)] == [3, 4, 5, 6]
    assert len(store.read(stream, "t", 0, 0, max_bytes=250)) == 2
    assert len(store.read(stream, "t", 0, 0, max_bytes=10)) == 1  # never stalls a consumer
    # The store stops at the budget (a fetch of large messages reads no more than it sends);
    # an empty message first still lets the next oversized one alone through.
    store.append(stream, "t", [Record(b""), Record(b"x" * 1000), Record(b"y")], origin=ORIGIN)
    assert [len(m.value) for m in store.read(stream, "t", 0, 10, max_bytes=10)] == [0]
    assert [len(m.value) for m in store.read(stream, "t", 0, 11, max_bytes=10)] == [1000]
    assert [len(m.value) for m in store.read(stream, "t", 0, 9, max_bytes=1100)] == [100, 0, 1000]
    assert store.read(stream, "t", 0, 13) == []
    for bad in (14, -1):
        with pytest.raises(OffsetOutOfRange, match=r"valid offsets are 0\.\.13") as caught:
            store.read(stream, "t", 0, bad)
        assert (caught.value.low, caught.value.high) == (0, 13)
    with pytest.raises(PartitionOutOfRange):
        store.read(stream, "t", 1, 0)


# --- retention ---------------------------------------------------------------------------------


@rows_only
def test_expire_removes_only_old_messages_in_bounded_batches(store, stream):
    store.ensure_topic(stream, "t", 2)
    old, young = now_ms() - 3_600_000, now_ms()
    for p in (0, 1):
        store.append(stream, "t", [Record(b"o", partition=p, timestamp_ms=old)] * 4, origin=ORIGIN)
        store.append(
            stream, "t", [Record(b"y", partition=p, timestamp_ms=young)] * 2, origin=ORIGIN
        )
    logical = store.sizes(stream)["logicalsize"]
    assert store.expire(stream, before_ms=young - 1000, batch=3) == 3
    rounds = [store.expire(stream, before_ms=young - 1000, batch=3) for _ in range(3)]
    assert rounds == [3, 2, 0]
    assert store.watermarks(stream, "t") == {0: (4, 6), 1: (4, 6)}
    assert store.sizes(stream)["logicalsize"] == logical - 8
    with pytest.raises(OffsetOutOfRange, match=r"valid offsets are 4\.\.6"):
        store.read(stream, "t", 0, 0)
    assert _values(store, stream, "t", 0, 4) == [b"y", b"y"]
    assert store.append(stream, "t", [Record(b"n", partition=0)], origin=ORIGIN) == [(0, 6)]


@rows_only
def test_expire_removes_a_prefix_and_offsets_never_restart(store, stream):
    store.ensure_topic(stream, "t", 1)
    old, young = 1_000, now_ms()
    stamps = [old, old, young, old]
    store.append(stream, "t", [Record(b"v", timestamp_ms=t) for t in stamps], origin=ORIGIN)
    # The old message after a young one stays until that one expires: no holes in a log.
    assert store.expire(stream, before_ms=young - 1) == 2
    assert store.watermarks(stream, "t") == {0: (2, 4)}
    assert store.expire(stream, before_ms=young + 1) == 2
    assert store.watermarks(stream, "t") == {0: (4, 4)}
    assert store.read(stream, "t", 0, 4) == []
    assert store.append(stream, "t", [Record(b"v")], origin=ORIGIN) == [(0, 4)]


def test_expire_passes_over_empty_partitions(store, stream, monkeypatch):
    # An idle cluster of 100,000 partitions (issue 33): retention looks only at partitions
    # holding messages, not a write transaction a partition a minute.
    store.ensure_topic(stream, "t", 8)
    store.append(stream, "t", [Record(b"o", partition=5, timestamp_ms=1_000)] * 2,
                 origin=ORIGIN)
    store.append(stream, "t", [Record(b"o", partition=6, timestamp_ms=1_000)], origin=ORIGIN)
    store.expire(stream, before_ms=now_ms())  # partition 6 emptied: 5 and 6 visited once
    visited = []
    real = store._expire_partition

    def counted(pid: int, before_ms: int, limit: int) -> int:
        visited.append(pid)
        return real(pid, before_ms, limit)

    monkeypatch.setattr(store, "_expire_partition", counted)
    store.append(stream, "t", [Record(b"o", partition=2, timestamp_ms=1_000)], origin=ORIGIN)
    assert store.expire(stream, before_ms=now_ms()) == 1
    assert len(visited) == 1
    assert store.watermarks(stream, "t")[2] == (1, 1)


def test_append_completes_while_expire_runs(store, stream):
    store.ensure_topic(stream, "t", 1)
    store.append(stream, "t", [Record(b"o" * 200, timestamp_ms=1)] * 20_000, origin=ORIGIN)
    expired: list[int] = []
    worker = threading.Thread(
        target=lambda: expired.append(store.expire(stream, before_ms=now_ms(), batch=20_000))
    )
    worker.start()
    placed = store.append(stream, "t", [Record(b"n")], origin=ORIGIN)
    worker.join(30)
    assert placed == [(0, 20_000)] and expired == [20_000]
    assert store.watermarks(stream, "t") == {0: (20_000, 20_001)}


def test_expire_mid_delete_does_not_block_appenders(pg_url, stream):
    """PostgreSQL: park an expire inside its DELETE (a test transaction holds a row lock on an
    old message) and check an append still goes through meanwhile."""
    store = open_store(pg_url)
    try:
        store.ensure_topic(stream, "t", 1)
        store.append(stream, "t", [Record(b"o", timestamp_ms=1)] * 100, origin=ORIGIN)
        with psycopg.connect(pg_url) as blocker:
            blocker.execute(
                "SELECT 1 FROM messages m JOIN partitions p ON p.id = m.pid "
                'WHERE p.stream = %s AND m."offset" = 50 FOR UPDATE OF m',
                (stream,),
            )
            worker = threading.Thread(target=store.expire, args=(stream,), kwargs={"before_ms": 2})
            worker.start()
            wait_for_session(blocker.info.dsn, "wait_event_type = 'Lock'",
                             "the expire never reached its DELETE", timeout=5, every=0.05)
            appender = threading.Thread(
                target=store.append, args=(stream, "t", [Record(b"n")]), kwargs={"origin": ORIGIN}
            )
            appender.start()
            appender.join(10)
            assert not appender.is_alive(), "append waited for the expire"
            assert worker.is_alive()
            blocker.rollback()
        worker.join(10)
        assert store.watermarks(stream, "t") == {0: (100, 101)}
    finally:
        store.close()


# --- consumer cursors --------------------------------------------------------------------------


def test_consumer_cursors_persist_across_reopen(store, store_url, stream):
    store.ensure_topic(stream, "t", 2)
    store.commit_cursor(stream, "g1", "t", 0, 5)
    store.commit_cursor(stream, "g1", "t", 0, 7)
    store.commit_cursor(stream, "g2", "t", 1, 3)
    assert store.fetch_cursor(stream, "g1", "t", 1) is None
    reopened = open_store(store_url)
    try:
        assert reopened.fetch_cursor(stream, "g1", "t", 0) == 7
        assert reopened.cursors(stream) == [("g1", "t", 0, 7), ("g2", "t", 1, 3)]
    finally:
        reopened.close()
    with pytest.raises(UnknownTopic):
        store.commit_cursor(stream, "g1", "nope", 0, 1)


def test_merged_cursors_are_clamped_to_the_end_and_never_move_back(store, stream):
    store.ensure_topic(stream, "t", 2)
    store.append(stream, "t", [Record(b"x", partition=0)] * 10, origin=stream)
    store.commit_cursor(stream, "g2", "t", 0, 8)
    merged = store.merge_cursors(stream, [
        ("g1", "t", 0, 4), ("g1", "t", 1, 6), ("g2", "t", 0, 5), ("g3", "t", 0, 25),
        ("g1", "gone", 0, 3)])
    # Past the end -> the end; behind an existing cursor -> kept; unknown topic -> skipped.
    assert merged == {("g1", "t", 0): 4, ("g1", "t", 1): 0, ("g2", "t", 0): 8,
                      ("g3", "t", 0): 10}
    store.append(stream, "t", [Record(b"y", partition=0)] * 20, origin=stream)
    assert store.merge_cursors(stream, [("g3", "t", 0, 25)]) == {("g3", "t", 0): 25}
    assert store.fetch_cursor(stream, "g3", "t", 0) == 25
    assert store.merge_cursors(stream, []) == {}


# --- replication apply -------------------------------------------------------------------------


def _origin_messages(store, stream, topic="t", partitions=1, count=10):
    store.ensure_topic(stream, topic, partitions)
    records = [
        Record(
            b"m%d" % i,
            key=b"k%d" % i,
            headers=(("n", b"%d" % i),),
            partition=i % partitions,
            timestamp_ms=1000 + i,
        )
        for i in range(count)
    ]
    store.append(stream, topic, records, origin=ORIGIN, producer="alice")
    return [m for p in range(partitions) for m in store.read(stream, topic, p, 0)]


@rows_only
def test_apply_keeps_origin_offsets_timestamps_and_origin(store, stream):
    messages = _origin_messages(store, stream)
    replica = uuid.uuid4()
    first = store.apply(replica, messages[:4], link="sf->ny")
    assert (first.ends, first.written, first.count) == ({("t", 0): 4}, {("t", 0): 4}, 4)
    # m0, k0 and the header ("n", b"0"): 2 + 2 + (6 + 1 + 1) logical bytes each.
    assert first.bytes == 4 * 12
    assert store.apply(replica, messages[4:], link="sf->ny").ends == {("t", 0): 10}
    assert store.read(replica, "t", 0, 0) == messages
    assert store.watermarks(replica, "t") == {0: (0, 10)}
    assert store.replication_cursor(replica, "sf->ny", "t", 0) == 10


@rows_only
def test_apply_trims_a_redelivered_overlap(store, stream):
    messages = _origin_messages(store, stream)
    replica = uuid.uuid4()
    assert store.apply(replica, messages[:6], link="l").bytes == 6 * 12
    again = store.apply(replica, messages[:6], link="l")
    assert (again.ends, again.count, again.bytes) == ({("t", 0): 6}, 0, 0)
    overlap = store.apply(replica, messages[3:8], link="l")
    # Only what was new counts, as for messages: the trimmed 3..5 weigh nothing.
    assert (overlap.ends, overlap.count, overlap.bytes) == ({("t", 0): 8}, 2, 2 * 12)
    assert store.read(replica, "t", 0, 0) == messages[:8]


def test_apply_refuses_a_gap_and_writes_nothing(store, stream):
    messages = _origin_messages(store, stream, partitions=2, count=20)
    replica = uuid.uuid4()
    by_part = {p: [m for m in messages if m.partition == p] for p in (0, 1)}
    store.apply(replica, by_part[0][:3], link="l")
    # Partition 1 starts fine but partition 0 skips offset 3: the whole batch is refused.
    with pytest.raises(Misordered) as caught:
        store.apply(replica, by_part[1][:5] + by_part[0][4:6], link="l")
    assert (caught.value.expected, caught.value.got) == (3, 4)
    # Not even the partition the batch would have added to the replica's topic exists.
    assert store.watermarks(replica, "t") == {0: (0, 3)}
    assert store.replication_cursor(replica, "l", "t", 0) == 3


def test_apply_refuses_holes_inside_a_batch(store, stream):
    messages = _origin_messages(store, stream)
    with pytest.raises(Misordered, match="contiguous"):
        store.apply(uuid.uuid4(), [messages[0], messages[2]], link="l")


def test_apply_checks_the_partition_end_shared_by_every_link(store, stream):
    """Fan-in diamond: one origin partition reaches the replica by two links. The second
    link's own progress is 0, yet the partition already holds 0..5: it must trim, not insert
    duplicates, and a gap is a gap whichever link would open it."""
    messages = _origin_messages(store, stream)
    replica = uuid.uuid4()
    store.apply(replica, messages[:6], link="via-b")
    by_c = store.apply(replica, messages[:8], link="via-c")
    assert (by_c.ends, by_c.written) == ({("t", 0): 8}, {("t", 0): 2})
    assert store.apply(replica, messages[:8], link="via-b").count == 0
    with pytest.raises(Misordered) as caught:
        store.apply(replica, messages[9:], link="via-b")
    assert (caught.value.expected, caught.value.got) == (8, 9)
    assert store.read(replica, "t", 0, 0) == messages[:8]


def test_apply_cursors_are_per_link_and_for_status_only(store, stream):
    messages = _origin_messages(store, stream)
    replica = uuid.uuid4()
    store.apply(replica, messages[:5], link="a")
    assert store.replication_cursor(replica, "b", "t", 0) == 0
    store.apply(replica, messages[:3], link="a")  # a late redelivery never moves it back
    assert store.replication_cursor(replica, "a", "t", 0) == 5


def _expired_origin(store, stream, expired=6, count=10):
    """An origin partition whose first `expired` messages were deleted by retention."""
    store.ensure_topic(stream, "t", 1)
    stamps = [1] * expired + [now_ms()] * (count - expired)
    for i, ts in enumerate(stamps):  # a batch each: the batch store expires whole batches
        store.append(stream, "t", [Record(b"m%d" % i, timestamp_ms=ts)], origin=ORIGIN)
    store.expire(stream, before_ms=2)
    assert store.watermarks(stream, "t") == {0: (expired, count)}
    return store.read(stream, "t", 0, expired)


def test_fresh_replica_starts_at_the_origins_low_watermark(store, stream):
    messages = _expired_origin(store, stream)
    replica = uuid.uuid4()
    applied = store.apply(replica, messages, link="l", origin_low={("t", 0): 6})
    assert (applied.ends, applied.count) == ({("t", 0): 10}, 4)
    assert store.watermarks(replica, "t") == {0: (6, 10)}
    assert store.read(replica, "t", 0, 6) == messages  # offsets kept (invariant 1)
    with pytest.raises(OffsetOutOfRange, match=r"valid offsets are 6\.\.10"):
        store.read(replica, "t", 0, 0)
    assert store.sizes(replica)["logicalsize"] == applied.bytes > 0
    if getattr(store, "DATA_TABLE", "") != "batches":  # the batch store counts records sections
        assert applied.bytes == sum(len(m.value) for m in messages)


def test_origin_low_does_not_excuse_any_other_gap(store, stream):
    messages = _expired_origin(store, stream)
    fresh = uuid.uuid4()
    # The batch must start exactly at the origin's low watermark...
    with pytest.raises(Misordered):
        store.apply(fresh, messages[1:], link="l", origin_low={("t", 0): 6})
    # ...and only a partition that never held a message may start there.
    lagging = uuid.uuid4()
    store.ensure_topic(lagging, "t", 1)
    store.append(lagging, "t", [Record(b"x", timestamp_ms=1)] * 2, origin=ORIGIN)
    store.expire(lagging, before_ms=2)  # emptied by its own retention: low == next == 2
    with pytest.raises(Misordered) as caught:
        store.apply(lagging, messages, link="l", origin_low={("t", 0): 6})
    assert (caught.value.expected, caught.value.got) == (2, 6)
    assert store.watermarks(lagging, "t") == {0: (2, 2)}
    with pytest.raises(UnknownTopic):  # the refused batch created nothing either
        store.watermarks(fresh, "t")


def test_concurrent_appliers_of_one_batch_store_it_once(store, stream):
    messages = _origin_messages(store, stream, partitions=3, count=900)
    replica = uuid.uuid4()
    start = threading.Barrier(2)
    results: list = []

    def apply() -> None:
        start.wait()
        try:
            results.append(store.apply(replica, messages, link="l"))
        except Exception as error:  # surfaced by the assertion below
            results.append(error)

    threads = [threading.Thread(target=apply) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results[0].ends == results[1].ends == {("t", p): 300 for p in range(3)}
    assert sorted(r.count for r in results) == [0, 900]
    for p in range(3):
        assert store.read(replica, "t", p, 0) == [m for m in messages if m.partition == p]


# --- topics and sizes --------------------------------------------------------------------------


def test_ensure_topic_grows_and_never_shrinks(store, stream):
    store.ensure_topic(stream, "t", 2)
    store.append(stream, "t", [Record(b"v", partition=1)], origin=ORIGIN)
    store.ensure_topic(stream, "t", 4)
    store.ensure_topic(stream, "t", 3)
    assert store.partitions(stream, "t") == 4
    assert store.watermarks(stream, "t") == {0: (0, 0), 1: (0, 1), 2: (0, 0), 3: (0, 0)}
    with pytest.raises(StoreError):
        store.ensure_topic(stream, "t", 0)


@rows_only
def test_sizes_report_topics_and_bytes(store, stream):
    store.ensure_topic(stream, "a", 1)
    store.ensure_topic(stream, "b", 2)
    store.append(stream, "a", [Record(b"x" * 100, key=b"k")] * 10, origin=ORIGIN)
    sizes = store.sizes(stream)
    assert sizes["numtopics"] == 2 and sizes["logicalsize"] == 1010
    assert sizes["physicalsize"] > 0


def test_drop_stream_removes_everything(store, stream):
    store.ensure_topic(stream, "t", 1)
    store.append(stream, "t", [Record(b"v")], origin=ORIGIN)
    store.commit_cursor(stream, "g", "t", 0, 1)
    store.drop_stream(stream)
    assert store.sizes(stream) == {"logicalsize": 0, "physicalsize": 0, "numtopics": 0}
    assert store.cursors(stream) == []
    with pytest.raises(UnknownTopic):
        store.read(stream, "t", 0, 0)


@rows_only
def test_partition_stats_describe_each_partition(store, stream):
    store.ensure_topic(stream, "stats", 2)
    store.append(
        stream,
        "stats",
        [
            Record(b"abc", partition=0, timestamp_ms=1000),
            Record(b"de", key=b"k", partition=0, timestamp_ms=2000),
        ],
        origin=stream,
    )
    store.commit_cursor(stream, "g", "stats", 0, 1)
    first, second = store.partition_stats(stream, "stats")
    assert (first.partition, first.low, first.high, first.messages) == (0, 0, 2, 2)
    assert (first.bytes, first.first_ts, first.last_ts) == (6, 1000, 2000)
    assert (first.consumers, first.min_cursor) == (1, 1)
    assert (second.high, second.first_ts, second.consumers, second.min_cursor) == (0, None, 0, None)


def test_drop_topic_removes_only_that_topics_messages(store, stream):
    for topic in ("gone", "kept"):
        store.ensure_topic(stream, topic, 1)
        store.append(stream, topic, [Record(b"x")], origin=stream)
    store.commit_cursor(stream, "g", "gone", 0, 1)
    store.drop_topic(stream, "gone")
    with pytest.raises(UnknownTopic):
        store.watermarks(stream, "gone")
    assert store.watermarks(stream, "kept") == {0: (0, 1)}
    store.ensure_topic(stream, "gone", 1)  # a topic created later under the name starts anew
    assert store.append(stream, "gone", [Record(b"y")], origin=stream) == [(0, 0)]
    assert store.fetch_cursor(stream, "g", "gone", 0) is None


def test_concurrent_store_creation_is_not_an_error():
    # Two processes opening a new cluster's store at once both create its database.
    from replication.engine.pg import create_pg_database

    server = _server_url()
    url = _with_db(server, f"sgstore_race_{os.getpid()}")
    try:
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda _: create_pg_database(url), range(4)))
    finally:
        with psycopg.connect(_with_db(server, "postgres"), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "sgstore_race_{os.getpid()}" WITH (FORCE)')
