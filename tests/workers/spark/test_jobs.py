"""copystream and diffstreams on a real local Spark session, over real stores: two
PostgreSQL databases (the binary COPY fast path), of rows or of record batches (issue 30),
SQLite files (the embedded default's generic path), and a row store and a batch store (the
generic path between layouts)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from replication.engine.checker import check_replica
from replication.engine.factory import create_database, open_store
from replication.engine.pg.schema import PIPE_ROWS
from replication.engine.pgbatch import PgBatchStore
from replication.engine.store import Record, UnknownTopic
from replication.stores import default_store_url
from tests.batches import holds_batches, rewrite_record, stored_batches
from workers.spark import Side, Spec, copystream, diffstreams
from workers.spark.submit import spec_environment

ROOT = Path(__file__).resolve().parents[3]
TOPICS = {"clicks": 4, "views": 3, "orders": 1}


def fill(store, stream: uuid.UUID, per_topic: int, *, batch: int = 2000, first: int = 0) -> None:
    for topic, partitions in TOPICS.items():
        store.ensure_topic(stream, topic, partitions)
        for start in range(first, first + per_topic, batch):
            store.append(stream, topic, [
                Record(value=f"{topic}-{i}".encode() * 8, key=str(i % 97).encode(),
                       headers=(("id", f"{topic}-{i}".encode()),), timestamp_ms=1_700_000 + i)
                for i in range(start, min(first + per_topic, start + batch))
            ], origin=stream, producer="p1")


def pg_urls(*names: str) -> list[str]:
    tag = uuid.uuid4().hex[:8]
    return [default_store_url(f"spark_{name}_{tag}") for name in names]


@pytest.fixture(params=["postgresql", "postgresql-batches", "sqlite"])
def stores(request, db, tmp_path):
    """(source URL, destination URL) of two clusters' stores, of either kind."""
    if request.param == "sqlite":
        urls = [f"sqlite:///{tmp_path}/src.sqlite3", f"sqlite:///{tmp_path}/dst.sqlite3"]
    else:
        urls = pg_urls("src", "dst")
    for url in urls:
        create_database(url)
    layout = "batches" if request.param.endswith("batches") else "rows"
    opened = [open_store(url, layout=layout) for url in urls]
    yield urls, opened
    for store in opened:
        store.close()


def spec_of(urls, src, dst, **options) -> Spec:
    return Spec(Side(urls[0], str(src)), Side(urls[1], str(dst)), TOPICS, **options)


def assert_equal(opened, src, dst, *, sizes: bool = True) -> None:
    """The checker finds the same messages, and the partitions' statistics agree; their
    bytes too where `sizes` (not across layouts, nor where a batch store split a batch: it
    counts a batch's records section, whose offset deltas shrink in a batch of its own)."""
    report = check_replica(opened[0], src, opened[1], dst, list(TOPICS), id_header="id")
    assert report.ok, report.summary()
    for topic in TOPICS:
        stats = [[s if sizes else dataclasses.replace(s, bytes=None) for s in store.partition_stats(
            stream, topic)] for store, stream in zip(opened, (src, dst), strict=True)]
        assert stats[0] == stats[1]


def test_copystream_copies_every_topic_and_partition_exactly(spark, stores):
    urls, opened = stores
    src, dst = uuid.uuid4(), uuid.uuid4()
    fill(opened[0], src, 3000)
    figures = []
    result = copystream(spark, spec_of(urls, src, dst), lambda *f: figures.append(f))
    assert result["messages"] == 9000 and result["planned"] == 9000
    assert figures[-1][:2] == (9000, 9000) and figures[-1][2] == result["bytes"] > 0
    assert_equal(opened, src, dst)  # offsets, keys, values, headers, timestamps, origin
    if isinstance(opened[0], PgBatchStore):  # batches as the source holds them, byte for byte
        for topic, partitions in TOPICS.items():
            for p in range(partitions):
                held = stored_batches(urls[0], src, topic, p)
                assert len(held) > 1 and stored_batches(urls[1], dst, topic, p) == held


