"""The jobs' drivers: plan ranges from the stores' watermarks, run them as Spark tasks, report
progress while they run. No Django here (DESIGN.md); the Celery side (workers/jobs.py) turns
a Job record into a spec and the progress calls into updates of that record."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from itertools import chain
from uuid import UUID

from pyspark import SparkContext

from replication.engine.store import UnknownTopic
from replication.engine.storebase import MessageStore
from workers.spark.background import Background
from workers.spark.ranges import BUCKET, Range, Side, Work, copy_ranges, diff_ranges, stores

# (messages done, messages total, bytes done, bytes total)
Progress = Callable[[int, int, int, int], None]
DIFF_SPLIT = 250_000  # messages per diff task: many tasks keep every executor busy
TICK = 1.0  # seconds between progress reports


@dataclass(frozen=True)
class Spec:
    src: Side
    dst: Side
    topics: dict[str, int]  # the source's topics to handle -> partitions
    link: str = ""
    threads: int | None = None  # copystream -numthreads: at most this many tasks at once
    repair: bool = False  # diffstreams -repair


@dataclass(frozen=True)
class _Pair:
    """Both streams' stores, open for the length of one job."""

    src: MessageStore
    src_stream: UUID
    dst: MessageStore
    dst_stream: UUID
    spec: Spec | None = None
    others: dict[str, MessageStore] = field(default_factory=dict)  # other store groups, by URL

    def marks(self, side: str, topic: str) -> dict[int, tuple[int, int]]:
        store, stream = (self.src, self.src_stream) if side == "src" else (self.dst,
                                                                           self.dst_stream)
        try:
            marks = store.watermarks(stream, topic)
        except UnknownTopic:
            return {}
        placed = getattr(self.spec, side).placed if self.spec else ()
        for t, partition, url in placed:  # each partition's marks from the group holding it
            if t == topic:
                with suppress(UnknownTopic):
                    marks[partition] = self.others[url].watermarks(stream, topic)[partition]
        return marks

    def average_size(self, topics: dict[str, int]) -> float:
        """Bytes per message at the source, to turn a count of messages into bytes."""
        messages = size = 0
        for topic in topics:
            try:
                stats = self.src.partition_stats(self.src_stream, topic)
            except UnknownTopic:
                continue
            messages += sum(s.messages for s in stats)
            size += sum(s.bytes for s in stats)
        return size / messages if messages else 0.0


@contextmanager
def _pair(spec: Spec) -> Iterator[_Pair]:
    others = sorted({url for side in (spec.src, spec.dst) for _, _, url in side.placed})
    with stores(spec.src.url, spec.dst.url, *others) as (src, dst, *more):
        yield _Pair(src, UUID(spec.src.stream), dst, UUID(spec.dst.stream), spec,
                    dict(zip(others, more, strict=True)))


def _run(spark: SparkContext, items: list, slices: int, task: Callable) -> list:
    if not items:
        return []
    return spark.parallelize(items, slices).mapPartitions(task).collect()


# --- copystream ------------------------------------------------------------------------------


def plan_copy(pair: _Pair, topics: dict[str, int]) -> list[Range]:
    """One range per partition: from where the destination ends (or the source begins) to the
    source's end now. Messages produced after this are the replication engine's to move."""
    ranges = []
    for topic, partitions in sorted(topics.items()):
        pair.dst.ensure_topic(pair.dst_stream, topic, partitions)
        theirs = pair.marks("dst", topic)
        for partition, (low, high) in sorted(pair.marks("src", topic).items()):
            start = max(low, theirs.get(partition, (0, 0))[1])
            if high > start:
                ranges.append(Range(topic, partition, start, high, origin_low=low))
    return ranges


