"""What the spark-submit entry files share: the spec as JSON in, progress and the result as
JSON lines out (the Celery side reads them from the driver's standard output)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

from workers.spark.jobs import Spec
from workers.spark.ranges import Side
from workers.spark.session import spark_context, stop

PREFIX = "streamgate-job "  # marks our lines among Spark's own output


def spec_to_json(spec: Spec) -> str:
    return json.dumps({"src": vars(spec.src), "dst": vars(spec.dst), "topics": spec.topics,
                       "link": spec.link, "threads": spec.threads, "repair": spec.repair})


def spec_from_json(text: str) -> Spec:
    raw = json.loads(text)
    return Spec(Side(**raw["src"]), Side(**raw["dst"]), raw["topics"], raw["link"],
                raw["threads"], raw["repair"])


def emit(kind: str, **values: object) -> None:
    print(PREFIX + json.dumps({"kind": kind, **values}), flush=True)


def main(run: Callable, argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: spark-submit <job file> '<spec as JSON>'", file=sys.stderr)
        return 2
    spark = spark_context()
    try:
        result = run(spark, spec_from_json(argv[0]), lambda *figures: emit(
            "progress", figures=figures))
    except Exception as error:
        emit("error", error=f"{type(error).__name__}: {error}")
        return 1
    finally:
        stop(spark)
    emit("result", result=result)
    return 0
