"""A large partition's move (issue 33) with its bulk copy on a real local Spark session, between
two real PostgreSQL stores of either layout: every message once and in order at the target,
counters, cursors and producer sequences moved by the cut-over; a task's range run again (a
retried task) doubles nothing; a Spark job that died mid-copy leaves the partition at the
source, and the move's retry completes it."""

from __future__ import annotations

import pytest

from replication.engine import fence
from replication.engine import partitionmove as moving
from replication.engine.producers import ProducerBatch
from replication.engine.store import Record
from tests.replication.engine.test_partitionmove import STREAM, _pair, counters
from workers.spark.movecopy import MoveCopy, copy_on_spark, copy_watched

pytestmark = pytest.mark.django_db
SPLIT = 170  # offsets per task: several tasks for a small partition


@pytest.fixture(params=["batches", "rows"])
def pair(request):  # type: ignore[no-untyped-def]
    yield from _pair((request.param, request.param))


def fill(source, n: int = 1000) -> list[bytes]:
    values = [b"s%d" % i for i in range(3)]
    source.append(STREAM, "t", [Record(v, partition=0) for v in values], origin=STREAM,
                  sequence=ProducerBatch(5, 0, 0, 3))
    for at in range(0, n, 50):
        batch = [b"v%d" % i for i in range(at, at + 50)]
        source.append(STREAM, "t", [Record(v, partition=0) for v in batch], origin=STREAM)
        values += batch
    source.commit_cursor(STREAM, "g", "t", 0, 77)
    return values


def job(source, target, surl, turl) -> tuple[MoveCopy, int, int]:
    spid, tpid = (moving.pid_of(s, STREAM, "t", 0) for s in (source, target))
    return (MoveCopy(surl, turl, source.DATA_TABLE, moving.key_column(source), spid, tpid),
            spid, tpid)


def finish(source, target, spid, tpid, upto) -> list[bytes]:
    moving.cut_over(source, target, spid, tpid, copied_to=upto,
                    compaction=moving.compaction_mark(source, spid), target_name="b")
    fence.set_held(target, STREAM, "t", [0])
    return [m.value for m in target.read(STREAM, "t", 0, 0, limit=10_000)]


def test_a_large_move_copied_by_spark_holds_every_message_once_in_order(spark, pair):
    source, target, surl, turl = pair
    values = fill(source)
    move, spid, tpid = job(source, target, surl, turl)
    moving.prepare(target, tpid)
    upto = moving.copy_history(source, target, spid, tpid,
                               bulk=lambda s, e: copy_on_spark(spark, move, s, e, SPLIT))
    assert upto == len(values)
    # A retried task: its range copied again after it had committed.
    assert copy_on_spark(spark, move, SPLIT, 2 * SPLIT, SPLIT) == SPLIT
    source.append(STREAM, "t", [Record(b"tail", partition=0)], origin=STREAM)
    before = counters(surl, 0)

    assert finish(source, target, spid, tpid, upto) == [*values, b"tail"]
    assert counters(turl, 0)[1:] == before[1:]
    assert target.fetch_cursor(STREAM, "g", "t", 0) == 77
    assert target.producer_state(STREAM, "t", 0, 5) == source.producer_state(STREAM, "t", 0, 5)


def test_a_spark_copy_that_died_leaves_the_partition_at_the_source_and_a_retry_completes(
        spark, pair):
    source, target, surl, turl = pair
    values = fill(source)
    move, spid, tpid = job(source, target, surl, turl)
    moving.prepare(target, tpid)
    # The job died after some of its tasks committed: part of the history in the target's
    # not-held row, nothing at the source changed.
    copy_on_spark(spark, move, 0, 3 * SPLIT, SPLIT)
    assert counters(surl, 0)[:2] == (True, len(values))
    assert counters(turl, 0)[0] is False
    assert [m.value for m in source.read(STREAM, "t", 0, 0, limit=10_000)] == values
    source.append(STREAM, "t", [Record(b"meanwhile", partition=0)], origin=STREAM)

    moving.prepare(target, tpid)  # the move run again
    upto = moving.copy_history(source, target, spid, tpid,
                               bulk=lambda s, e: copy_on_spark(spark, move, s, e, SPLIT))
    assert finish(source, target, spid, tpid, upto) == [*values, b"meanwhile"]


def test_a_watched_spark_copy_reports_its_finished_tasks_as_it_goes(spark, pair):
    source, target, surl, turl = pair
    values = fill(source, 2000)
    move, spid, tpid = job(source, target, surl, turl)
    moving.prepare(target, tpid)
    seen: list[tuple[int, int]] = []
    assert copy_watched(spark, move, 0, len(values), 20, every=0.02,
                        progress=lambda done, total: seen.append((done, total))) == len(values)
    assert {total for _, total in seen} == {len(values)}
    done = [d for d, _ in seen]
    assert done == sorted(done)
    assert any(0 < d < len(values) for d in done), seen  # reported while tasks were running
    assert finish(source, target, spid, tpid, len(values)) == values


def test_a_watched_spark_copy_that_fails_raises_on_the_watching_thread(spark, pair):
    source, target, surl, turl = pair
    fill(source, 100)
    move, _, _ = job(source, target, surl, turl)
    broken = MoveCopy(move.src_url, move.dst_url, "no_such_table", move.key, move.spid,
                      move.tpid)
    with pytest.raises(Exception, match="no_such_table"):
        copy_watched(spark, broken, 0, 100, 50, every=0.02, progress=lambda *_: None)
