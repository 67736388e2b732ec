"""copystream and diffstreams (issue 5) next to a raw binary COPY pipe between the same two
databases.

Two scratch store databases on the PostgreSQL server of DATABASE_URL (default the local
one): `sgbench_spark_<pid>_src` holds the messages (200 B values in 8 partitions, loaded
through the store's own append), `..._dst` receives each copy and is emptied between runs.
Per run, in the same order:
  - COPY pipe: each partition's rows streamed `COPY (SELECT ...) TO STDOUT (FORMAT BINARY)` ->
    `COPY ... FROM STDIN (FORMAT BINARY)` into a same-shaped table (primary key included), one
    transaction per partition: the floor any copy between two databases pays.
  - copystream: the job's spark-submit entry run as a fresh process (Spark's start-up, JVM
    included, counted), copying into a new destination stream.
  - diffstreams: the same pair compared, also a fresh process.
Everything is dropped at the end, failure or not.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

from bench.produce import ROOT

VALUE_BYTES = 200
PARTITIONS = 8
TOPIC = "t"
LOAD_BATCH = 5000
COLUMNS = 'pid, "offset", ts, key, value, headers, origin, producer'


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--messages", type=int, default=5_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--database-url", default=os.environ.get(
        "DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"))


def _url(base: str, name: str) -> str:
    return urlunsplit(urlsplit(base)._replace(scheme="postgresql", path=f"/{name}"))


def _admin(base: str) -> psycopg.Connection:
    return psycopg.connect(_url(base, "postgres"), autocommit=True)


def _drop(base: str, name: str) -> None:
    with _admin(base) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            sql.Identifier(name)))


def load(store, stream: uuid.UUID, messages: int) -> None:  # type: ignore[no-untyped-def]
    from replication.engine import Record

    store.ensure_topic(stream, TOPIC, PARTITIONS)
    records = [Record(os.urandom(VALUE_BYTES)) for _ in range(LOAD_BATCH)]
    for _ in range(messages // LOAD_BATCH):
        store.append(stream, TOPIC, records, origin=stream)


def copy_pipe(src_url: str, dst_url: str, stream: uuid.UUID) -> float:
    with psycopg.connect(src_url) as src, psycopg.connect(dst_url) as dst:
        dst.execute("DROP TABLE IF EXISTS sgbench_pipe")
        dst.execute("CREATE TABLE sgbench_pipe (LIKE messages INCLUDING ALL)")
        dst.commit()
        pids = [pid for (pid,) in src.execute(
            "SELECT id FROM partitions WHERE stream = %s ORDER BY id", (stream,)).fetchall()]
        start = time.perf_counter()
        for pid in pids:
            with src.cursor() as out, dst.cursor() as into, out.copy(sql.SQL(
                    "COPY (SELECT {} FROM messages WHERE pid = {} ORDER BY \"offset\") "
                    "TO STDOUT (FORMAT BINARY)").format(sql.SQL(COLUMNS), pid)) as reader, \
                    into.copy(f"COPY sgbench_pipe ({COLUMNS}) FROM STDIN (FORMAT BINARY)") \
                    as writer:
                for chunk in reader:
                    writer.write(chunk)
            src.commit()
            dst.commit()
        elapsed = time.perf_counter() - start
        dst.execute("DROP TABLE sgbench_pipe")
        dst.commit()
    return elapsed


def spark_job(entry: str, spec: str) -> float:
    """A fresh driver process, as spark-submit would start it: start-up included."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, str(ROOT / "workers/spark" / entry), spec],
                          cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    elapsed = time.perf_counter() - start
    if done.returncode:
        raise RuntimeError(f"{entry} failed: {done.stdout[-2000:]} {done.stderr[-2000:]}")
    return elapsed


def main(args: argparse.Namespace) -> int:
    from replication.engine.store import create_database, open_store
    from workers.spark import Side, Spec
    from workers.spark.submit import spec_to_json

    names = [f"sgbench_spark_{os.getpid()}_{side}" for side in ("src", "dst")]
    src_url, dst_url = (_url(args.database_url, name) for name in names)
    try:
        create_database(src_url)
        source, stream = open_store(src_url), uuid.uuid4()
        print(f"loading {args.messages:,} messages of {VALUE_BYTES} B in {PARTITIONS} "
              "partitions", flush=True)
        load(source, stream, args.messages)
        source.close()
        figures: dict[str, list[float]] = {"pipe": [], "copystream": [], "diffstreams": []}
        for run in range(1, args.runs + 1):
            _drop(args.database_url, names[1])
            create_database(dst_url)
            open_store(dst_url).close()  # the store's schema, as a cluster's store has it
            figures["pipe"].append(copy_pipe(src_url, dst_url, stream))
            spec = Spec(Side(src_url, str(stream)), Side(dst_url, str(uuid.uuid4())),
                        {TOPIC: PARTITIONS})
            figures["copystream"].append(spark_job("copystream_job.py", spec_to_json(spec)))
            figures["diffstreams"].append(spark_job("diffstreams_job.py", spec_to_json(spec)))
            print(f"run {run}: " + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in figures.items()),
                  flush=True)
        report(args.messages, figures)
    finally:
        for name in names:
            _drop(args.database_url, name)
    return 0


def report(messages: int, figures: dict[str, list[float]]) -> None:
    rate = {k: messages / statistics.median(v) for k, v in figures.items()}
    print(f"\n{messages:,} messages of {VALUE_BYTES} B, {PARTITIONS} partitions, medians of "
          f"{len(figures['pipe'])} runs")
    print("| path | median s | messages/s | vs COPY pipe |")
    print("| --- | ---: | ---: | ---: |")
    for name, label in (("pipe", "raw binary COPY pipe"),
                        ("copystream", "streamgate copystream (Spark start-up included)"),
                        ("diffstreams", "streamgate diffstreams (Spark start-up included)")):
        print(f"| {label} | {statistics.median(figures[name]):.1f} | {rate[name]:,.0f} | "
              f"{rate[name] / rate['pipe']:.2f}x |")
