"""The replication engine, as production runs it (issue 4): backlog catch-up next to a raw
binary COPY pipe and PostgreSQL logical replication, steady-state end-to-end lag, idle cost.

A scratch control database `sgbench_<pid>` with two cluster stores beside it
(`sgbench_<pid>_store_sanfrancisco`, `..._store_newyork`), a portal served as compose.yaml
serves it (bench/produce.py's `Portal`), and the engine as its own processes:
`manage.py rungateway --cluster newyork --name gw1|gw2` and `manage.py runreplicator`, with
production's engine settings, a Redis namespace and a Celery queue of the run's own
(bench/deployment.py).
Logical replication needs `wal_level = logical`; when the shared server has `replica`, a
private PostgreSQL 15 (initdb + pg_ctl, default settings but wal_level) holds both its
databases. Everything started here is stopped and dropped at the end, failure or not.
"""

from __future__ import annotations

import argparse
import atexit
import bisect
import contextlib
import json
import multiprocessing
import os
import shutil
import statistics
import time
import uuid
from urllib.parse import urlsplit

import psycopg
import requests
from psycopg import sql

from bench.deployment import (
    LOAD_BATCH,
    MESSAGES_DDL,
    PARTITIONS,
    PIPE_BATCH,
    REPLICA,
    SOURCE,
    TOPIC,
    VALUE_BYTES,
    Deployment,
    ReplicaWatch,
    add_load_arguments,
    cpu_by_process,
    cpu_seconds,
    create_pair,
    profiling,
    setup,
    tree,
    watermarks,
    with_db,
)
from bench.pgserver import PrivatePostgres
from bench.pipes import add_layout_argument, batch_pipe, row_pipe, stored_table


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_load_arguments(parser, runs=3, steady_seconds=60.0)
    parser.add_argument("--idle-streams", type=int, default=1000)
    parser.add_argument("--idle-seconds", type=float, default=60.0)
    parser.add_argument("--skip", default="", help="comma-separated: catchup,steady,idle")
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    add_layout_argument(parser)


# --- 1. backlog catch-up -----------------------------------------------------------------------