def test_copystream_run_again_adds_only_what_is_new(spark, stores):
    urls, opened = stores
    src, dst = uuid.uuid4(), uuid.uuid4()
    fill(opened[0], src, 1000)
    spec = spec_of(urls, src, dst, threads=1)
    copystream(spark, spec)
    assert copystream(spark, spec)["messages"] == 0  # a re-run never doubles anything
    fill(opened[0], src, 500, first=1000)
    assert copystream(spark, spec)["messages"] == 1500
    assert_equal(opened, src, dst)


def test_copystream_starts_a_fresh_destination_at_the_sources_low_watermark(spark, stores):
    urls, opened = stores
    src, dst = uuid.uuid4(), uuid.uuid4()
    fill(opened[0], src, 1000, batch=100)  # small batches: a batch store expires whole ones
    assert opened[0].expire(src, before_ms=1_700_000 + 400, batch=100_000) > 0  # expire a prefix
    copystream(spark, spec_of(urls, src, dst))
    assert_equal(opened, src, dst)
    marks = opened[1].watermarks(dst, "clicks")
    assert all(low > 0 for low, _ in marks.values())  # offsets kept: not renumbered from 0


def test_diffstreams_finds_the_first_difference_and_repair_fixes_it(spark, stores):
    urls, opened = stores
    src, dst = uuid.uuid4(), uuid.uuid4()
    fill(opened[0], src, 3000)
    copystream(spark, spec_of(urls, src, dst))
    assert diffstreams(spark, spec_of(urls, src, dst))["equal"]

    # One changed message, one partition missing its last messages.
    views = opened[0].watermarks(src, "views")[1][1]
    corrupt(urls[1], dst, "clicks", 2, 123)
    opened[1].truncate(dst, "views", 1, views - 5)
    result = diffstreams(spark, spec_of(urls, src, dst))
    firsts = {(p["topic"], p["partition"]): p["firstDifference"] for p in result["partitions"]}
    assert not result["equal"] and result["differing"] == 2
    assert firsts[("clicks", 2)] == 123 and firsts[("views", 1)] == views - 5
    assert all(v is None for k, v in firsts.items() if k not in {("clicks", 2), ("views", 1)})

    repaired = diffstreams(spark, spec_of(urls, src, dst, repair=True))
    assert repaired["equalAfterRepair"] is True
    assert {(r["topic"], r["partition"]) for r in repaired["repaired"]} == {
        ("clicks", 2), ("views", 1)}
    assert_equal(opened, src, dst, sizes=not isinstance(opened[0], PgBatchStore))


def test_a_row_store_copied_into_a_batch_store_and_back_holds_and_compares_equal(db, spark):
    """Stores of two layouts take the generic path (read, apply): the batch store takes the
    row store's messages as batches, a row store copied from it gets them back, and
    diffstreams across layouts finds one changed message inside a batch at its offset."""
    urls = pg_urls("rows", "batches", "back")
    opened = []
    for url, layout in zip(urls, ("rows", "batches", "rows"), strict=True):
        create_database(url)
        opened.append(open_store(url, layout=layout))
    streams = [uuid.uuid4() for _ in urls]
    fill(opened[0], streams[0], 1000)
    forth, back = ([Side(urls[i], str(streams[i])) for i in pair] for pair in ((0, 1), (1, 2)))
    assert copystream(spark, Spec(*forth, TOPICS))["messages"] == 3000
    assert copystream(spark, Spec(*back, TOPICS))["messages"] == 3000
    assert isinstance(opened[1], PgBatchStore) and stored_batches(urls[1], streams[1], "orders", 0)
    assert_equal(opened[:2], *streams[:2], sizes=False)
    assert_equal(opened[1:], *streams[1:], sizes=False)
    assert diffstreams(spark, Spec(*forth, TOPICS))["equal"]

    corrupt(urls[1], streams[1], "orders", 0, 321)
    result = diffstreams(spark, Spec(*forth, TOPICS))
    assert {(p["topic"], p["partition"]): p["firstDifference"] for p in result["partitions"]
            if p["firstDifference"] is not None} == {("orders", 0): 321}
    for store in opened:
        store.close()


