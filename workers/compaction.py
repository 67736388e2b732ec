"""The Spark side of log compaction (issue 31): the `Passes` the worker hands to
replication/services/compaction.py, which run a large partition's two passes as Spark jobs
(workers/spark/compaction.py) on SPARK_MASTER_URL's cluster, or a local session without it.
Partitions under STREAMGATE_COMPACT_SPARK_BYTES, and stores Spark tasks cannot open (SQLite,
one file of one process), are compacted in the worker as before: Spark's start and its
tasks' set-up cost seconds the worker spends compacting a few hundred MB. A Spark pass keeps
to STREAMGATE_COMPACT_MAX_BYTES_PER_SEC as a whole, its tasks running at once sharing it, and
its tasks run niced by STREAMGATE_COMPACT_NICE (workers/spark/compaction.py)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import structlog
from django.conf import settings

from replication.engine.compaction import Rules
from replication.engine.compactstore import NOTE_EVERY, CompactionMethods, Counts
from replication.engine.pacing import UNPACED, Pacing

log = structlog.get_logger(__name__)


@dataclass
class SparkPasses:
    """Compaction's Passes (replication/engine/compactstore.py) on Spark, for partitions of
    `min_bytes` or more; their progress noted in the store and logged (`label`: the stream)."""

    min_bytes: int
    split: int
    label: str = ""
    pacing: Pacing = UNPACED

    @classmethod
    def from_settings(cls, label: str = "") -> SparkPasses:
        return cls(settings.COMPACT_SPARK_BYTES, settings.COMPACT_SPARK_SPLIT, label,
                   Pacing(settings.COMPACT_MAX_BYTES_PER_SEC, settings.COMPACT_NICE))

    def takes(self, store: CompactionMethods, pid: int, size: int) -> bool:
        return size >= self.min_bytes and getattr(store, "url", None) is not None

    def run(self, store: CompactionMethods, pid: int, low: int, end: int,
            rules: Rules) -> Counts:
        from workers.spark.compaction import Partition, compact_on_spark
        from workers.spark.session import borrowed_context

        part = Partition(store.url, pid)  # type: ignore[attr-defined]
        with borrowed_context(settings.SPARK_MASTER_URL or None) as spark:
            return compact_on_spark(spark, part, low, end, rules, self.split,
                                    progress=Progress(store, pid, self.label),
                                    pacing=self.pacing, here_below=self.min_bytes)


class Progress:
    """A running Spark compaction's tasks done of its tasks, noted in the store (`stream
    info`, the API and the stream page show it: services/compaction.py) and logged, every
    NOTE_EVERY seconds and at its end. Spark's watcher calls it every half second even when
    no task finished, so the note's time moves while the pass lives."""

    def __init__(self, store: CompactionMethods, pid: int, label: str) -> None:
        self.store, self.pid, self.label, self.last = store, pid, label, 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - self.last < NOTE_EVERY:
            return
        self.last = now
        log.info("compaction_progress", stream=self.label, pid=self.pid, tasks_done=done,
                 tasks=total, percent=round(100 * done / total) if total else 100)
        try:
            self.store.note_compaction_progress(self.pid, done, total, int(time.time() * 1000))
        except Exception as err:  # a progress figure must never fail the pass
            log.warning("compaction_progress_not_noted", pid=self.pid, error=str(err))
