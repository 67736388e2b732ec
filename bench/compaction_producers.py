"""What a compaction pass costs the producers beside it (issue 31: their p99 within 1.5x):
`python -m bench compaction --producers`. A production-mode portal and one listener on the
same local PostgreSQL server as the template partition (bench/quotas.py's `quiet_stack`), and
its quiet librdkafka producer (`quiet_latencies`: `--rate` messages of 1 KB a second, acks=all,
each message's time to acknowledgement). Each run has three phases: the producer alone for
`--seconds`; then during a compaction of a fresh clone in the worker's way (in a process of
its own, as the worker is not the listener's process, and so that its Python does not hold
this process's GIL against the producer's callbacks); then during one through the Spark passes
(a local session of bench/compaction.py's `OnSpark`, driven from a process of its own for the
same reason: the driver is the worker's process, and runs pass 2 there). The producer
starts with the pass and stops measuring when it ends, so its window is the pass; the clone is
made before (`CREATE DATABASE ... TEMPLATE` writes the whole partition) and the server given
a few seconds to settle. Printed: p50 and p99 per phase and p99 against alone, and the passes'
msg/s, medians over `--runs`.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time
from concurrent.futures import Executor, ProcessPoolExecutor

from bench import compaction
from bench.quotas import latency_table, quiet_latencies, quiet_stack
from replication.engine.pacing import Pacing

PHASES = ("alone", "during compaction, in process", "during compaction, Spark")
SETTLE = 5.0  # seconds after a clone, before the producer is measured


_spark: compaction.OnSpark | None = None  # the Spark driver process's session


def _start_spark(split: int, pacing: Pacing) -> None:
    global _spark
    _spark = compaction.OnSpark(split, pacing)


def _compact(db: str, on_spark: bool, pacing: Pacing) -> tuple[float, int]:
    return compaction.compact(db, _spark if on_spark else None, pacing)


def _during(executor: Executor, db: str, on_spark: bool, port: int, token: str, rate: int,
            pacing: Pacing) -> tuple[list[float], float]:
    """The producer's latencies while one pass of `db` runs, and the pass's seconds."""
    pass_ = executor.submit(_compact, db, on_spark, pacing)
    took = quiet_latencies(port, token, rate, float("inf"), until=pass_.done)
    seconds, _removed = pass_.result()
    return took, seconds


def main(args: argparse.Namespace) -> int:
    p50: dict[str, list[float]] = {p: [] for p in PHASES}
    p99: dict[str, list[float]] = {p: [] for p in PHASES}
    rates: dict[str, list[float]] = {p: [] for p in PHASES[1:]}
    pacing = Pacing(args.max_bytes_per_sec, args.nice)
    spawn = multiprocessing.get_context("spawn")
    with (quiet_stack(compaction.SERVER + "postgres", args.rate) as (port, tokens, _operator),
          ProcessPoolExecutor(1, mp_context=spawn) as worker,
          ProcessPoolExecutor(1, mp_context=spawn, initializer=_start_spark,
                              initargs=(args.split, pacing)) as driver):
        for started in (worker, driver):  # each process started and imported, the session up
            started.submit(time.sleep, 0).result()
        token = tokens["quiet"]
        for run in range(args.runs):
            for phase in PHASES:
                if phase == "alone":
                    time.sleep(SETTLE)
                    took, seconds = quiet_latencies(port, token, args.rate, args.seconds), None
                else:
                    on_spark = phase.endswith("Spark")
                    db = compaction.clone(run, "spark" if on_spark else "in_process")
                    try:
                        time.sleep(SETTLE)
                        took, seconds = _during(driver if on_spark else worker, db,
                                                on_spark, port, token, args.rate, pacing)
                    finally:
                        compaction.drop(db)
                    rates[phase].append(args.messages / seconds)
                cuts = statistics.quantiles(took, n=100)
                p50[phase].append(cuts[49])
                p99[phase].append(cuts[98])
                print(f"run {run + 1}, {phase}: {len(took)} messages, p50 {cuts[49]:.1f} ms "
                      f"p99 {cuts[98]:.1f} ms"
                      + (f", pass {seconds:.1f} s, {args.messages / seconds:,.0f} msg/s"
                         if seconds else ""), flush=True)
    print()
    print(table(p50, p99, rates, args))
    return 0


def table(p50: dict[str, list[float]], p99: dict[str, list[float]],
          rates: dict[str, list[float]], args: argparse.Namespace) -> str:
    return latency_table(
        f"a producer of {args.rate} messages of 1 KB a second (acks=all) through a listener; "
        f"{args.messages:,} messages over {args.keys:,} keys compacted on the same PostgreSQL "
        f"server; pacing {args.max_bytes_per_sec:,} bytes/s (0: unlimited), nice "
        f"+{args.nice}; medians of {args.runs} runs",
        ("producer p50 ms", "p99 ms", "compaction msg/s"), PHASES, p50, p99,
        lambda phase: f"{statistics.median(rates[phase]):,.0f}" if phase in rates else "-")
