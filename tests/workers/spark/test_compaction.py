"""A large partition's log compaction (issue 31) on a real local Spark session, over real
PostgreSQL batch stores: the partition ends exactly as the worker's own compaction leaves it
(same batches byte for byte, so the same records at the same offsets, tombstone and keyless
rules included; same counters and compaction record); a second pass on Spark removes
nothing; a job that died half-way, run again, loses nothing, even when the ranges that
finished dropped tombstones whose older values sat in ranges that did not; a paced pass
keeps to its rate as a whole."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from replication.engine import partitionmove as moving
from replication.engine.compaction import Rules
from replication.engine.compactstore import Policy
from replication.engine.factory import open_store
from replication.engine.pacing import BURST_SECONDS, Pacing
from replication.engine.recordbatch import LZ4, encode_batch
from replication.engine.store import Record
from tests.replication.engine.conftest import _scratch_database
from workers.compaction import Progress, SparkPasses
from workers.spark import compaction as spark_compaction
from workers.spark.compaction import (
    Partition,
    compact_on_spark,
    keys_on_spark,
    range_rewrite,
    rewrite_on_spark,
    stages,
)

STREAM, ORIGIN = uuid.uuid4(), uuid.uuid4()
NOW = 10_000_000
POLICY = Policy(min_lag_ms=0, delete_retention_ms=1_000)
EVERYTHING = 1 << 62
SPLIT = 40  # offsets per task: several tasks for a small partition


@pytest.fixture
def stores() -> Iterator[tuple]:
    """Two batch stores holding the same partition: one compacted in process, one on Spark."""
    made = [_scratch_database("batches") for _ in range(2)]
    urls = [next(m) for m in made]
    opened = [open_store(url) for url in urls]
    for store in opened:
        fill(store)
    yield (*opened, urls[1])
    for store in opened:
        store.close()
    for m in made:
        next(m, None)


def fill(store) -> None:
    """Keys overwritten across batches and ranges, tombstones old (past the retention) and
    young, keyless records, both codecs."""
    store.ensure_topic(STREAM, "t", 1)
    for n in range(30):
        pairs = [(b"k%d" % ((n * 7 + i) % 11), b"v%d.%d" % (n, i)) for i in range(5)]
        if n % 6 == 5:
            pairs[1] = (b"k%d" % (n % 11), None)  # a tombstone
        if n == 4:
            pairs[2] = (None, b"keyless")
        ts = 9_999_600 if n >= 27 else 1_000 + n  # the last batches' tombstones are young
        records = [Record(v, key=k, timestamp_ms=ts + i) for i, (k, v) in enumerate(pairs)]
        store.append_raw(STREAM, "t", 0, encode_batch(records, codec=LZ4 if n % 2 else 0),
                         origin=ORIGIN)
    # A key whose value sits in the first range and whose old tombstone sits in the last.
    store.append_raw(STREAM, "t", 0, encode_batch([Record(None, key=b"k0", timestamp_ms=2_000)]),
                     origin=ORIGIN)


def compact(store, passes=None):
    return store.compact(STREAM, "t", 0, policy=POLICY, now_ms=NOW, replicated=EVERYTHING,
                         passes=passes)


def held(store) -> tuple:
    """Everything a reader or the store's counters tell about the partition."""
    return (store.fetch(STREAM, "t", 0, 0, 1 << 24).data, store.watermarks(STREAM, "t"),
            store.partition_stats(STREAM, "t")[0], store.compaction_state(STREAM))


def on_spark() -> SparkPasses:
    return SparkPasses(min_bytes=0, split=SPLIT)


def test_a_partition_compacted_on_spark_ends_as_the_workers_own_compaction_leaves_it(
        spark, stores):
    here, there, _ = stores
    assert held(here) == held(there)
    done_here, done_there = compact(here), compact(there, on_spark())
    assert done_here.removed > 0 and done_here.reclaimed > 0
    assert (done_there.end, done_there.removed, done_there.reclaimed) == (
        done_here.end, done_here.removed, done_here.reclaimed)
    assert held(here) == held(there)
    kept = {m.key for m in there.read(STREAM, "t", 0, 0, limit=1000)}
    assert None not in kept and b"k0" not in kept  # keyless dropped, k0's old tombstone gone


def test_a_second_pass_on_spark_removes_nothing_more(spark, stores):
    _, there, _ = stores
    compact(there, on_spark())
    before = held(there)[:3]
    again = compact(there, on_spark())
    assert (again.removed, again.reclaimed, again.rewritten) == (0, 0, 0)
    assert held(there)[:3] == before


def test_a_small_partition_is_compacted_in_the_worker(spark, stores):
    here, there, _ = stores
    passes = SparkPasses(min_bytes=1 << 40, split=SPLIT)
    assert not passes.takes(there, 1, 1 << 20)
    compact(here), compact(there, passes)
    assert held(here) == held(there)


