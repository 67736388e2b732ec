"""`python -m bench failback` (issue 16): a failback after a forced failover, next to a
copystream of what the promoted side gained, in the same run.

A scratch control database `streamgate_bench_failback_<pid>` (migrated; its cluster stores
`..._store_sanfrancisco|newyork` beside it on the same PostgreSQL server), Django set up in this
process. Per run, a fresh pair /mapr/sanfrancisco/fb<run> -> /mapr/newyork/fb<run> (topic `t`,
8 partitions, 200 B values, loaded through the store's own append as bench/spark.py loads):
  1. `--common` messages on the source, applied to the replica by the failover's own drain
     (as the gateways would have), then a forced failover (`replica_failover(force=True)`);
  2. `--messages` produced on the promoted stream and `--divergent` on the old source (its
     never-replicated tail), both stores vacuumed and checkpointed;
  3. timed: `replica_failback` (the common prefix by diffstreams' comparison, the divergent
     tail kept aside in `t.diverged`, the old source cut back, the promoted side's gain applied
     by the engine's binary COPY pipe, then the planned switch back and the links restored),
     checked: the old source holds common + messages, its `t.diverged` the divergent ones;
  4. timed, before step 3 (they only read the promoted stream, and the first reader of the
     freshly loaded rows pays for it: measured up to 2x): copystream of the promoted stream
     (common + messages) into an empty destination database, the Spark job as `python -m
     bench spark` runs it: a fresh driver process (Spark's start-up counted) and on a context
     started before the runs, its Python workers too (warm), the one the failback uses.
The table gives medians and the failback's ratio to each copystream (issue 16's target: under
1.5x). Everything is dropped at the end, failure or not.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import time
import uuid
from typing import Any

import psycopg
from psycopg import sql

from bench.peers import warm_run
from bench.spark import PARTITIONS, TOPIC, _drop, _url, load, spark_job

TARGET = 1.5


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--messages", type=int, default=1_000_000,
                        help="produced on the promoted side after the failover")
    parser.add_argument("--divergent", type=int, default=10_000,
                        help="produced on the old source and never replicated")
    parser.add_argument("--common", type=int, default=40_000,
                        help="replicated before the failover")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--database-url", default=os.environ.get(
        "DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"))


def _django(base: str, name: str) -> None:
    """This process's Django on the scratch control database, migrated."""
    with psycopg.connect(_url(base, "postgres"), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    os.environ.update({
        "DATABASE_URL": _url(base, name), "SECRET_KEY": secrets.token_urlsafe(50),
        "REDIS_URL": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"),
        "STREAMGATE_NAMESPACE": f"benchfb{os.getpid()}:",
        "STREAMGATE_FAILOVER_DRAIN_SECONDS": "3600",  # a loaded machine must not give up
        "DJANGO_SETTINGS_MODULE": "portal.settings"})
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0, interactive=False)


def _owner() -> Any:
    from django.contrib.auth import get_user_model

    from accounts.models import Membership, Role, Tenant
    from replication.services import cluster_create

    users = get_user_model()
    operator = users.objects.create_user("ops", is_staff=True)
    alice = users.objects.create_user("alice")
    Membership.objects.create(user=alice, tenant=Tenant.objects.create(name="bench"),
                              role=Role.MEMBER)
    for cluster in ("sanfrancisco", "newyork"):
        cluster_create(actor=operator, name=cluster)
    return alice


def _failed_over(alice: Any, run: int, args: argparse.Namespace) -> tuple[Any, Any]:
    """Steps 1 and 2: the pair, failed over, with both sides' new messages."""
    from replication.models import ReplicaLink
    from replication.services import (
        replica_add,
        replica_failover,
        stream_create,
        topic_create,
        upstream_add,
    )
    from replication.services.failover import link_drain
    from replication.stores import store_for

    source = stream_create(actor=alice, path=f"/mapr/sanfrancisco/fb{run}")
    replica = stream_create(actor=alice, path=f"/mapr/newyork/fb{run}")
    topic_create(actor=alice, stream=source, name=TOPIC, partitions=PARTITIONS)
    replica_add(actor=alice, source=source, replica=replica)
    upstream_add(actor=alice, replica=replica, source=source)
    src, dst = store_for(source.cluster), store_for(replica.cluster)
    load(src, source.uuid, args.common)
    link_drain(ReplicaLink.objects.select_related("source__cluster", "replica__cluster")
               .get(source=source, replica=replica), why="the benchmark stops")
    replica_failover(replica=replica, force=True, actor=alice)
    load(dst, replica.uuid, args.messages)
    load(src, source.uuid, args.divergent)
    for stream in (source, replica):
        with psycopg.connect(_store_url(stream), autocommit=True) as conn:
            conn.execute("VACUUM messages")
            conn.execute("CHECKPOINT")
    return source, replica


def _store_url(stream: Any) -> str:
    from replication.stores import store_url

    return store_url(stream.cluster)


