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
    )
    if master:
        builder = builder.master(master)
    # py4j logs each closed connection at INFO, some at interpreter exit after logging is gone.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
