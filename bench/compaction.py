"""Log compaction's speed (issue 31), engine level: a partition of `--messages` records over
`--keys` keys (100-byte values, `--batch` records a batch, keys in turn, every record older
than the lag, one key in 100 ending on a tombstone past its retention) appended once to a
template batch store on the local PostgreSQL; each run compacts a fresh clone of it
(CREATE DATABASE ... TEMPLATE, not timed) in the worker's process, then another clone through
the Spark passes (workers/spark/compaction.py, a local session started beforehand, `--split`
offsets a task), alternating; msg/s = messages in the partition / seconds of compact(), and
the median of `--runs` each. `--producers`: instead, a quiet producer's latency through a
listener of the production stack, alone and during each pass (bench/compaction_producers.py).

    PYTHONPATH=. .venv/bin/python -m bench compaction --messages 1000000 --keys 10000

`--max-bytes-per-sec` and `--nice` pace both passes as STREAMGATE_COMPACT_MAX_BYTES_PER_SEC and
STREAMGATE_COMPACT_NICE do the worker's (replication/engine/pacing.py); both 0 by default here,
the passes at full speed.

The issue's target is 10M messages over 100k keys at 1M msg/s or more on Spark.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

import psycopg

from replication.engine.compaction import Rules
from replication.engine.compactstore import CompactionMethods, Counts, Policy
from replication.engine.factory import create_database, open_store
from replication.engine.pacing import UNPACED, Pacing
from replication.engine.recordbatch import encode_batch
from replication.engine.store import Record

SERVER = "postgresql://postgres@127.0.0.1:5432/"
TEMPLATE = "sgbench_compact_template"
STREAM, ORIGIN = uuid.UUID(int=31), uuid.UUID(int=32)
POLICY = Policy(min_lag_ms=0, delete_retention_ms=1_000)
NOW = 1 << 45
VALUE = b"v" * 100
HERE_BELOW = 1 << 30  # the worker's: STREAMGATE_COMPACT_SPARK_BYTES's default


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=1_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--split", type=int, default=200_000)
    parser.add_argument("--max-bytes-per-sec", type=int, default=0,
                        help="the passes' throttle on what they read and write (0: none)")
    parser.add_argument("--nice", type=int, default=0,
                        help="niceness added to the threads running the passes (0: none)")
    parser.add_argument("--producers", action="store_true",
                        help="a quiet producer's latency through a listener alone and during "
                             "each pass (bench/compaction_producers.py)")
    parser.add_argument("--rate", type=int, default=200,
                        help="with --producers: the producer's 1 KB messages a second")
    parser.add_argument("--seconds", type=float, default=10.0,
                        help="with --producers: the producer measured alone this long")


class OnSpark:
    """The worker's Spark passes without Django's settings (workers/compaction.py)."""

    def __init__(self, split: int, pacing: Pacing = UNPACED) -> None:
        from workers.spark.session import spark_context

        self.spark, self.split, self.pacing = spark_context(), split, pacing

    def takes(self, store: CompactionMethods, pid: int, size: int) -> bool:
        return True

    def run(self, store: CompactionMethods, pid: int, low: int, end: int,
            rules: Rules) -> Counts:
        from workers.spark.compaction import Partition, compact_on_spark

        return compact_on_spark(self.spark, Partition(store.url, pid), low, end, rules,  # type: ignore[attr-defined]
                                self.split, pacing=self.pacing, here_below=HERE_BELOW)


def _admin(statement: str) -> None:
    with psycopg.connect(SERVER + "postgres", autocommit=True) as conn:
        conn.execute(statement)


def fill(messages: int, keys: int, batch: int) -> None:
    drop(TEMPLATE)
    create_database(SERVER + TEMPLATE)
    store = open_store(SERVER + TEMPLATE, layout="batches")
    store.ensure_topic(STREAM, "t", 1)
    for at in range(0, messages, batch):
        records = []
        for n in range(at, min(at + batch, messages)):
            key = n % keys
            # The last round's every 100th key: a tombstone, long past its retention.
            value = None if n >= messages - keys and key % 100 == 0 else VALUE
            records.append(Record(value, key=b"key-%08d" % key, timestamp_ms=1_000))
        store.append_raw(STREAM, "t", 0, encode_batch(records), origin=ORIGIN)
    store.close()


def clone(run: int, name: str) -> str:
    """A fresh copy of the template partition: the database's name."""
    db = f"sgbench_compact_{name}_{run}"
    drop(db)
    _admin(f'CREATE DATABASE "{db}" TEMPLATE "{TEMPLATE}"')
    return db


def drop(db: str) -> None:
    _admin(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


def compact(db: str, passes: OnSpark | None, pacing: Pacing = UNPACED) -> tuple[float, int]:
    """One compaction of the clone `db`: seconds and records removed. A top-level function, so
    bench/compaction_producers.py can run the in-process pass in a process of its own."""
    store = open_store(SERVER + db)
    try:
        began = time.monotonic()
        done = store.compact(STREAM, "t", 0, policy=POLICY, now_ms=NOW, replicated=1 << 62,
                             passes=passes, pacing=pacing)
        return time.monotonic() - began, done.removed
    finally:
        store.close()


def timed(run: int, name: str, passes: OnSpark | None, pacing: Pacing) -> tuple[float, int]:
    db = clone(run, name)
    try:
        return compact(db, passes, pacing)
    finally:
        drop(db)


def main(args: argparse.Namespace) -> int:
    began = time.monotonic()
    fill(args.messages, args.keys, args.batch)
    print(f"filled {args.messages:,} messages over {args.keys:,} keys in "
          f"{time.monotonic() - began:.1f} s")
    pacing = Pacing(args.max_bytes_per_sec, args.nice)
    print(f"pacing: max {args.max_bytes_per_sec:,} bytes/s (0: unlimited), nice +{args.nice}")
    if args.producers:
        from bench import compaction_producers

        try:
            return compaction_producers.main(args)
        finally:
            drop(TEMPLATE)
    spark = OnSpark(args.split, pacing)
    rates: dict[str, list[float]] = {"in process": [], "Spark": []}
    for run in range(args.runs):
        for name, passes in (("in process", None), ("Spark", spark)):
            seconds, removed = timed(run, name.replace(" ", "_"), passes, pacing)
            rates[name].append(args.messages / seconds)
            print(f"  run {run + 1} {name}: {seconds:.2f} s, {removed:,} removed, "
                  f"{args.messages / seconds:,.0f} msg/s")
    for name, found in rates.items():
        print(f"{name}: median {statistics.median(found):,.0f} msg/s "
              f"({', '.join(f'{r:,.0f}' for r in found)})")
    drop(TEMPLATE)
    return 0
