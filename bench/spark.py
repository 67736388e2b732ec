"""copystream and diffstreams (issue 5) next to a raw binary COPY pipe between the same two
databases, and next to the same copy done by the gateways.

Two scratch store databases on the PostgreSQL server of DATABASE_URL (default the local
one): `sgbench_spark_<pid>_src` holds the messages (200 B values in 8 partitions, loaded
through the store's own append), `..._dst` receives each copy and is emptied before each.
Per run, in the same order:
  - COPY pipe: each partition's rows streamed `COPY (SELECT ...) TO STDOUT (FORMAT BINARY)` ->
    `COPY ... FROM STDIN (FORMAT BINARY)` into a same-shaped table (primary key included), one
    transaction per partition, relayed by the engine's relay (the jobs' own): the floor any
    copy between two databases pays.
  - cold: copystream's spark-submit entry run as a fresh process (Spark's start-up, JVM
    included, counted), copying into a new destination stream; then diffstreams of the same
    pair, also a fresh process.
  - warm: the same two jobs in this process, on a Spark context started once before the runs
    and not timed (bench/peers.py's `warm_run`), as a Celery worker's local mode reuses its
    context: only its first job ever pays the JVM's start.
Before those runs, the gateways: bench/replication.py's deployment (scratch control database,
cluster stores, portal, `manage.py rungateway` x2 and `runreplicator`), with the hand-off of
large backlogs to Spark turned off. Per run, a paused link's source is loaded with its own
messages of the same shape (the same `load`: 200 B, 8 partitions), the link resumed and timed
until the replica's watermarks equal the source's (bench/replication.py's `catch_up`). The
deployment stops before the Spark runs, so its processes do not share the cores with them.
With `--master spark://HOST:PORT` (or `--cluster`, which starts a standalone master and worker
on loopback with workers.spark.standalone for the run), the cluster rows: the same two jobs
spark-submitted to that master as the Celery workers submit them (workers/jobs.py), the
driver a fresh process here, the executors on the cluster's workers.
`--skip pipe,cold,warm,gateways,cluster` leaves parts out. Everything is dropped at the end,
failure or not.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

from bench import replication
from bench.peers import warm_run
from bench.pipes import add_layout_argument, batch_pipe, row_pipe, stored_table
from bench.produce import ROOT
from workers.spark.jobs import Spec
from workers.spark.pg import SESSION

VALUE_BYTES = 200
PARTITIONS = 8
TOPIC = replication.TOPIC  # the gateways' runs load through `load` too
LOAD_BATCH = 5000
PARTS = ("pipe", "cold", "warm", "gateways", "cluster")
# figure -> (the part measuring it, its row in the table)
ROWS = {
    "pipe": ("pipe", "raw binary COPY pipe of the messages as `messages` rows"),
    "batch_pipe": ("pipe", "raw binary COPY pipe of the same batches (`batches` rows as stored)"),
    "copystream": ("cold", "streamgate copystream, fresh process (Spark start-up included)"),
    "copystream_warm": ("warm", "streamgate copystream, warm context"),
    "gateways": ("gateways", "the same copy by the gateways (2 gateways + replicator; own "
                             "identical messages)"),
    "diffstreams": ("cold", "streamgate diffstreams, fresh process (Spark start-up included)"),
    "diffstreams_warm": ("warm", "streamgate diffstreams, warm context"),
    "copystream_cluster": ("cluster", "streamgate copystream on the Spark cluster (spark-submit, "
                                      "executors on its workers)"),
    "diffstreams_cluster": ("cluster", "streamgate diffstreams on the Spark cluster"),
}


def _parts(text: str) -> set[str]:
    parts = set(filter(None, text.split(",")))
    if parts - set(PARTS):
        raise argparse.ArgumentTypeError(
            f"unknown {', '.join(sorted(parts - set(PARTS)))}; choose from {', '.join(PARTS)}")
    return parts


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--messages", type=int, default=5_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--skip", type=_parts, default="",
                        help=f"comma-separated parts to leave out: {','.join(PARTS)}")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--master", help="a Spark master (spark://HOST:PORT) for the cluster rows; "
                       "its executors must reach this host (SPARK_LOCAL_IP names the address "
                       "the driver gives them)")
    where.add_argument("--cluster", type=int, metavar="CORES", nargs="?", const=2,
                       help="start a standalone master and a worker of CORES cores (2) on "
                            "loopback for the cluster rows")
    parser.add_argument("--database-url", default=os.environ.get(
        "DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"))
    add_layout_argument(parser)


def _url(base: str, name: str) -> str:
    return urlunsplit(urlsplit(base)._replace(scheme="postgresql", path=f"/{name}"))


def _admin(base: str) -> psycopg.Connection:
    return psycopg.connect(_url(base, "postgres"), autocommit=True)


def _drop(base: str, name: str) -> None:
    with _admin(base) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            sql.Identifier(name)))


def load(store, stream: uuid.UUID, messages: int) -> int:  # type: ignore[no-untyped-def]
    """Appends `messages` (rounded down to whole batches) of VALUE_BYTES; returns how many."""
    from replication.engine import Record

    store.ensure_topic(stream, TOPIC, PARTITIONS)
    records = [Record(os.urandom(VALUE_BYTES)) for _ in range(LOAD_BATCH)]
    for _ in range(messages // LOAD_BATCH):
        store.append(stream, TOPIC, records, origin=stream)
    return messages // LOAD_BATCH * LOAD_BATCH


def copy_pipe(src_url: str, dst_url: str, stream: uuid.UUID, layout: str) -> float:
    """Seconds of the row pipe, a transaction per partition, in the jobs' session settings (an
    index scan in offset order, no sort, no JIT): the physical limit of the same plan."""
    return row_pipe(src_url, dst_url, stream, layout, None, SESSION)[0]


def copy_batches(src_url: str, dst_url: str, stream: uuid.UUID) -> float:
    """Seconds of the batch pipe (the `batches` rows as stored), a transaction per partition."""
    return batch_pipe(src_url, dst_url, stream, None, SESSION)[0]


def spark_job(entry: str, spec: Spec, master: dict[str, str] | None = None
              ) -> tuple[float, dict]:
    """A fresh driver process, start-up included: local mode, or spark-submit to the master
    of `master` (the submitting process's environment: workers.spark.standalone's
    client_environment). Returns the seconds and the job's result."""
    from workers.spark.submit import PREFIX, submit_command, submit_environment

    argv = (submit_command(entry, master["SPARK_MASTER_URL"]) if master
            else [sys.executable, str(ROOT / "workers/spark" / entry)])
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True,
                          env={**submit_environment(spec), "PYTHONPATH": str(ROOT),
                               **(master or {})})
    elapsed = time.perf_counter() - start
    lines = [json.loads(line.removeprefix(PREFIX)) for line in done.stdout.splitlines()
             if line.startswith(PREFIX)]
    if done.returncode or not lines or lines[-1]["kind"] != "result":
        raise RuntimeError(f"{entry} failed: {done.stdout[-2000:]} {done.stderr[-2000:]}")
    return elapsed, lines[-1]["result"]