def load_backlog(store, stream: uuid.UUID, messages: int) -> None:  # type: ignore[no-untyped-def]
    from replication.engine import Record

    records = [Record(os.urandom(VALUE_BYTES)) for _ in range(LOAD_BATCH)]
    store.ensure_topic(stream, TOPIC, PARTITIONS)  # as the produce service does on first write
    for _ in range(messages // LOAD_BATCH):
        store.append(stream, TOPIC, records, origin=stream)


def catch_up(client, src_store, dst_store, src: uuid.UUID, dst: uuid.UUID,  # type: ignore[no-untyped-def]
             paths: tuple[str, str]) -> float:
    target = watermarks(src_store, src)
    start = time.perf_counter()
    client.call("stream replica resume", {"path": paths[0], "replica": paths[1]})
    first = None
    while (marks := watermarks(dst_store, dst)) != target:
        if first is None and any(marks.values()):
            first = time.perf_counter() - start
            print(f"  first batch readable {first:.2f} s after resume", flush=True)
        if time.perf_counter() - start > 900:
            raise RuntimeError(f"no catch-up in 900 s: {watermarks(dst_store, dst)} vs {target}")
        time.sleep(0.05)
    return time.perf_counter() - start


def source_pids(conn: psycopg.Connection, stream: uuid.UUID) -> list[int]:
    return [pid for (pid,) in conn.execute(
        "SELECT id FROM partitions WHERE stream = %s AND topic = %s ORDER BY partition",
        (stream, TOPIC)).fetchall()]


def logical_setup(source_url: str) -> tuple[str, str, PrivatePostgres | None]:
    """(publisher URL, subscriber URL, the private instance or None)."""
    with psycopg.connect(with_db(source_url, "postgres")) as conn:
        level = conn.execute("SHOW wal_level").fetchone()[0]
    private = None
    if level != "logical":  # default settings (fsync on) but the one logical replication needs
        private = PrivatePostgres(prefix="sgbench-pg-", settings={"wal_level": "logical"})
        atexit.register(private.remove)
        source_url = private.launch().url("postgres")
    with psycopg.connect(with_db(source_url, "postgres"), autocommit=True) as conn:
        for name in ("sgbench_pub", "sgbench_sub"):
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return with_db(source_url, "sgbench_pub"), with_db(source_url, "sgbench_sub"), private


def stored_ddl(table: str) -> str:
    """The CREATE TABLE of the store's `table` (messages or batches), for the publisher and
    subscriber databases."""
    if table == "messages":
        return MESSAGES_DDL
    from replication.engine.pg.schema import COMMON_SCHEMA
    from replication.engine.pgbatch.schema import SCHEMA, STORAGE_SET

    return SCHEMA.removeprefix(COMMON_SCHEMA) + ";" + STORAGE_SET


def logical_run(store_url: str, stream: uuid.UUID, pub_url: str, sub_url: str,
                table: str = "messages") -> tuple[float, int]:
    """Load the stream's rows of the store's `table` (messages, or batches: a row per record
    batch) into the publisher (untimed), then time a subscription with copy_data=true until
    the subscriber holds them all; returns (seconds, messages)."""
    with psycopg.connect(pub_url, autocommit=True) as pub, \
            psycopg.connect(sub_url, autocommit=True) as sub:
        with contextlib.suppress(psycopg.Error):
            sub.execute("DROP SUBSCRIPTION IF EXISTS sgbench_sub")
        for conn in (pub, sub):
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))
            conn.execute(stored_ddl(table))
        with psycopg.connect(store_url) as src, src.cursor() as out, pub.cursor() as into:
            pids = source_pids(src, stream)
            copy_out = sql.SQL("COPY (SELECT * FROM {} WHERE pid = ANY({})) TO STDOUT "
                               "(FORMAT BINARY)").format(sql.Identifier(table), pids)
            with out.copy(copy_out) as reader, \
                    into.copy(sql.SQL("COPY {} FROM STDIN (FORMAT BINARY)").format(
                        sql.Identifier(table))) as writer:
                for chunk in reader:
                    writer.write(chunk)
        expected, messages = pub.execute(
            sql.SQL("SELECT count(*), {} FROM {}").format(
                sql.SQL("sum(records)" if table == "batches" else "count(*)"),
                sql.Identifier(table))).fetchone()
        pub.execute("DROP PUBLICATION IF EXISTS sgbench_pub")
        pub.execute("CHECKPOINT")
        pub.execute(sql.SQL("CREATE PUBLICATION sgbench_pub FOR TABLE {}").format(
            sql.Identifier(table)))
        parts = urlsplit(pub_url)
        conninfo = (f"host={parts.hostname} port={parts.port or 5432} "
                    f"dbname={parts.path.lstrip('/')} user=postgres")
        # Publisher and subscriber on one instance: CREATE SUBSCRIPTION would wait for its own
        # transaction while creating the slot, so the slot is made first (as the docs advise).
        with contextlib.suppress(psycopg.Error):
            pub.execute("SELECT pg_drop_replication_slot('sgbench_sub')")
        pub.execute("SELECT pg_create_logical_replication_slot('sgbench_sub', 'pgoutput')")
        start = time.perf_counter()
        sub.execute(f"CREATE SUBSCRIPTION sgbench_sub CONNECTION '{conninfo}' "
                    "PUBLICATION sgbench_pub WITH (copy_data = true, create_slot = false)")
        # The initial sync commits in one transaction: the table is ready ('r'/'s') when the
        # rows become visible, so poll the cheap state, then confirm the count.
        while True:
            state = sub.execute("SELECT srsubstate FROM pg_subscription_rel").fetchone()
            if state and state[0] in ("r", "s") and sub.execute(
                    sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))
            ).fetchone()[0] >= expected:
                break
            if time.perf_counter() - start > 600:
                raise RuntimeError("logical replication did not finish in 600 s")
            time.sleep(0.02)
        elapsed = time.perf_counter() - start
        for statement in ("ALTER SUBSCRIPTION sgbench_sub DISABLE",
                          "ALTER SUBSCRIPTION sgbench_sub SET (slot_name = NONE)",
                          "DROP SUBSCRIPTION sgbench_sub"):
            sub.execute(statement)
        _drop_slot(pub)
        pub.execute("DROP PUBLICATION sgbench_pub")
        for conn in (pub, sub):
            conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(table)))
    return elapsed, int(messages)


def _drop_slot(pub: psycopg.Connection) -> None:
    # The disabled subscription's walsender lets go of the slot a moment later.
    for _ in range(100):
        try:
            pub.execute("SELECT pg_drop_replication_slot('sgbench_sub')")
            return
        except psycopg.errors.ObjectInUse:
            time.sleep(0.1)
    raise RuntimeError("replication slot sgbench_sub stayed in use for 10 s")