def copystream(spark: SparkContext, spec: Spec, progress: Progress | None = None) -> dict:
    with _pair(spec) as pair:
        ranges = plan_copy(pair, spec.topics)
        total = sum(r.size for r in ranges)
        work = Work(spec.src, spec.dst, link=spec.link)
        shares = _deal(ranges, spec.threads or spark.defaultParallelism)
        average = pair.average_size(spec.topics)
        with _Reporter(progress, lambda: _copied(pair, ranges), total, average):
            rows = _run(spark, shares, len(shares),
                        lambda part: copy_ranges(work, chain.from_iterable(part)))
    messages, size = sum(r[2] for r in rows), sum(r[3] for r in rows)
    if progress:
        progress(total, total, size, size)
    return {"messages": messages, "bytes": size, "partitions": len(ranges), "planned": total}


def _deal(ranges: list[Range], tasks: int) -> list[list[Range]]:
    """The ranges in at most `tasks` shares of about equal messages, one Spark task each: a
    task per executor core rather than per partition, since each task pays for its Python
    worker's set-up and two database connections (~0.3 s on 2 cores), and PostgreSQL 15
    extends a table one page at a time, so COPYs into one destination table beyond a few
    gain nothing. Largest first, each to the lightest share."""
    shares: list[list[Range]] = [[] for _ in range(max(1, min(tasks, len(ranges))))]
    for r in sorted(ranges, key=lambda r: -r.size):
        min(shares, key=lambda share: sum(x.size for x in share)).append(r)
    return [share for share in shares if share]


def _copied(pair: _Pair, ranges: list[Range]) -> int:
    done = 0
    for topic in {r.topic for r in ranges}:
        marks = pair.marks("dst", topic)
        for r in (r for r in ranges if r.topic == topic):
            done += min(r.end, max(r.start, marks.get(r.partition, (0, 0))[1])) - r.start
    return done


# --- diffstreams -----------------------------------------------------------------------------


def diffstreams(spark: SparkContext, spec: Spec, progress: Progress | None = None) -> dict:
    with _pair(spec) as pair:
        partitions, tasks = _plan_diff(pair, spec.topics)
        average = pair.average_size(spec.topics)
    total = sum(r.size for task in tasks for r in task)
    work = Work(spec.src, spec.dst)
    group = f"diff-{uuid.uuid4().hex}"
    spark.setJobGroup(group, "diffstreams")
    with _Reporter(progress, _tasks_done(spark, group, total, len(tasks)), total, average):
        rows = _compare(spark, work, tasks)
    for topic, partition, offset in rows:
        entry = partitions[(topic, partition)]
        first = entry["firstDifference"]
        if offset is not None and (first is None or offset < first):
            entry["firstDifference"] = offset
    differing = [p for p in partitions.values() if p["firstDifference"] is not None]
    result = {"compared": total, "equal": not differing, "differing": len(differing),
              "partitions": list(partitions.values())}
    if spec.repair and differing:
        result["repaired"] = _repair(spark, spec, differing)
        # The proof: a second comparison, without repair.
        result["equalAfterRepair"] = diffstreams(spark, replace(spec, repair=False))["equal"]
    if progress:
        progress(total, total, int(total * average), int(total * average))
    return result


def diff_on_spark(spark: SparkContext, work: Work,
                  ranges: list[Range]) -> list[tuple[str, int, int | None]]:
    """The first difference in each range (one per partition), compared by Spark tasks over
    the windows a diffstreams job cuts: the domain's comparisons that are too large to run in
    one process (workers/compare.py)."""
    tasks = []
    for topic in sorted({r.topic for r in ranges}):
        tasks += _windows(topic, {r.partition: (r.start, r.end) for r in ranges
                                  if r.topic == topic})
    return _compare(spark, work, tasks)


def _compare(spark: SparkContext, work: Work,
             tasks: list[list[Range]]) -> list[tuple[str, int, int | None]]:
    return _run(spark, tasks, len(tasks), lambda part: diff_ranges(work, chain.from_iterable(part)))