def _checked(what: str, result: dict, messages: int) -> None:
    """A figure counts only for a job that did the whole work (a diff finding them equal)."""
    done = result.get("messages", result.get("compared"))
    if done != messages or result.get("equal", True) is not True:
        raise RuntimeError(f"{what} did not do the whole work: {result}")


# --- the gateways ------------------------------------------------------------------------------


def measure_gateways(args: argparse.Namespace) -> list[float]:
    """Seconds per run of the same copy by the replication engine as deployed."""
    from replication.engine.factory import open_store

    deploy = replication.Deployment(_url(args.database_url, "postgres"))
    deploy.env["STREAMGATE_STORE_LAYOUT"] = args.layout
    # 625,000 messages a partition is past the default hand-off of a large backlog to a Spark
    # job (STREAMGATE_CATCHUP_THRESHOLD), which no Celery worker here would run: turned off,
    # the gateways copy everything.
    deploy.env["STREAMGATE_CATCHUP_THRESHOLD"] = "0"
    seconds: list[float] = []
    try:
        client = replication.setup(deploy, deploy.start())
        deploy.start_engine()
        deploy.wait_engine()
        stores = [open_store(deploy.store_url(cluster), layout=args.layout)
                  for cluster in (replication.SOURCE, replication.REPLICA)]
        try:
            for run in range(1, args.runs + 1):
                seconds.append(gateway_run(deploy, client, stores, run, args.messages))
        finally:
            for store in stores:
                store.close()
    finally:
        deploy.stop()
        shutil.rmtree(deploy.logs, ignore_errors=True)
    return seconds