def test_a_paced_spark_pass_keeps_to_the_rate_as_a_whole_and_ends_as_the_workers(spark, stores):
    """Pass 1 reads the whole partition, and pass 2's first stage reads or drops every batch:
    twice its bytes over the rate at least, whatever the tasks running at once (each takes
    its share)."""
    here, there, _ = stores
    size = len(held(there)[0])
    rate = size / 3  # three seconds a pass
    passes = SparkPasses(min_bytes=0, split=SPLIT, pacing=Pacing(rate, 5))
    began = time.monotonic()
    done = compact(there, passes)
    assert time.monotonic() - began >= 2 * size / rate - 4 * BURST_SECONDS
    # end, removed, reclaimed: Spark's two stages may each count a batch they changed.
    assert compact(here)[:3] == done[:3]
    assert held(here) == held(there)


@pytest.mark.parametrize("died_in", [0, 1])
def test_a_job_run_again_over_a_half_rewritten_partition_loses_nothing(spark, stores, died_in):
    """The job died in pass 2's stage `died_in`, the stages before it complete, only its last
    range done in that stage: k0's old tombstone (last range) dropped in stage 1 while its
    older values sit in earlier ranges would bring k0 back."""
    here, there, url = stores
    compact(here)
    end = there.watermarks(STREAM, "t")[0][1]
    part = Partition(url, moving.pid_of(there, STREAM, "t", 0))
    rules = Rules(end, NOW - POLICY.delete_retention_ms)
    keys = keys_on_spark(spark, part, 0, end, SPLIT)
    last = (end - 1) // SPLIT * SPLIT
    for n, stage in enumerate(stages(rules)[:died_in + 1]):
        rewrite_on_spark(spark, part, last if n == died_in else 0, end, keys, stage, SPLIT)
    # A task retried after it committed changes nothing.
    stage = stages(rules)[died_in]
    assert list(range_rewrite(part, spark.broadcast(keys), stage, iter([(last, end)]))) == [
        (0, 0, 0)]
    compact(there, on_spark())  # the job run again
    # The records and the counters as one uninterrupted pass leaves them (the compaction
    # record counts what the recorded pass removed: the dead job recorded nothing).
    assert held(here)[:3] == held(there)[:3]


def test_pass_two_runs_in_the_driver_when_the_batches_it_must_read_are_few(
        spark, stores, monkeypatch):
    """Pass 1 on Spark, then pass 2 here: the batches holding a key's latest record are under
    `here_below` bytes. No Spark job rewrites, and the partition ends as the worker leaves it."""
    here, there, url = stores
    jobs: list[Rules] = []
    rewrite = spark_compaction.rewrite_on_spark
    monkeypatch.setattr(spark_compaction, "rewrite_on_spark",
                        lambda *args: jobs.append(args[5]) or rewrite(*args))
    end = there.watermarks(STREAM, "t")[0][1]
    part = Partition(url, moving.pid_of(there, STREAM, "t", 0))
    rules = Rules(end, NOW - POLICY.delete_retention_ms)
    done = compact_on_spark(spark, part, 0, end, rules, SPLIT, here_below=1 << 30)
    assert jobs == []
    assert compact(here)[1:3] == done[:2]
    assert held(here)[:3] == held(there)[:3]
    compact_on_spark(spark, part, 0, end, rules, SPLIT, here_below=1)  # over it: on Spark
    assert jobs == stages(rules)


def test_a_spark_compaction_runs_a_task_a_core_reports_them_and_notes_them_in_the_store(
        spark, stores):
    _, there, url = stores
    pid = moving.pid_of(there, STREAM, "t", 0)
    seen: list[tuple[int, int]] = []
    end = there.watermarks(STREAM, "t")[0][1]
    compact_on_spark(spark, Partition(url, pid), 0, end, Rules(end, 0), 10,
                     progress=lambda done, total: seen.append((done, total)), every=0.02)
    # Ranges of 10 offsets would be 16 tasks a pass: at most one a core run instead.
    assert len(range(0, end, 10)) > spark.defaultParallelism
    total = 3 * spark.defaultParallelism
    assert {t for _, t in seen} == {total} and seen[-1] == (total, total)
    done = [d for d, _ in seen]
    assert done == sorted(done) and any(0 < d < total for d in done), seen

    Progress(there, pid, "s")(4, 10)  # noted: a pass's first, nothing recorded yet
    [state] = there.compaction_state(STREAM)
    assert (state.runs, state.running_done, state.running_total) == (0, 4, 10)
    assert state.running_updated_ms > 0
    compact(there, on_spark())  # its record replaces the note
    [state] = there.compaction_state(STREAM)
    assert (state.runs, state.running_total) == (1, 0)


def test_a_ranges_key_map_over_a_mebibyte_comes_back_to_the_driver(spark):
    """100k distinct keys in one range: its map is a task result of ~3 MB, which Spark's
    default (1 MiB) would leave as a block the loopback-bound driver cannot fetch."""
    made = _scratch_database("batches")
    url = next(made)
    store = open_store(url)
    try:
        store.ensure_topic(STREAM, "t", 1)
        for at in range(0, 100_000, 5_000):
            store.append_raw(STREAM, "t", 0, encode_batch(
                [Record(b"v", key=b"key-%020d" % n) for n in range(at, at + 5_000)]),
                origin=ORIGIN)
        pid = moving.pid_of(store, STREAM, "t", 0)
        keys = keys_on_spark(spark, Partition(url, pid), 0, 100_000, 100_000)
        assert len(keys) == 100_000 and keys[b"key-%020d" % 99_999] == 99_999
    finally:
        store.close()
        next(made, None)
