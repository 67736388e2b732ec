"""The Spark side of log compaction (issue 31): the `Passes` the worker hands to
replication/services/compaction.py, which run a large partition's two passes as Spark jobs
(workers/spark/compaction.py) on SPARK_MASTER_URL's cluster, or a local session without it.
Partitions under STREAMGATE_COMPACT_SPARK_BYTES, and stores Spark tasks cannot open (SQLite,
one file of one process), are compacted in the worker as before: Spark's start and its
tasks' set-up cost seconds the worker spends compacting a few hundred MB."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog
from django.conf import settings

from replication.engine.compaction import Rules
from replication.engine.compactstore import CompactionMethods, Counts

log = structlog.get_logger(__name__)
LOG_EVERY = 5.0  # seconds between a running compaction's progress lines


@dataclass
class SparkPasses:
    """Compaction's Passes (replication/engine/compactstore.py) on Spark, for partitions of
    `min_bytes` or more; `progress(pid, done, total)` as its tasks finish, when given."""

    min_bytes: int
    split: int
    progress: Callable[[int, int, int], None] | None = None

    @classmethod
    def from_settings(cls, progress: Callable[[int, int, int], None] | None = None
                      ) -> SparkPasses:
        return cls(settings.COMPACT_SPARK_BYTES, settings.COMPACT_SPARK_SPLIT, progress)

    def takes(self, store: CompactionMethods, pid: int, size: int) -> bool:
        return size >= self.min_bytes and getattr(store, "url", None) is not None

    def run(self, store: CompactionMethods, pid: int, low: int, end: int,
            rules: Rules) -> Counts:
        from workers.spark.compaction import Partition, compact_on_spark
        from workers.spark.session import borrowed_context

        part, report = Partition(store.url, pid), self.progress  # type: ignore[attr-defined]
        with borrowed_context(settings.SPARK_MASTER_URL or None) as spark:
            return compact_on_spark(
                spark, part, low, end, rules, self.split,
                progress=None if report is None else lambda d, t: report(pid, d, t))


def logged_progress(stream: str) -> Callable[[int, int, int], None]:
    """A progress callback that logs a running Spark compaction's share of tasks done, every
    LOG_EVERY seconds and at its end."""
    last = [0.0]

    def report(pid: int, done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - last[0] < LOG_EVERY:
            return
        last[0] = now
        log.info("compaction_progress", stream=stream, pid=pid, tasks_done=done, tasks=total,
                 percent=round(100 * done / total) if total else 100)

    return report
