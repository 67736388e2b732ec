"""`python -m workers.spark.cds`: make the Spark drivers' class-data-sharing archive
(workers/spark/session.py). Run by the Makefile's install step and the Dockerfile; never fails
an install for want of a faster start."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pyspark import SparkContext

from workers.spark.session import ARCHIVE, java_options, spark_context


def make_archive(archive: Path = ARCHIVE) -> str:
    """Start a driver that records the classes it loads, run a job of the jobs' shape, and
    let its JVM exit, which writes the archive; returns what was done. Written under a
    temporary name and renamed, so a driver never maps half an archive."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_name(f"{archive.name}.{os.getpid()}.partial")
    context = spark_context(options=java_options(partial, make=True))
    group = "archive"
    context.setJobGroup(group, "class-data-sharing archive")
    context.parallelize(range(4), 2).mapPartitions(lambda part: [sum(part)]).collect()
    context.statusTracker().getJobIdsForGroup(group)
    jvm = SparkContext._gateway.proc  # the driver JVM, which exits when its stdin closes
    context.stop()
    jvm.stdin.close()
    jvm.wait(timeout=120)
    if not partial.exists():
        return f"the JVM wrote no archive (exit status {jvm.returncode}); drivers start without one"
    partial.replace(archive)
    return f"wrote {archive} ({archive.stat().st_size >> 20} MB)"


if __name__ == "__main__":
    if sys.argv[1:]:
        sys.exit("usage: python -m workers.spark.cds   (it takes no arguments; the archive "
                 f"goes to {ARCHIVE})")
    try:
        print(make_archive())
    except Exception as error:
        print(f"no class-data-sharing archive for Spark drivers: {error}", file=sys.stderr)