def test_null_values_copy_as_null_and_diffstreams_tells_them_from_empty_ones(spark, stores):
    urls, opened = stores
    src, dst = uuid.uuid4(), uuid.uuid4()
    fill(opened[0], src, 100)
    nulls = [None, b"", None, b"x"]
    first = opened[0].append(src, "orders", [Record(v, headers=(("id", b"null-%d" % i),
                                                                ("gone", None)))
                                             for i, v in enumerate(nulls)], origin=src)[0][1]
    copystream(spark, spec_of(urls, src, dst))
    assert_equal(opened, src, dst)  # the checker and the partitions' byte counters
    got = opened[1].read(dst, "orders", 0, first)
    assert [(m.value, m.headers[1]) for m in got] == [(v, ("gone", None)) for v in nulls]
    assert diffstreams(spark, spec_of(urls, src, dst))["equal"]

    set_value(urls[1], dst, "orders", 0, first + 2, b"")  # a null become empty: 0 bytes both
    result = diffstreams(spark, spec_of(urls, src, dst))
    firsts = {(p["topic"], p["partition"]): p["firstDifference"] for p in result["partitions"]}
    assert result["differing"] == 1 and firsts[("orders", 0)] == first + 2


def set_value(url: str, stream: uuid.UUID, topic: str, partition: int, offset: int,
              value: bytes | None) -> None:
    """Overwrite one stored value behind the store's back."""
    if holds_batches(url):
        rewrite_record(url, (stream, topic, partition, offset), lambda _: value)
        return
    update_value(url, (stream, topic, partition, offset), ("?", "%s"), (value,))


def corrupt(url: str, stream: uuid.UUID, topic: str, partition: int, offset: int) -> None:
    """Change one stored value's first byte behind the store's back, as a disk or a bug
    would (its length stays, so the partition's byte counters stay true)."""
    if holds_batches(url):
        rewrite_record(url, (stream, topic, partition, offset), lambda v: b"\x00" + v[1:])
        return
    update_value(url, (stream, topic, partition, offset),
                 ("CAST(x'00' || substr(value, 2) AS BLOB)",
                  "'\\x00'::bytea || substring(value from 2)"))


def update_value(url: str, where: tuple[uuid.UUID, str, int, int], assign: tuple[str, str],
                 args: tuple = ()) -> None:
    """UPDATE one message's value to `assign` (SQLite's spelling, PostgreSQL's) at `where`
    (stream, topic, partition, offset)."""
    stream, topic, partition, offset = where
    match = ('"offset" = {0} AND pid = (SELECT id FROM partitions WHERE stream = {0} '
             "AND topic = {0} AND partition = {0})")
    if url.startswith("sqlite"):
        import sqlite3

        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            conn.execute(f"UPDATE messages SET value = {assign[0]} WHERE " + match.format("?"),
                         (*args, offset, stream.bytes, topic, partition))
        return
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"UPDATE messages SET value = {assign[1]} WHERE " + match.format("%s"),
                     (*args, offset, stream, topic, partition))


def test_copy_killed_mid_job_and_run_again_ends_equal(db, spark):
    """spark-submit's driver killed with SIGKILL half way (some chunks committed, one maybe
    mid-COPY): a second run finishes the copy, nothing doubled or missing."""
    tag = uuid.uuid4().hex[:8]
    urls = [default_store_url(f"spark_src_{tag}"), default_store_url(f"spark_dst_{tag}")]
    for url in urls:
        create_database(url)
    opened = [open_store(url) for url in urls]
    src, dst = uuid.uuid4(), uuid.uuid4()
    fill(opened[0], src, 120_000, batch=20_000)
    spec = spec_of(urls, src, dst)
    driver = subprocess.Popen(
        [sys.executable, str(ROOT / "workers/spark/copystream_job.py")],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), **spec_environment(spec)},
    )
    try:
        deadline = time.monotonic() + 120
        while copied(opened[1], dst) == 0:
            assert time.monotonic() < deadline and driver.poll() is None, "the copy never began"
            time.sleep(0.05)
    finally:
        os.killpg(driver.pid, signal.SIGKILL)  # the driver, its JVM and its Python workers
        driver.wait()
    assert copied(opened[1], dst) < 360_000, "killed too late to prove anything"
    copystream(spark, spec)
    assert_equal(opened, src, dst)
    for store in opened:
        store.close()


