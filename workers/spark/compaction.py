"""Log compaction of a large partition (issue 31) as Spark jobs: the partition's cleanable
offsets cut into ranges, one task each (a batch belongs to the range holding its last
offset), no more of them than the cluster's cores (`per_task`). Pass 1: each task reads its
range's batches from the store and maps each key to its latest offset there; the driver
collects the ranges' maps and merges them in offset order (`dict.update`: a key's offset in a
later range is always the greater, so this is the max that a `reduceByKey(max)` would take,
without its shuffle stage: 0.6 s or more of a pass on 2 cores). Pass 2: that map broadcast,
each task rewrites its range's batches with the store's own method (`compact_rewrite`: the
rules, 50 batches a transaction under the partition's lock, a batch dropped only if still as
read, counters shrunk by what it removed) and returns what it removed; the driver sums, and
the engine records the pass as for one run in process (replication/engine/compactstore.py).

Pass 2 runs in the driver instead, in one stage in offset order as in the worker, when the
batches it must read are few (those holding a key's latest record, under the worker's Spark
threshold: the others go on their headers): two Spark jobs cost more than such a pass.

On Spark, pass 2 runs in two stages: first every range rewritten keeping every tombstone, then every
range again dropping the tombstones past the delete retention. In one process the pages go in
offset order, so a key's older records are gone before its tombstone goes; Spark's tasks run
in any order, and a job that died after a later range dropped a tombstone but before an
earlier range dropped the value it deletes would leave that value the key's latest for the
next pass: a deleted key back. Dropping tombstones only once every range lost its older
records closes that.

Crash safety is otherwise the store's: a task's writes are idempotent by the batches they read, so
Spark retrying a task, or the worker running the whole pass again after a job died half-way,
rereads what is there now and changes only batches still holding records to remove; a record
kept is never dropped, none is written twice. Each task opens the store by its URL (the
executors have the project and psycopg, no Django), and closes it when its range is done.

Pacing (STREAMGATE_COMPACT_MAX_BYTES_PER_SEC, replication/engine/pacing.py) is for the pass
as a whole, as Kafka's throttle is for all its cleaner threads together: each task keeps to
the rate divided by the tasks, which run at once (at most the cluster's cores:
`defaultParallelism`), so a pass on more executors is no faster than one on a single core at
the same setting; and each task's range is worked on a thread niced by the setting's nice,
which ends with it (a Spark Python worker is reused by the next job's tasks)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass, replace
from functools import partial
from typing import TypeVar

from pyspark import Broadcast, SparkContext

from replication.engine.compaction import Rules
from replication.engine.compactstore import CompactionMethods, Counts
from replication.engine.factory import open_store
from replication.engine.pacing import UNPACED, Pace, Pacing, niced
from workers.spark.movecopy import spans
from workers.spark.watch import run_watched

SPLIT = 200_000  # offsets per task
KEEP_TOMBSTONES = -(1 << 63)  # older than any record: pass 2's first stage drops none
T = TypeVar("T")


@dataclass(frozen=True)
class Partition:
    """What each task needs: the store's URL, the partition's id there, and its share of
    the pass's pacing."""

    url: str
    pid: int
    pacing: Pacing = UNPACED


def _opened(part: Partition) -> closing[CompactionMethods]:
    store = open_store(part.url)
    if not isinstance(store, CompactionMethods):
        raise TypeError(f"the store at {part.url} keeps rows: compaction needs batches")
    return closing(store)


def range_keys(part: Partition, ranges: Iterator[tuple[int, int]]
               ) -> Iterator[dict[bytes, int]]:
    """Pass 1's task: for each of its ranges, each key's latest offset there."""
    with _opened(part) as store:
        pace = Pace(part.pacing.max_bytes_per_sec)
        for low, end in ranges:
            yield niced(part.pacing.nice, partial(store.compact_keys, part.pid, low, end,
                                                  pace=pace))


