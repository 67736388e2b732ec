"""The Spark side of a large partition's move (issue 33): the `bulk` copier the interfaces hand
to replication/services/partitionmove.py, run on SPARK_MASTER_URL's cluster, or a local
session without it; with a `progress` callback (a move's run), the job's finished tasks are
reported as it goes."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings


def spark_bulk(source_url: str, target_url: str, table: str, key: str, spid: int, tpid: int,
               start: int, end: int, *, progress: Callable[[int, int], None] | None = None
               ) -> None:
    from workers.spark.movecopy import MoveCopy, copy_on_spark, copy_watched
    from workers.spark.session import borrowed_context

    move = MoveCopy(source_url, target_url, table, key, spid, tpid)
    with borrowed_context(settings.SPARK_MASTER_URL or None) as spark:
        if progress is None:
            copy_on_spark(spark, move, start, end, settings.MOVE_SPARK_SPLIT)
        else:
            copy_watched(spark, move, start, end, settings.MOVE_SPARK_SPLIT, progress=progress)
