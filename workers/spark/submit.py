"""What the spark-submit entry files share: the spec as JSON in, progress and the result as
JSON lines out (the Celery side reads them from the driver's standard output).

The spec comes in the driver's environment (SPEC_VARIABLE), never its arguments: it carries the
stores' URLs, passwords included, and every local user sees every process's command line
(`ps`), while a process's environment is its owner's alone (/proc/PID/environ). The executors
get the URLs inside their tasks, over Spark's own connection to the driver."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyspark
from pyspark import SparkContext

from workers.spark.background import Background
from workers.spark.jobs import Spec
from workers.spark.ranges import Side
from workers.spark.session import java_options, spark_context, stop

PREFIX = "streamgate-job "  # marks our lines among Spark's own output
SPEC_VARIABLE = "STREAMGATE_JOB_SPEC"
# How long a driver on a cluster may go without a single executor before it gives up.
EXECUTOR_WAIT_VARIABLE = "STREAMGATE_SPARK_EXECUTOR_WAIT"
EXECUTOR_WAIT = 60.0  # seconds: a lost worker restarted on a loaded machine registers in 10-30
USAGE = (f"usage: {SPEC_VARIABLE}='<spec as JSON>' spark-submit <job file>\n"
         "The spec carries store URLs, passwords included: it goes in the environment, never "
         "on a command line (`ps` shows those to every local user).")


def spec_to_json(spec: Spec) -> str:
    return json.dumps({"src": vars(spec.src), "dst": vars(spec.dst), "topics": spec.topics,
                       "link": spec.link, "threads": spec.threads, "repair": spec.repair})


def spec_environment(spec: Spec) -> dict[str, str]:
    """What a job's driver process needs in its environment, beside the caller's own."""
    return {SPEC_VARIABLE: spec_to_json(spec)}


def submit_command(entry: str, master: str) -> list[str]:
    """spark-submit of an entry file of this package ("copystream_job.py") to `master`, in
    client mode: the driver runs here, the executors wherever the master puts them."""
    return [str(Path(pyspark.__file__).parent / "bin" / "spark-submit"), "--master", master,
            "--conf", f"spark.driver.extraJavaOptions={java_options()}",
            str(Path(__file__).parent / entry)]


def submit_environment(spec: Spec) -> dict[str, str]:
    """The whole environment of a submitted job's driver: the spec, and this interpreter for
    the executors' Python (it has psycopg and the project installed)."""
    return {**os.environ, "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
            **spec_environment(spec)}


def _side(raw: dict) -> Side:
    return Side(raw["url"], raw["stream"], tuple(tuple(p) for p in raw.get("placed", ())))


def spec_from_json(text: str) -> Spec:
    raw = json.loads(text)
    return Spec(_side(raw["src"]), _side(raw["dst"]), raw["topics"], raw["link"],
                raw["threads"], raw["repair"])


def emit(kind: str, **values: object) -> None:
    print(PREFIX + json.dumps({"kind": kind, **values}), flush=True)


def main(run: Callable, argv: list[str]) -> int:
    if argv or SPEC_VARIABLE not in os.environ:
        print(USAGE, file=sys.stderr)
        return 2
    # Out of the environment the driver's Python workers and any other child would inherit.
    spec = spec_from_json(os.environ.pop(SPEC_VARIABLE))
    spark = spark_context()
    watch = ExecutorWatch(spark, float(os.environ.get(EXECUTOR_WAIT_VARIABLE, EXECUTOR_WAIT)))
    try:
        with watch:
            result = run(spark, spec, lambda *figures: emit("progress", figures=figures))
    except Exception as error:
        emit("error", error=watch.reason or f"{type(error).__name__}: {error}")
        return 1
    finally:
        stop(spark)
    emit("result", result=result)
    return 0


class ExecutorWatch(Background):
    """Ends a job whose driver has had no executor for `wait` seconds. A standalone master
    keeps an application waiting for resources ("Initial job has not accepted any resources")
    as long as no worker offers cores, say after its only worker was lost: the driver would
    wait for ever, and with it the Celery worker that ran it and every job queued behind. A
    job failed this way is run again later; a catch-up's link replicates on meanwhile.
    Local mode runs its tasks in the driver and is not watched."""

    name = "executor-watch"

    def __init__(self, spark: SparkContext, wait: float) -> None:
        self.spark, self.wait, self.reason = spark, wait, ""
        super().__init__()

    def begin(self) -> bool:
        return not self.spark.master.startswith("local")

    def executors(self) -> int:
        """Executors registered now (the driver's own block manager counts in the status)."""
        return self.spark._jsc.sc().getExecutorMemoryStatus().size() - 1

    def loop(self) -> None:
        since = time.monotonic()
        while not self.stop.wait(1.0):
            if self.executors() > 0:
                since = time.monotonic()
            elif time.monotonic() - since >= self.wait:
                self.reason = (
                    f"no Spark executor for {self.wait:.0f} s: the master at "
                    f"{self.spark.master} has no live worker with free cores (start a worker "
                    "or free its cores); the job stopped and may be run again")
                self.spark.cancelAllJobs()
                return