def range_rewrite(part: Partition, keys: Broadcast, rules: Rules,
                  ranges: Iterator[tuple[int, int]]) -> Iterator[Counts]:
    """Pass 2's task: its ranges rewritten; (removed, reclaimed, batches changed) each."""
    with _opened(part) as store:
        pace = Pace(part.pacing.max_bytes_per_sec)
        for low, end in ranges:
            yield niced(part.pacing.nice, partial(store.compact_rewrite, part.pid, low, end,
                                                  keys.value, rules, pace=pace))


def keys_on_spark(spark: SparkContext, part: Partition, low: int, end: int,
                  split: int = SPLIT) -> dict[bytes, int]:
    ranges = spans(low, end, split)
    keys: dict[bytes, int] = {}
    if ranges:
        # collect() answers in the ranges' order, which is the offsets' order.
        for found in spark.parallelize(ranges, len(ranges)).mapPartitions(
                lambda r: range_keys(part, r)).collect():
            keys.update(found)
    return keys


def rewrite_on_spark(spark: SparkContext, part: Partition, low: int, end: int,
                     keys: dict[bytes, int], rules: Rules, split: int = SPLIT) -> Counts:
    ranges = spans(low, end, split)
    if not ranges:
        return 0, 0, 0
    shared = spark.broadcast(keys)
    try:
        done = spark.parallelize(ranges, len(ranges)).mapPartitions(
            lambda r: range_rewrite(part, shared, rules, r)).collect()
    finally:
        shared.unpersist()
    removed, reclaimed, changed = (sum(c[i] for c in done) for i in range(3))
    return removed, reclaimed, changed


def per_task(spark: SparkContext, low: int, end: int, split: int) -> int:
    """Offsets a task of a pass over [low, end): `split` at least, and no more tasks than the
    cluster runs at once (`defaultParallelism`). A task beyond them waits for a core, and each
    costs its own start (0.15 s of 0.8 s a task of a million records here, measured at 10M)."""
    return max(split, -(-(end - low) // max(1, spark.defaultParallelism)))


def stages(rules: Rules) -> list[Rules]:
    """Pass 2's stages, each run over every range before the next starts: the tombstones
    kept, then dropped by the rules (see the module's docstring)."""
    return [rules._replace(tombstones_before=KEEP_TOMBSTONES), rules]


def compact_on_spark(spark: SparkContext, part: Partition, low: int, end: int, rules: Rules,
                     split: int = SPLIT, *, progress: Callable[[int, int], None] | None = None,
                     every: float | None = None, pacing: Pacing = UNPACED,
                     here_below: int = 0) -> Counts:
    """Both passes over [low, end) (pass 2 in its two stages, see the module's docstring);
    `progress(done, total)` ranges when given, each range counted once per pass or stage;
    `pacing` for the pass as a whole (see the module's docstring). Pass 2 runs here, in the
    driver, in one stage in offset order as in the worker, when the batches it must read (those
    holding a key's latest record: the others go on their headers) are under `here_below`
    bytes: for a partition written over and over, two Spark jobs cost more than that pass."""
    split = per_task(spark, low, end, split)
    ranges = len(spans(low, end, split))
    part = replace(part, pacing=pacing.shared(ranges))

    def step(n: int, action: Callable[[], T]) -> T:
        if progress is None:
            return action()
        return run_watched(spark, action,
                           lambda tasks: progress(n * ranges + min(ranges, tasks), 3 * ranges),
                           every=every, what="streamgate-compaction")

    keys = step(0, lambda: keys_on_spark(spark, part, low, end, split))
    with _opened(part) as store:
        if store.holding_bytes(part.pid, low, end, keys) < here_below:
            done = niced(pacing.nice, lambda: store.compact_rewrite(
                part.pid, low, end, keys, rules, pace=Pace(pacing.max_bytes_per_sec)))
            if progress is not None:
                progress(3 * ranges, 3 * ranges)
            return done
    keeping, dropping = stages(rules)
    first = step(1, lambda: rewrite_on_spark(spark, part, low, end, keys, keeping, split))
    second = step(2, lambda: rewrite_on_spark(spark, part, low, end, keys, dropping, split))
    if progress is not None:
        progress(3 * ranges, 3 * ranges)
    removed, reclaimed, changed = (a + b for a, b in zip(first, second, strict=True))
    return removed, reclaimed, changed