def copied(store, stream: uuid.UUID) -> int:
    total = 0
    for topic in TOPICS:
        with contextlib.suppress(UnknownTopic):
            total += sum(high - low for low, high in store.watermarks(stream, topic).values())
    return total


def test_a_retried_task_copies_its_range_again_without_doubling_it(stores):
    """Spark retries a failed task with the range planned before its first attempt, whose
    chunks may already be committed: each chunk starts where the destination ends."""
    from workers.spark.jobs import _pair, plan_copy
    from workers.spark.ranges import Work, copy_ranges

    urls, opened = stores
    src, dst = uuid.uuid4(), uuid.uuid4()
    fill(opened[0], src, 1500)
    spec = spec_of(urls, src, dst)
    with _pair(spec) as pair:
        ranges = plan_copy(pair, TOPICS)
    work = Work(spec.src, spec.dst, chunk=200)
    first = list(copy_ranges(work, ranges[:3]))  # a first attempt, part of the way
    again = list(copy_ranges(work, ranges))  # the retry, same ranges from the start
    assert sum(r[2] for r in first) > 0
    assert sum(r[2] for r in first) + sum(r[2] for r in again) == 4500
    assert_equal(opened, src, dst)


def plan_nodes(conn, query: str, params) -> list[dict]:
    """Every node of the query's plan, from EXPLAIN's JSON (no run, no text matching)."""
    nodes, todo = [], [conn.execute("EXPLAIN (FORMAT JSON) " + query, params).fetchone()[0][0]
                        ["Plan"]]
    while todo:
        nodes.append(todo.pop())
        todo += nodes[-1].get("Plans", [])
    return nodes


def next_offset(conn, pid: int) -> int:
    return conn.execute("SELECT next_offset FROM partitions WHERE id = %s", (pid,)).fetchone()[0]


def test_checksums_and_copies_read_the_index_in_offset_order_without_sorting(db):
    """The bulk jobs' PostgreSQL reads of a partition's offset range sort nothing: the copy's
    read (the engine's PIPE_ROWS) was planned as a bitmap heap scan plus a sort of the full
    rows (once the store has statistics; on 5M fresh rows too), the checksums as a GROUP BY
    sorting full rows. Each bucket is a plain aggregate over its own index range."""
    from workers.spark import pg

    url = default_store_url(f"spark_plan_{uuid.uuid4().hex[:8]}")
    create_database(url)
    store, stream = open_store(url, layout="rows"), uuid.uuid4()
    fill(store, stream, 3000)
    store.close()
    with pg.connect(url) as conn:
        pid = pg.partition_id(conn, str(stream), "clicks", 2)
        high = next_offset(conn, pid)
        spans = [(pid, lo, lo + 100) for lo in range(0, high, 100)]
        plans = []
        for analyse in (False, True):  # fresh rows, then with statistics (as autovacuum makes)
            if analyse:
                conn.execute("ANALYZE messages")
            buckets = plan_nodes(conn, pg.BUCKETS, ([s[0] for s in spans],
                                                    [s[1] for s in spans], [s[2] for s in spans]))
            assert [n.get("Strategy") for n in buckets if n["Node Type"] == "Aggregate"] == [
                "Plain"]
            rows_out = sql.SQL(PIPE_ROWS).format(rpid=pid, pid=pid, start=0, end=high)
            plans += [buckets, plan_nodes(conn, rows_out.as_string(conn), None),
                      plan_nodes(conn, pg.ROW_HASHES, (pid, 0, high))]
        assert sum(n for n, _ in pg.buckets(conn, spans).values()) == high > 0
    for nodes in plans:
        assert not [n for n in nodes if "Sort" in n["Node Type"]], nodes


