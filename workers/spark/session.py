"""The Spark context the jobs run on: one per process, reused by every job it runs.

A fresh driver's start-up is most of a small job's time, so three things keep it short:
- a plain SparkContext: the jobs use Spark's core (an RDD of ranges per job), never Spark SQL,
  whose SparkSession took 1.5-2 s more of a fresh driver's start on 2 cores;
- a class-data-sharing archive of the classes a driver JVM loads (Java's AppCDS), made once
  per installation by `python -m workers.spark.cds` (the Makefile's install step and the
  Dockerfile run it): the context starts in ~1.2 s rather than ~2.5 s. Without it, or when
  the JVM refuses it (another Java), the driver starts the usual way;
- `stop` does not wait out PySpark's accumulator server (up to a second).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyspark
from pyspark import SparkConf, SparkContext

# Per interpreter (a virtualenv, an image) and Spark version: the archive names the jars'
# paths and sizes, so it serves only the installation that made it.
ARCHIVE = Path(sys.prefix) / "share" / "streamgate" / f"spark-{pyspark.__version__}.jsa"
# The driver JVM only schedules tasks (the work runs in Python workers and the databases):
# its C2 compiler threads would only compete for the cores at start-up, which a fresh job
# process pays in full (1-3 s measured on 2 cores). The JVM's own warnings go to standard
# error: standard output carries the job's lines (workers/spark/submit.py).
JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -Xlog:all=warning:stderr"


def java_options(archive: Path = ARCHIVE, *, make: bool = False) -> str:
    """The driver JVM's options: with the archive if there is one, or making it at exit."""
    if make:  # errors only: the dump notes each class it leaves out (hundreds of lines)
        return (f"{JAVA_OPTIONS} -Xlog:disable -Xlog:all=error:stderr "
                f"-XX:ArchiveClassesAtExit={archive}")
    return f"{JAVA_OPTIONS} -XX:SharedArchiveFile={archive}" if archive.exists() else JAVA_OPTIONS


def spark_context(master: str | None = None, *, options: str | None = None) -> SparkContext:
    """Local mode (`local[*]`, spark-submit's default) unless a master is given
    (SPARK_MASTER_URL, or spark-submit's --master, which the configuration then inherits).
    The driver binds to loopback and runs no web UI: nothing listens beyond what the job
    needs."""
    # Executors' Python must be this interpreter: it has psycopg and the project installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    conf = (
        SparkConf().setAppName("streamgate")
        .set("spark.ui.enabled", "false")
        .set("spark.ui.showConsoleProgress", "false")
        .set("spark.driver.bindAddress", os.environ.get("SPARK_DRIVER_BIND", "127.0.0.1"))
        .set("spark.python.worker.reuse", "true")
        # A task's result over 1 MiB (the default) is kept as a block the driver fetches
        # through its block manager's advertised address, which a loopback-bound local driver
        # refuses (a compaction's key map of a range: workers/spark/compaction.py); up to
        # this, results come back in the task's own message (under spark.rpc.message.maxSize).
        .set("spark.task.maxDirectResultSize", str(64 << 20))
        # Where the JVM is already running (spark-submit), this has no effect: workers/jobs.py
        # passes the same options to spark-submit.
        .set("spark.driver.extraJavaOptions", options or java_options())
    )
    if master:
        conf.setMaster(master)
    # py4j logs each closed connection at INFO, some at interpreter exit after logging is gone.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    context = SparkContext.getOrCreate(conf)
    context.setLogLevel("WARN")
    return context


def stop(context: SparkContext) -> None:
    """Stop a driver about to exit. SparkContext.stop() then waits for PySpark's accumulator
    server, whose handler polls its connection once a second: up to a second per job process
    for a thread that ends with the process anyway. The JVM side stops in full."""
    context._accumulatorServer = None  # see above
    context.stop()


_borrowed = threading.Lock()


@contextmanager
def borrowed_context(master: str | None) -> Iterator[SparkContext]:
    """A context for one call of a long-lived process (a failback's copy or a comparison in the
    portal). In local mode it stays for the next call: its start is most of a small call's
    time. On a cluster it is stopped after the call, one call at a time: a standalone master
    keeps the cores it gave an application until the application ends, so a context left open
    in a portal would starve every job after it (the chaos soak's catch-ups waited for ever on
    a failback's copy that held both cores of the worker)."""
    if not master:
        yield spark_context()
        return
    with _borrowed:
        context = spark_context(master)
        try:
            yield context
        finally:
            context.stop()  # in full: this process goes on, its accumulator server must not
