"""The Spark side of a large partition's move (issue 33): the `bulk` copier the interfaces hand
to replication/services/partitionmove.py, run on SPARK_MASTER_URL's cluster, or a local
session without it."""

from __future__ import annotations

from django.conf import settings


def spark_bulk(source_url: str, target_url: str, table: str, key: str, spid: int, tpid: int,
               start: int, end: int) -> None:
    from workers.spark.movecopy import MoveCopy, copy_on_spark
    from workers.spark.session import borrowed_context

    with borrowed_context(settings.SPARK_MASTER_URL or None) as spark:
        copy_on_spark(spark, MoveCopy(source_url, target_url, table, key, spid, tpid), start,
                      end, settings.MOVE_SPARK_SPLIT)
