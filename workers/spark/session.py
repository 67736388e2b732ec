"""The Spark session the jobs run on: one per process, reused by every job it runs."""

from __future__ import annotations

import logging
import os
import sys

from pyspark.sql import SparkSession


def spark_session(master: str | None = None) -> SparkSession:
    """Local mode (`local[*]`) unless a master is given (SPARK_MASTER_URL, or spark-submit's
    --master, which the builder then inherits). The driver binds to loopback and runs no web
    UI: nothing listens beyond what the job needs."""
    # Executors' Python must be this interpreter: it has psycopg and the project installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.appName("streamgate")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.bindAddress", os.environ.get("SPARK_DRIVER_BIND", "127.0.0.1"))
        .config("spark.python.worker.reuse", "true")
        # The driver JVM only schedules tasks (the work runs in Python workers and the
        # databases): its C2 compiler threads would only compete for the cores at start-up,
        # which a fresh job process pays in full (1-3 s measured on 2 cores). Where the JVM
        # is already running (spark-submit), this has no effect.
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1")
    )
    if master:
        builder = builder.master(master)
    # py4j logs each closed connection at INFO, some at interpreter exit after logging is gone.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