def _plan_diff(pair: _Pair, topics: dict[str, int]) -> tuple[dict, list[list[Range]]]:
    """Each partition's report entry, and the Spark tasks: lists of ranges to compare."""
    partitions, tasks = {}, []
    for topic, count in sorted(topics.items()):
        ours, theirs = pair.marks("src", topic), pair.marks("dst", topic)
        compared: dict[int, tuple[int, int]] = {}
        for p in range(count):
            (slo, shi), (dlo, dhi) = ours.get(p, (0, 0)), theirs.get(p, (0, 0))
            lo, hi = max(slo, dlo), min(shi, dhi)
            partitions[(topic, p)] = {
                "topic": topic, "partition": p, "source": [slo, shi],
                "destination": [dlo, dhi] if p in theirs else None,
                "compared": max(0, hi - lo),
                # A longer side differs where the shorter one ends; a missing partition
                # from the source's first message.
                "firstDifference": (slo if p not in theirs else None if shi == dhi
                                    else max(lo, hi)),
            }
            if hi > lo:
                compared[p] = (lo, hi)
        tasks += _windows(topic, compared)
    return partitions, tasks


def _windows(topic: str, compared: dict[int, tuple[int, int]]) -> list[list[Range]]:
    """A task per window of equal offsets across the topic's partitions, about DIFF_SPLIT
    messages in all: producers write a topic's partitions side by side, so their rows of equal
    offsets share heap pages, which one task then reads once (pg.BUCKETS)."""
    width = max(BUCKET, DIFF_SPLIT // max(1, len(compared)) // BUCKET * BUCKET)
    windows: dict[int, list[Range]] = {}
    for p, (lo, hi) in sorted(compared.items()):
        for a in range(lo // width * width, hi, width):
            windows.setdefault(a, []).append(Range(topic, p, max(lo, a), min(hi, a + width)))
    return [windows[a] for a in sorted(windows)]


def _repair(spark: SparkContext, spec: Spec, differing: list[dict]) -> list[dict]:
    """Recopy each differing partition from its first difference: cut the destination back
    there, then copy the source's rest with the copy's own (idempotent) tasks."""
    with _pair(spec) as pair:
        for p in differing:
            pair.dst.ensure_topic(pair.dst_stream, p["topic"], p["partition"] + 1)
            pair.dst.truncate(pair.dst_stream, p["topic"], p["partition"], p["firstDifference"])
    ranges = [Range(p["topic"], p["partition"], p["firstDifference"], p["source"][1],
                    origin_low=p["source"][0]) for p in differing]
    work = Work(spec.src, spec.dst)
    rows = _run(spark, ranges, len(ranges), lambda part: copy_ranges(work, part))
    return [{"topic": t, "partition": p, "from": r.start, "messages": n}
            for (t, p, n, _), r in zip(rows, ranges, strict=True)]


def _tasks_done(spark: SparkContext, group: str, total: int, tasks: int) -> Callable[[], int]:
    """Messages compared so far, from Spark's count of finished tasks."""
    tracker = spark.statusTracker()
    average = total / max(1, tasks)

    def done() -> int:
        finished = 0
        for job in tracker.getJobIdsForGroup(group):
            info = tracker.getJobInfo(job)
            for stage in info.stageIds if info else ():
                stage_info = tracker.getStageInfo(stage)
                finished += stage_info.numCompletedTasks if stage_info else 0
        return int(finished * average)

    return done


class _Reporter(Background):
    """Calls `progress` every TICK seconds from a thread while the Spark action runs."""

    name = "job-progress"

    def __init__(self, progress: Progress | None, done: Callable[[], int], total: int,
                 average: float) -> None:
        self.progress, self.done, self.total, self.average = progress, done, total, average
        super().__init__()

    def begin(self) -> bool:
        if self.progress:
            self.progress(0, self.total, 0, int(self.total * self.average))
        return self.progress is not None

    def loop(self) -> None:
        while not self.stop.wait(TICK):
            try:
                done = min(self.total, self.done())
            except Exception:  # a progress figure must never fail the job
                continue
            self.progress(done, self.total, int(done * self.average),
                          int(self.total * self.average))