def measure_catchup(deploy: Deployment, client, args: argparse.Namespace) -> dict[str, list[float]]:  # type: ignore[no-untyped-def]
    from replication.engine.factory import open_store

    src_store, dst_store = (open_store(deploy.store_url(c), layout=args.layout)
                            for c in (SOURCE, REPLICA))
    pub_url, sub_url, private = logical_setup(args.url)
    results: dict[str, list[float]] = {"sg": [], "copy": [], "batch_copy": [], "logical": []}
    try:
        for n in range(args.runs):
            name = f"activity{'' if n == 0 else n + 1}"
            paths = (f"/mapr/{SOURCE}/{name}", f"/mapr/{REPLICA}/{name}")
            src, dst = (uuid.UUID(u) for u in create_pair(client, name, paused=True))
            load_backlog(src_store, src, args.messages)
            total = sum(watermarks(src_store, src).values())
            with psycopg.connect(deploy.store_url(SOURCE), autocommit=True) as conn:
                conn.execute("CHECKPOINT")
            with profiling(deploy, f"catchup{n + 1}"):
                elapsed = catch_up(client, src_store, dst_store, src, dst, paths)
            results["sg"].append(total / elapsed)
            urls = (deploy.store_url(SOURCE), deploy.store_url(REPLICA))
            copy_s, rows = row_pipe(*urls, src, args.layout, PIPE_BATCH)
            results["copy"].append(rows / copy_s)
            if args.layout == "batches":
                batch_s, batched = batch_pipe(*urls, src, PIPE_BATCH)
                results["batch_copy"].append(batched / batch_s)
            logical_s, lrows = logical_run(urls[0], src, pub_url, sub_url,
                                           stored_table(args.layout))
            results["logical"].append(lrows / logical_s)
            batch_text = (f"; batch COPY pipe {results['batch_copy'][-1]:,.0f}/s"
                          if results["batch_copy"] else "")
            print(f"catch-up run {n + 1}: streamgate {total:,} in {elapsed:.1f} s "
                  f"= {total / elapsed:,.0f}/s; row COPY pipe {rows / copy_s:,.0f}/s"
                  f"{batch_text}; logical "
                  f"{lrows / logical_s:,.0f}/s; load {os.getloadavg()[0]:.1f}", flush=True)
            with contextlib.suppress(Exception):  # keep the stores small for the next run
                client.call("stream delete", {"path": paths[1]})
                client.call("stream delete", {"path": paths[0]})
    finally:
        src_store.close()
        dst_store.close()
        if private:
            private.remove()
        else:
            with psycopg.connect(with_db(args.url, "postgres"), autocommit=True) as conn:
                for db in ("sgbench_pub", "sgbench_sub"):
                    conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                        sql.Identifier(db)))
    results["logical_where"] = [0.0 if private is None else 1.0]
    return results


# --- 2. steady state ---------------------------------------------------------------------------


def steady_producer(url: str, token: str, batch: int, interval: float, seconds: float,
                    out: multiprocessing.Queue) -> None:
    session = requests.Session()
    session.headers.update({"Authorization": f"Token {token}", "Content-Type": "application/json"})
    body = json.dumps({"records": [{"value": "x" * VALUE_BYTES}] * batch}).encode()
    acked: list[tuple[int, int, float]] = []
    errors: list[str] = []
    start = time.monotonic()
    due, deadline = start, start + seconds
    while due < deadline:
        now = time.monotonic()
        if due > now:
            time.sleep(due - now)
        try:
            response = session.post(url, data=body, timeout=30)
            response.raise_for_status()
        except requests.RequestException as error:  # counted and reported, not fatal
            body_text = error.response.text if error.response is not None else ""
            errors.append(f"{error} {body_text}"[:300])
        else:
            at = time.monotonic()
            acked += [(o["partition"], o["offset"], at) for o in response.json()["offsets"]]
        at = time.monotonic()
        # Slots missed while a call took too long are skipped, not made up in a burst: the
        # run lasts `seconds` and the achieved rate is reported as it is.
        due = max(due + interval, at)
    out.put((acked, time.monotonic() - start, errors))