def gateway_run(deploy: replication.Deployment, client, stores: list,  # type: ignore[no-untyped-def]
                run: int, messages: int) -> float:
    name = f"spark{run}"
    paths = (f"/mapr/{replication.SOURCE}/{name}", f"/mapr/{replication.REPLICA}/{name}")
    src, dst = (uuid.UUID(u) for u in replication.create_pair(
        client, name, paused=True, partitions=PARTITIONS))
    loaded = load(stores[0], src, messages)
    with psycopg.connect(deploy.store_url(replication.SOURCE), autocommit=True) as conn:
        conn.execute("CHECKPOINT")  # the load's dirty pages written before the clock starts
    elapsed = replication.catch_up(client, *stores, src, dst, paths)
    print(f"gateways run {run}: {loaded:,} messages in {elapsed:.1f} s; load average "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    for path in reversed(paths):  # keep the stores small for the next run
        with contextlib.suppress(Exception):
            client.call("stream delete", {"path": path})
    return elapsed


# --- the Spark jobs and the pipe ---------------------------------------------------------------


def measure_spark(args: argparse.Namespace, figures: dict[str, list[float]],
                  master: dict[str, str] | None = None) -> int:
    """Fills `figures` run by run; returns how many messages the source holds. `master`: the
    cluster rows' submitting environment (SPARK_MASTER_URL...), if any."""
    from replication.engine.factory import create_database, open_store
    from workers.spark import Side, copystream, diffstreams, spark_context

    names = [f"sgbench_spark_{os.getpid()}_{side}" for side in ("src", "dst")]
    src_url, dst_url = (_url(args.database_url, name) for name in names)
    spark = None
    try:
        create_database(src_url)
        source, stream = open_store(src_url, layout=args.layout), uuid.uuid4()
        print(f"loading {args.messages:,} messages of {VALUE_BYTES} B in {PARTITIONS} "
              "partitions", flush=True)
        messages = load(source, stream, args.messages)
        source.close()
        with psycopg.connect(src_url, autocommit=True) as conn:
            # Hint bits set and dirty pages written now, as autovacuum and checkpoints would
            # have on any source of this size: otherwise the first run's first reader (the
            # pipe) pays for them alone.
            conn.execute(sql.SQL("VACUUM {}").format(sql.Identifier(stored_table(args.layout))))
            conn.execute("CHECKPOINT")
        if "warm" not in args.skip:
            spark = spark_context()  # once, before the runs: the warm rows do not count it

        def fresh() -> Spec:
            """An empty destination database and a new destination stream in it."""
            _drop(args.database_url, names[1])
            create_database(dst_url)
            # the store's schema, as a cluster's store has it
            open_store(dst_url, layout=args.layout).close()
            return Spec(Side(src_url, str(stream)), Side(dst_url, str(uuid.uuid4())),
                        {TOPIC: PARTITIONS})

        for run in range(1, args.runs + 1):
            spec = fresh()
            if "pipe" not in args.skip:
                figures["pipe"].append(copy_pipe(src_url, dst_url, stream, args.layout))
                if args.layout == "batches":
                    figures["batch_pipe"].append(copy_batches(src_url, dst_url, stream))
            if "cold" not in args.skip:
                for key, entry in (("copystream", "copystream_job.py"),
                                   ("diffstreams", "diffstreams_job.py")):
                    seconds, result = spark_job(entry, spec)
                    _checked(key, result, messages)
                    figures[key].append(seconds)
            if master:
                spec = fresh()
                for key, entry in (("copystream_cluster", "copystream_job.py"),
                                   ("diffstreams_cluster", "diffstreams_job.py")):
                    seconds, result = spark_job(entry, spec, master)
                    _checked(key, result, messages)
                    figures[key].append(seconds)
            if spark is not None:
                if "cold" not in args.skip:
                    spec = fresh()  # the warm copy starts from an empty destination too
                for key, job in (("copystream_warm", copystream),
                                 ("diffstreams_warm", diffstreams)):
                    result, seconds = warm_run(job, spark, spec)
                    _checked(key, result, messages)
                    figures[key].append(seconds)
            print(f"run {run}: " + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in figures.items()
                                             if k != "gateways" and v)
                  + f"; load average {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        if spark is not None:
            spark.stop()
        for name in names:
            _drop(args.database_url, name)
    return messages


@contextlib.contextmanager
def _master(args: argparse.Namespace) -> Iterator[dict[str, str] | None]:
    """The cluster rows' submitting environment: the master given, or one started here."""
    if "cluster" in args.skip:
        yield None
    elif args.master:
        yield {"SPARK_MASTER_URL": args.master}
    else:
        from workers.spark import standalone

        print(f"starting a standalone Spark master and a worker of {args.cluster} cores",
              flush=True)
        with standalone.start(cores=args.cluster) as cluster:
            yield cluster.client_environment


def main(args: argparse.Namespace) -> int:
    # The jobs open stores too (a fresh process, a warm context here): the same layout.
    os.environ["STREAMGATE_STORE_LAYOUT"] = args.layout
    if args.master is None and args.cluster is None:
        args.skip = {*args.skip, "cluster"}
    figures: dict[str, list[float]] = {k: [] for k, (part, _) in ROWS.items()
                                       if part not in args.skip}
    load_before = os.getloadavg()
    if "gateways" in figures:
        figures["gateways"] = measure_gateways(args)
    messages = args.messages // LOAD_BATCH * LOAD_BATCH
    if set(figures) - {"gateways"}:
        with _master(args) as master:
            messages = measure_spark(args, figures, master)
    print()
    print(report(messages, figures, load_before, os.getloadavg(), args.layout))
    return 0


def report(messages: int, figures: dict[str, list[float]], load_before: tuple[float, ...],
           load_after: tuple[float, ...], layout: str = "batches") -> str:
    median = {k: statistics.median(v) for k, v in figures.items() if v}
    runs = max(map(len, figures.values()), default=0)
    lines = [f"{messages:,} messages of {VALUE_BYTES} B, {PARTITIONS} partitions, {layout} "
             f"store layout, medians of "
             f"{runs} runs; load average {load_before[0]:.1f} at the start, "
             f"{load_after[0]:.1f} at the end", "",
             "| path | median s | messages/s | vs COPY pipe | each run (s) |",
             "| --- | ---: | ---: | ---: | --- |"]
    for key in (k for k in ROWS if k in median):
        ratio = f"{median['pipe'] / median[key]:.2f}x" if "pipe" in median else ""
        lines.append(f"| {ROWS[key][1]} | {median[key]:.1f} | {messages / median[key]:,.0f} | "
                     f"{ratio} | {', '.join(f'{s:.1f}' for s in figures[key])} |")
    paired = [k for k in ("copystream", "copystream_warm", "copystream_cluster", "diffstreams",
                          "diffstreams_warm", "diffstreams_cluster") if k in median]
    if "pipe" in median and paired:
        lines += ["", "Per run, messages/s against the COPY pipe of the same run:", "",
                  "| run | " + " | ".join(k.replace("_", " ") if "_" in k else f"{k} cold"
                                          for k in paired) + " |",
                  "| --- |" + " ---: |" * len(paired)]
        lines += [f"| {n + 1} | " + " | ".join(
            f"{figures['pipe'][n] / figures[k][n]:.2f}x" for k in paired) + " |"
            for n in range(len(figures["pipe"]))]
    if "batch_pipe" in median:
        lines += ["", "Against the batch pipe (medians of messages/s): " + "; ".join(
            f"{key} {median['batch_pipe'] / median[key]:.2f}x" for key in paired)]
    if "gateways" in median:
        lines += ["", "The gateways' runs load their own messages of the same shape into their "
                  "own deployment (a separate phase before the Spark runs)."]
        lines += [f"{key} / gateways (medians of messages/s): "
                  f"{median['gateways'] / median[key]:.2f}x"
                  for key in ("copystream", "copystream_warm") if key in median]
    return "\n".join(lines)
