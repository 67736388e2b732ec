"""A Spark action run while this thread reports its finished tasks: the progress of a
partition move's bulk copy (movecopy.py) and of a large partition's compaction
(compaction.py). The action runs on a thread of its own in a job group of its own, whose
tasks Spark's status tracker counts."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import TypeVar

from pyspark import InheritableThread, SparkContext

WATCH = 0.5  # seconds between looks at a watched action's tasks
T = TypeVar("T")


def run_watched(spark: SparkContext, action: Callable[[], T], progress: Callable[[int], None],
                *, every: float | None = None, what: str = "streamgate") -> T:
    """`action()` (Spark jobs), calling `progress(finished tasks)` on this thread every
    `every` seconds until it ends; its error raised here."""
    group, outcome = f"{what}-{uuid.uuid4().hex}", {}

    def run() -> None:
        spark.setJobGroup(group, what)
        try:
            outcome["done"] = action()
        except BaseException as err:  # raised again on the watching thread
            outcome["error"] = err

    worker = InheritableThread(target=run, daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(every or WATCH)
        progress(finished_tasks(spark, group))
    if "error" in outcome:
        raise outcome["error"]
    return outcome["done"]


def finished_tasks(spark: SparkContext, group: str) -> int:
    tracker = spark.statusTracker()
    done = 0
    for job in tracker.getJobIdsForGroup(group):
        info = tracker.getJobInfo(job)
        for stage in info.stageIds if info is not None else ():
            found = tracker.getStageInfo(stage)
            done += found.numCompletedTasks if found is not None else 0
    return done