def _failback(alice: Any, source: Any, replica: Any, args: argparse.Namespace) -> float:
    """Step 3, checked."""
    from replication.services import replica_failback
    from replication.stores import store_for

    start = time.perf_counter()
    report = replica_failback(source=source, replica=replica, actor=alice)
    elapsed = time.perf_counter() - start
    store = store_for(source.cluster)
    held = {name: sum(high - low for low, high in store.watermarks(source.uuid, name).values())
            for name in (TOPIC, f"{TOPIC}.diverged")}
    common, messages, divergent = (n // 5000 * 5000 for n in (args.common, args.messages,
                                                              args.divergent))
    if held != {TOPIC: common + messages, f"{TOPIC}.diverged": divergent} or \
            report["keptAside"] != divergent:
        raise RuntimeError(f"the failback did not do the whole work: {held}, {report}")
    return elapsed


def _copystream(base: str, replica: Any, spark: Any, figures: dict[str, list[float]]) -> None:
    """Step 4: the promoted stream copied into an empty database, cold then warm."""
    from replication.engine.factory import create_database, open_store
    from workers.spark import Side, Spec, copystream

    name = f"sgbench_failback_{os.getpid()}_dst"
    held = sum(h - lo for lo, h in open_store(_store_url(replica)).watermarks(
        replica.uuid, TOPIC).values())
    for key in ("copystream", "copystream_warm"):
        _drop(base, name)
        create_database(_url(base, name))
        open_store(_url(base, name)).close()
        spec = Spec(Side(_store_url(replica), str(replica.uuid)),
                    Side(_url(base, name), str(uuid.uuid4())), {TOPIC: PARTITIONS})
        if key == "copystream":
            seconds, result = spark_job("copystream_job.py", spec)
        else:
            result, seconds = warm_run(copystream, spark, spec)
        if result["messages"] != held:
            raise RuntimeError(f"{key} did not copy the whole stream: {result}")
        figures[key].append(seconds)
    _drop(base, name)


def main(args: argparse.Namespace) -> int:
    name = f"streamgate_bench_failback_{os.getpid()}"
    load_before = os.getloadavg()
    figures: dict[str, list[float]] = {"failback": [], "copystream": [], "copystream_warm": []}
    spark = None
    try:
        _django(args.database_url, name)
        from workers.spark import spark_context

        alice = _owner()
        spark = spark_context()  # before the runs: the warm copy does not count its start
        # Nor the start of its Python workers (reused by later tasks), which the first job in
        # the context would pay: whichever of the warm copy and the failback came first.
        spark.parallelize(range(spark.defaultParallelism)).map(abs).collect()
        for run in range(1, args.runs + 1):
            print(f"run {run}: loading {args.common:,} common, {args.messages:,} promoted and "
                  f"{args.divergent:,} divergent messages", flush=True)
            source, replica = _failed_over(alice, run, args)
            # The copies first: they only read the promoted stream, which the failback then
            # finds as they left it (the same rows in the server's cache for both).
            _copystream(args.database_url, replica, spark, figures)
            figures["failback"].append(_failback(alice, source, replica, args))
            print(f"run {run}: " + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in figures.items())
                  + f"; load average {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        if spark is not None:
            spark.stop()
        _drop_all(args.database_url, name)
    print()
    print(report(args, figures, load_before, os.getloadavg()))
    return 0


def _drop_all(base: str, name: str) -> None:
    from django.db import connections

    connections.close_all()
    with psycopg.connect(_url(base, "postgres"), autocommit=True) as conn:
        names = [n for (n,) in conn.execute("SELECT datname FROM pg_database WHERE "
                                            "starts_with(datname, %s)", [name]).fetchall()]
    for each in names:
        _drop(base, each)


def report(args: argparse.Namespace, figures: dict[str, list[float]],
           load_before: tuple[float, ...], load_after: tuple[float, ...]) -> str:
    median = {k: statistics.median(v) for k, v in figures.items() if v}
    rows = {"failback": "streamgate stream replica failback (after -force failover)",
            "copystream": "copystream of the promoted stream, fresh process (Spark start-up)",
            "copystream_warm": "copystream of the promoted stream, warm context"}
    lines = [f"{args.messages:,} messages produced on the promoted side, {args.divergent:,} "
             f"divergent on the old source, {args.common:,} common; {PARTITIONS} partitions of "
             f"200 B; medians of {args.runs} runs; load average {load_before[0]:.1f} at the "
             f"start, {load_after[0]:.1f} at the end", "",
             "| path | median s | failback / this | each run (s) |", "| --- | ---: | ---: | --- |"]
    for key, label in rows.items():
        ratio = f"{median['failback'] / median[key]:.2f}x" if key != "failback" else ""
        lines.append(f"| {label} | {median[key]:.1f} | {ratio} | "
                     f"{', '.join(f'{s:.1f}' for s in figures[key])} |")
    worst = median["failback"] / min(median["copystream"], median["copystream_warm"])
    lines += ["", f"target: failback under {TARGET}x copystream; against the faster copystream "
                  f"{worst:.2f}x ({'met' if worst < TARGET else 'NOT met'})"]
    return "\n".join(lines)