def measure_steady(deploy: Deployment, client, token: str, args: argparse.Namespace) -> dict:  # type: ignore[no-untyped-def]
    src, dst = (uuid.UUID(u) for u in create_pair(client, "steady", paused=False))
    watch = ReplicaWatch(deploy, dst)
    batch = args.steady_batch
    interval = batch * args.producers / args.steady_rate
    out: multiprocessing.Queue = multiprocessing.Queue()
    target = f"{deploy.url}/api/v1/streams/{src}/topics/{TOPIC}/messages/"
    producers = [multiprocessing.Process(target=steady_producer, args=(
        target, token, batch, interval, args.steady_seconds, out))
        for _ in range(args.producers)]
    load_before = os.getloadavg()[0]
    cpu_before = cpu_by_process(deploy)
    with profiling(deploy, "steady"):
        for producer in producers:
            producer.start()
        acked, took, errors = [], 0.0, []
        for _ in producers:
            got, spent, failed = out.get()
            acked += got
            errors += failed
            took = max(took, spent)
        for producer in producers:
            producer.join()
    seen = watch.finish(acked)
    return {**steady_summary(acked, seen, took, errors, cpu_before, deploy),
            "load": (load_before, os.getloadavg()[0])}


def steady_summary(acked: list, seen: dict, took: float, errors: list, cpu_before: dict,
                   deploy: Deployment) -> dict:
    """A steady run's figures: rate, lag (lag_summary), CPU ms per 1,000 acknowledged
    messages per process over the whole run, and the produce errors."""
    return {"produced": len(acked), "rate": len(acked) / took, **lag_summary(acked, seen),
            "cpu_per_1k": {label: (used - cpu_before.get(label, 0.0)) * 1e6 / max(len(acked), 1)
                           for label, used in cpu_by_process(deploy).items()},
            "errors": len(errors), "first_error": errors[0] if errors else ""}


def lag_summary(acked: list, seen: dict) -> dict:
    """End-to-end lag in ms of each acknowledged (partition, offset, time acked), against the
    (time, high watermark) marks the replica was seen at per partition: its p50, p99, max and
    mean, and how many messages never arrived (NaN figures when none did)."""
    lags, missing = [], 0
    for p, o, at in acked:
        marks = seen[p]
        i = bisect.bisect_right([h for _, h in marks], o)  # first mark with high > o
        if i >= len(marks):
            missing += 1
            continue
        lags.append((marks[i][0] - at) * 1000)
    lags.sort()

    def pct(q: float) -> float:
        return lags[min(len(lags) - 1, int(q * len(lags)))] if lags else float("nan")

    return {"p50": pct(0.50), "p99": pct(0.99), "max": lags[-1] if lags else float("nan"),
            "mean": statistics.fmean(lags) if lags else float("nan"), "missing": missing}


# --- 3. idle cost ------------------------------------------------------------------------------

IDLE_SCRIPT = """
from django.contrib.auth import get_user_model
from replication.services import replica_add, stream_create, topic_create, upstream_add
user = get_user_model().objects.get(username="bench")
for i in range({count}):
    src = stream_create(actor=user, path=f"/mapr/{source}/idle{{i}}")
    topic_create(actor=user, stream=src, name="t", partitions=1)
    dst = stream_create(actor=user, path=f"/mapr/{replica}/idle{{i}}")
    replica_add(actor=user, source=src, replica=dst)
    upstream_add(actor=user, replica=dst, source=src)
"""


def measure_idle(deploy: Deployment, args: argparse.Namespace) -> dict:
    start = time.perf_counter()
    deploy.manage("shell", "-c", IDLE_SCRIPT.format(count=args.idle_streams, source=SOURCE,
                                                    replica=REPLICA))
    setup_s = time.perf_counter() - start
    time.sleep(25.0)  # the new links picked up, a full sweep done, before timing
    procs = {label: tree(p.pid) for label, p in deploy.engine.items()}
    before = {label: sum(cpu_seconds(p) for p in pids) for label, pids in procs.items()}
    wall = time.perf_counter()
    load_before = os.getloadavg()[0]
    with profiling(deploy, "idle"):
        time.sleep(args.idle_seconds)
    wall = time.perf_counter() - wall
    used = {label: sum(cpu_seconds(p) for p in pids) - before[label]
            for label, pids in procs.items()}
    return {"setup": setup_s, "wall": wall, "used": used,
            "load": (load_before, os.getloadavg()[0])}


# --- the command -------------------------------------------------------------------------------