def test_batch_checksums_and_copies_read_the_index_in_offset_order_without_sorting(db):
    """The batch store's (issue 30) as the row store's: each bucket a plain aggregate over
    its own range of the (pid, last_offset) key, the copy's and the comparison's reads in
    key order, with statistics or without."""
    from replication.engine.pgbatch.apply import RELAY_OUT
    from workers.spark import pg

    (url,) = pg_urls("plan")
    create_database(url)
    store, stream = open_store(url, layout="batches"), uuid.uuid4()
    fill(store, stream, 3000, batch=100)
    store.close()
    with pg.connect(url) as conn:
        pid = pg.partition_id(conn, str(stream), "clicks", 2)
        high = next_offset(conn, pid)
        spans = [(pid, lo, lo + 100, high) for lo in range(0, high, 100)]
        relayed = RELAY_OUT.removeprefix("COPY (").split(") TO STDOUT")[0]
        plans = []
        for analyse in (False, True):
            if analyse:
                conn.execute("ANALYZE batches")
            buckets = plan_nodes(conn, pg.BATCH_BUCKETS, tuple(
                [s[i] for s in spans] for i in range(4)))
            assert [n.get("Strategy") for n in buckets if n["Node Type"] == "Aggregate"] == [
                "Plain"]
            copy_out = sql.SQL(relayed).format(rpid=pid, pid=pid, start=0, end=high)
            plans += [buckets, plan_nodes(conn, copy_out.as_string(conn), None),
                      plan_nodes(conn, pg.BATCH_ROWS, (pid, 0, high))]
        assert sum(found[0] for found in pg.batch_buckets(conn, spans).values()) == high > 0
    for nodes in plans:
        assert not [n for n in nodes if "Sort" in n["Node Type"]], nodes


def test_a_copy_deals_its_partitions_into_one_even_share_per_task():
    """A Spark task per core (or per -numthreads), not per partition: largest ranges first,
    each to the lightest share, so the shares carry about equal messages."""
    from workers.spark.jobs import _deal
    from workers.spark.ranges import Range

    ranges = [Range("t", p, 0, size) for p, size in enumerate([500, 300, 300, 200, 200, 100])]
    shares = _deal(ranges, 2)
    assert sorted(sum(r.size for r in share) for share in shares) == [800, 800]
    assert sorted(r.partition for share in shares for r in share) == list(range(6))
    assert len(_deal(ranges, 64)) == 6 and len(_deal(ranges[:1], 4)) == 1
    assert _deal([], 2) == []


def test_drivers_use_the_class_data_sharing_archive_only_where_it_exists(tmp_path):
    from workers.spark.session import JAVA_OPTIONS, java_options

    archive = tmp_path / "spark.jsa"
    assert java_options(archive) == JAVA_OPTIONS
    archive.write_bytes(b"")
    assert java_options(archive) == f"{JAVA_OPTIONS} -XX:SharedArchiveFile={archive}"
    assert java_options(archive, make=True).endswith(f"-XX:ArchiveClassesAtExit={archive}")


@pytest.mark.parametrize("threads", [1, 3])
def test_numthreads_is_how_many_tasks_the_copy_runs(spark, stores, threads):
    urls, opened = stores
    src, dst = uuid.uuid4(), uuid.uuid4()
    fill(opened[0], src, 400)
    group = f"threads-{uuid.uuid4().hex}"
    spark.setJobGroup(group, "numthreads")
    try:
        assert copystream(spark, spec_of(urls, src, dst, threads=threads))["messages"] == 1200
    finally:
        spark.setLocalProperty("spark.jobGroup.id", None)  # later jobs on this thread
    tracker = spark.statusTracker()
    (job,) = tracker.getJobIdsForGroup(group)
    (stage,) = tracker.getJobInfo(job).stageIds
    assert tracker.getStageInfo(stage).numTasks == threads
    assert_equal(opened, src, dst)
