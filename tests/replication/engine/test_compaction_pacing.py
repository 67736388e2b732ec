"""Log compaction as a good neighbour (issue 31): a pass paced to a byte rate takes at least
what it reads and writes over that rate and ends exactly as an unpaced pass; a page's
changes written in small transactions end as in one; the pass's thread runs niced and the
caller keeps its own priority."""

from __future__ import annotations

import os
import sys
import threading
import time
import uuid

import pytest

from replication.engine import open_store
from replication.engine.compactstore import HEADS, Policy
from replication.engine.pacing import BURST_SECONDS, STEP_SECONDS, UNPACED, Pace, Pacing, niced
from replication.engine.recordbatch import encode_batch
from replication.engine.store import Record

ORIGIN = uuid.UUID("0b1f6f0e-8d7c-4a6e-9d0a-5b0e0f4c2a12")
NOW = 10_000_000
EVERYTHING = 1 << 62
POLICY = Policy(min_lag_ms=0, delete_retention_ms=1_000)
BATCHES = 40


@pytest.fixture(params=["pg", "sqlite"])
def stores(request):
    """Two stores of one kind, each holding its own copy of the same partition."""
    opened = [open_store(request.getfixturevalue(f"{request.param}_batch_url"))]
    opened.append(open_store(opened[0].url) if request.param == "pg" else
                  open_store(request.getfixturevalue("sqlite_batch_url")))
    streams = [uuid.uuid4(), uuid.uuid4()]
    for store, stream in zip(opened, streams, strict=True):
        fill(store, stream)
    yield list(zip(opened, streams, strict=True))
    for store in opened:
        store.close()


def fill(store, stream) -> None:
    """BATCHES batches of 50 records over 30 keys, values of 200 bytes, a tombstone in three."""
    store.ensure_topic(stream, "t", 1)
    for n in range(BATCHES):
        records = [Record(None if (n * 50 + i) % 3 == 0 and n % 4 == 3 else b"x" * 200,
                          key=b"k%d" % ((n * 50 + i) % 30), timestamp_ms=1_000 + i)
                   for i in range(50)]
        store.append_raw(stream, "t", 0, encode_batch(records), origin=ORIGIN)


def held(store, stream) -> tuple:
    return (store.fetch(stream, "t", 0, 0, 1 << 24).data, store.watermarks(stream, "t"),
            store.partition_stats(stream, "t")[0])


def compact(store, stream, pacing: Pacing = UNPACED):
    return store.compact(stream, "t", 0, policy=POLICY, now_ms=NOW, replicated=EVERYTHING,
                         pacing=pacing)


def test_a_paced_pass_takes_what_it_reads_over_the_rate_and_ends_as_an_unpaced_one(stores):
    (fast, fast_stream), (paced, paced_stream) = stores
    size = len(held(paced, paced_stream)[0])  # the batches as stored: each pass reads them all
    rate = size  # two passes over them: two seconds at least
    began = time.monotonic()
    done = compact(paced, paced_stream, Pacing(max_bytes_per_sec=rate))
    took = time.monotonic() - began
    assert took >= 2 * size / rate - BURST_SECONDS - 0.05
    began = time.monotonic()
    assert compact(fast, fast_stream) == done and done.removed > 0
    assert time.monotonic() - began < took / 2
    assert held(fast, fast_stream) == held(paced, paced_stream)


def test_a_paced_pass_reads_and_writes_a_steps_worth_of_batches_at_a_time(stores):
    """Paced, a page read or a chunk written is what the rate spends in STEP_SECONDS (three
    batches here), not 500 batches read or 50 written at full speed and then slept off."""
    (fast, fast_stream), (paced, paced_stream) = stores
    rate = 3 * len(held(paced, paced_stream)[0]) / BATCHES / STEP_SECONDS
    reads, chunks = [], []
    page, write = paced._page, paced._write_chunk

    def reading(query, *args):
        rows = page(query, *args)
        if query is not HEADS:  # what the pass reads of the batches, not their headers
            reads.append(len(rows))
        return rows

    paced._page = reading
    paced._write_chunk = lambda pid, changes, pace: chunks.append(len(changes)) or write(
        pid, changes, pace)
    assert compact(paced, paced_stream, Pacing(rate)) == compact(fast, fast_stream)
    assert held(fast, fast_stream) == held(paced, paced_stream)
    assert len(reads) > BATCHES / 3 and max(reads) <= 3 and 3 in reads, reads
    assert max(chunks) <= 3 and 3 in chunks, chunks


def test_a_pass_writing_two_batches_a_transaction_ends_as_one_writing_fifty(stores):
    (whole, whole_stream), (chunked, chunked_stream) = stores
    chunked.WRITE_BATCHES = 2  # BATCHES-odd changes: chunks of 2 and a last one of 1
    assert compact(whole, whole_stream) == compact(chunked, chunked_stream)
    assert held(whole, whole_stream) == held(chunked, chunked_stream)
    again = compact(chunked, chunked_stream)
    assert (again.removed, again.reclaimed, again.rewritten) == (0, 0, 0)


def test_a_chunk_on_postgresql_commits_without_waiting_for_the_wal_flush(pg_batch_url):
    """A lost chunk leaves its batches as they were (module docstring of pgbatch/store.py):
    its commit need not wait ~2.5 ms under the partition's lock for ~6 MB of WAL."""
    store, stream = open_store(pg_batch_url), uuid.uuid4()
    fill(store, stream)
    seen: list[str] = []
    drop = store._drop_if_same

    def spying(conn, pid, batches):
        seen.append(conn.execute("SHOW synchronous_commit").fetchone()[0])
        return drop(conn, pid, batches)

    store._drop_if_same = spying
    try:
        assert compact(store, stream).removed > 0
        with store._reading() as conn:  # for that transaction only
            after = conn.execute("SHOW synchronous_commit").fetchone()[0]
    finally:
        store.close()
    assert seen and set(seen) == {"off"} and after == "on"


def test_a_pace_sleeps_the_bytes_over_the_rate_and_keeps_little_credit_for_idle_time():
    pace = Pace(1_000_000)
    time.sleep(0.5)  # idle: at most BURST_SECONDS of credit
    began = time.monotonic()
    for _ in range(4):
        pace.spent(100_000)
    assert time.monotonic() - began >= 0.4 - BURST_SECONDS - 0.01
    unlimited, began = Pace(0), time.monotonic()
    unlimited.spent(1 << 40)
    assert time.monotonic() - began < 0.05


def test_a_spark_pass_shares_the_rate_between_the_tasks_running_at_once():
    assert Pacing(1_000_000, 10).shared(4) == Pacing(250_000, 10)
    assert Pacing(1_000_000).shared(0) == Pacing(1_000_000)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a thread's niceness")
def test_niced_work_runs_on_a_thread_at_the_added_niceness_and_the_caller_keeps_its_own():
    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    def niceness() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    assert niced(5, niceness) == min(19, mine + 5)
    assert niced(0, niceness) == mine
    assert niceness() == mine