def main(args: argparse.Namespace) -> int:
    skip = set(filter(None, args.skip.split(",")))
    deploy = Deployment(args.url)
    deploy.env["STREAMGATE_STORE_LAYOUT"] = args.layout  # the portal's and the engine's stores
    catchup = steady = idle = None
    try:
        token = deploy.start()
        client = setup(deploy, token)
        deploy.start_engine()
        deploy.wait_engine()
        if "catchup" not in skip:
            catchup = measure_catchup(deploy, client, args)
        if "steady" not in skip:
            steady = measure_steady(deploy, client, token, args)
            print(f"steady: {steady}", flush=True)
        if "idle" not in skip:
            idle = measure_idle(deploy, args)
            print(f"idle: {idle}", flush=True)
        if os.environ.get("SGBENCH_HOLD"):  # leave the processes up for a profiler
            print(f"holding: {({k: p.pid for k, p in deploy.engine.items()})}", flush=True)
            time.sleep(float(os.environ["SGBENCH_HOLD"]))
    finally:
        deploy.stop()
        if os.environ.get("SGBENCH_KEEP_LOGS"):
            print(f"engine logs kept in {deploy.logs}", flush=True)
        else:
            shutil.rmtree(deploy.logs, ignore_errors=True)
    print()
    print(report(args, catchup, steady, idle))
    return 0


def report(args: argparse.Namespace, catchup: dict | None, steady: dict | None,
           idle: dict | None) -> str:
    lines: list[str] = []
    if catchup:
        lines += catchup_table(args, catchup)
    if steady:
        lines += [
            f"Steady state: {args.producers} producer processes, each posting a batch of "
            f"{args.steady_batch} over REST every "
            f"{args.steady_batch * args.producers / args.steady_rate * 1000:.0f} ms "
            f"(aiming at {args.steady_rate:,}/s) for {args.steady_seconds:.0f} s (one run); "
            "lag = readable in the replica (replica watermark polled every ~5 ms) minus "
            "produce acknowledgement.", "",
            "| produced | achieved rate | p50 lag | p99 lag | max | not replicated | failed calls "
            "| target |",
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
            f"| {steady['produced']:,} | {steady['rate']:,.0f}/s | {steady['p50']:.1f} ms | "
            f"{steady['p99']:.1f} ms | {steady['max']:.0f} ms | {steady['missing']} | "
            f"{steady['errors']} | p50 < 50 ms, p99 < 250 ms |", "",
            "CPU per 1,000 acknowledged messages (ms): " + ", ".join(
                f"{label} {ms:.0f}" for label, ms in steady["cpu_per_1k"].items()), ""]
    if idle:
        used = idle["used"]
        total = sum(used.values())
        lines += [
            f"Idle: {args.idle_streams:,} streams with an agreed, unpaused replica each, "
            f"nothing produced; CPU over {idle['wall']:.0f} s (one run).", "",
            "| process | CPU s | % of one core |", "| --- | ---: | ---: |",
            *(f"| {label} | {v:.2f} | {100 * v / idle['wall']:.1f} % |"
              for label, v in used.items()),
            f"| total (target < 5 %) | {total:.2f} | {100 * total / idle['wall']:.1f} % |"]
    return "\n".join(lines)


def catchup_table(args: argparse.Namespace, catchup: dict) -> list[str]:
    """The catch-up figures: streamgate, the row pipe, the batch pipe (batch layout), logical
    replication of the layout's table; medians, each run, and streamgate's ratio to each."""
    where = ("a private PostgreSQL 15 instance (wal_level=logical, both databases on it)"
             if catchup["logical_where"][0] else "the same server")
    table = stored_table(args.layout)
    rows = [("sg", "streamgate catch-up (resume -> replica watermarks = source)"),
            ("copy", f"raw binary COPY pipe of the same messages as `messages` rows, commit per "
                     f"{PIPE_BATCH:,} rows"),
            ("batch_copy", "raw binary COPY pipe of the same batches (`batches` rows as stored), "
                           f"commit per {PIPE_BATCH:,} offsets"),
            ("logical", f"PostgreSQL logical replication of `{table}`, copy_data=true")]
    lines = [f"Backlog catch-up, {args.layout} store layout: {args.messages:,} messages of "
             f"{VALUE_BYTES} B in {PARTITIONS} partitions, appended {LOAD_BATCH:,} records a "
             f"call, link paused while loading, then resumed; medians of {args.runs} runs. "
             f"Logical replication on {where}.", "",
             "| measure | messages/s (median) | each run | streamgate / this (median) |",
             "| --- | ---: | --- | ---: |"]
    for key, label in rows:
        if not catchup[key]:
            continue
        ratio = statistics.median(a / b for a, b in zip(catchup["sg"], catchup[key], strict=True))
        each = ", ".join(f"{v / 1000:,.0f}k" for v in catchup[key])
        lines.append(f"| {label} | {statistics.median(catchup[key]):,.0f} | {each} | "
                     f"{ratio:.2f}x |")
    return [*lines, ""]
