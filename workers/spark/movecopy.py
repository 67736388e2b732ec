"""The bulk copy of a large partition's move (issue 33) as a Spark job: the partition's offsets
cut into ranges, one task each, each piping its range from the source store to the target's
not-held row by binary COPY, the same rows the move's own COPY pipe writes
(replication/engine/partitionmove.py). A task deletes what an earlier attempt of its range
left first, in the same target transaction (`recopy_range`), so a retried task or a re-run
job never doubles a row. The catch-up passes and the cut-over stay the move's own, under the
source row's lock: a job that dies leaves a partial copy in a row nobody reads, which the
move's next attempt wipes (`prepare`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from pyspark import SparkContext

from replication.engine.partitionmove import recopy_range
from workers.spark import pg
from workers.spark.watch import run_watched

SPLIT = 200_000  # offsets per task


@dataclass(frozen=True)
class MoveCopy:
    """What each task needs: both stores' URLs, the data table and its offset column, the
    partition's id in each store."""

    src_url: str
    dst_url: str
    table: str
    key: str
    spid: int
    tpid: int


def spans(start: int, end: int, split: int = SPLIT) -> list[tuple[int, int]]:
    return [(at, min(at + split, end)) for at in range(start, end, max(1, split))]


def copy_spans(move: MoveCopy, ranges: Iterator[tuple[int, int]]) -> Iterator[int]:
    """A task: each of its ranges recopied; yields the offsets each covered."""
    with pg.connect(move.src_url) as src, pg.connect(move.dst_url) as dst:
        for start, end in ranges:
            recopy_range(src, dst, move.table, move.key, move.spid, move.tpid, start, end)
            yield end - start


def copy_on_spark(spark: SparkContext, move: MoveCopy, start: int, end: int,
                  split: int = SPLIT) -> int:
    """Offsets [start, end) of the partition copied by Spark tasks; the offsets covered."""
    ranges = spans(start, end, split)
    if not ranges:
        return 0
    done = spark.parallelize(ranges, len(ranges)).mapPartitions(
        lambda part: copy_spans(move, part)).collect()
    return sum(done)


def copy_watched(spark: SparkContext, move: MoveCopy, start: int, end: int,
                 split: int = SPLIT, *, progress: Callable[[int, int], None],
                 every: float | None = None) -> int:
    """copy_on_spark, reporting `progress(done, total)` offsets on this thread as the job's
    tasks finish (a move's progress: services/rebalance.py). The ranges are `split` offsets
    each but the last, so finished tasks say how far the copy is."""
    return run_watched(
        spark, lambda: copy_on_spark(spark, move, start, end, split),
        lambda tasks: progress(min(end - start, tasks * split), end - start),
        every=every, what="streamgate-move")
