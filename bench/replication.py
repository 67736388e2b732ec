"""The replication engine, as production runs it (issue 4): backlog catch-up next to a raw
binary COPY pipe and PostgreSQL logical replication, steady-state end-to-end lag, idle cost.

A scratch control database `sgbench_<pid>` with two cluster stores beside it
(`sgbench_<pid>_store_sanfrancisco`, `..._store_newyork`), a portal served as compose.yaml
serves it (bench/produce.py's `Portal`), and the engine as its own processes:
`manage.py rungateway --cluster newyork --name gw1|gw2` and `manage.py runreplicator`, with
production's engine settings, a Redis namespace and a Celery queue of the run's own.
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
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import requests
from psycopg import sql

from bench.pgserver import PrivatePostgres
from bench.produce import ROOT, Portal
from replication.engine.pg.relay import relay

VALUE_BYTES = 200
LOAD_BATCH = 1000
PIPE_BATCH = 5000
PARTITIONS = 4
SOURCE, REPLICA = "sanfrancisco", "newyork"
TOPIC = "t"
MESSAGES_DDL = """
CREATE TABLE IF NOT EXISTS messages (
    pid integer NOT NULL, "offset" bigint NOT NULL, ts bigint NOT NULL, key bytea,
    value bytea NOT NULL, headers bytea, origin uuid NOT NULL, producer text,
    PRIMARY KEY (pid, "offset"))
"""
COLUMNS = 'pid, "offset", ts, key, value, headers, origin, producer'
PIPE_IN = f"COPY sgbench_pipe ({COLUMNS}) FROM STDIN (FORMAT BINARY)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--messages", type=int, default=1_000_000, help="backlog size")
    parser.add_argument("--runs", type=int, default=3, help="catch-up runs")
    parser.add_argument("--steady-seconds", type=float, default=60.0)
    parser.add_argument("--steady-rate", type=int, default=5000, help="messages/s produced")
    parser.add_argument("--producers", type=int, default=4,
                        help="producer processes sharing the steady rate (a REST call takes "
                             "longer than 10 ms, so one paced client cannot keep 5,000/s)")
    parser.add_argument("--steady-batch", type=int, default=50,
                        help="records per produce call of the steady producers")
    parser.add_argument("--idle-streams", type=int, default=1000)
    parser.add_argument("--idle-seconds", type=float, default=60.0)
    parser.add_argument("--skip", default="", help="comma-separated: catchup,steady,idle")
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/postgres")


def _with_db(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


# --- the deployment ----------------------------------------------------------------------------


class Deployment(Portal):
    """The portal (uvicorn, two workers) plus the engine's three processes, on `sgbench_<pid>`."""

    # A loaded machine's first request (Django importing) overruns a 1 s probe: that is a slow
    # start, not a failed one.
    probe_timeout = 30.0

    def __init__(self, server_url: str) -> None:
        super().__init__(server_url, "uvicorn")
        self.name = f"sgbench_{os.getpid()}"
        parts = urlsplit(server_url)
        self.namespace = f"sgbench-{uuid.uuid4().hex[:10]}:"
        self.env.update({
            "DATABASE_URL": urlunsplit(parts._replace(scheme="postgres", path=f"/{self.name}")),
            "STREAMGATE_NAMESPACE": self.namespace,
            "CELERY_QUEUE": f"sgbench-{uuid.uuid4().hex[:8]}",
        })
        self.engine: dict[str, subprocess.Popen] = {}
        self.logs = Path(tempfile.mkdtemp(prefix="sgbench-logs-"))

    def store_url(self, cluster: str) -> str:
        return _with_db(self.server, f"{self.name}_store_{cluster}")

    def start_engine(self) -> None:
        for label, command in (
            ("gw1", ["rungateway", "--cluster", REPLICA, "--name", "gw1", "--loglevel", "WARNING"]),
            ("gw2", ["rungateway", "--cluster", REPLICA, "--name", "gw2", "--loglevel", "WARNING"]),
            ("replicator", ["runreplicator"]),
        ):
            log = (self.logs / f"{label}.log").open("ab")
            self.engine[label] = subprocess.Popen(
                [sys.executable, "manage.py", *command], cwd=ROOT, env=self.env,
                stdout=log, stderr=subprocess.STDOUT)

    def wait_engine(self, timeout: float = 120.0) -> None:
        """Until both gateways beat and a replicator holds its leases: on a loaded machine the
        processes take more than a few seconds to import Django, and a steady run measured
        before that would time their start-up, not replication."""
        import redis

        client = redis.Redis.from_url(self.env["REDIS_URL"])
        keys = [f"{self.namespace}sg:gw:{REPLICA}:{name}" for name in ("gw1", "gw2")]
        deadline = time.monotonic() + timeout
        while client.exists(*keys) < len(keys) or not client.zcount(
                f"{self.namespace}sg:replicators", int(time.time() * 1000), "+inf"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the engine was not up after {timeout:.0f} s: see "
                                   f"{self.logs}")
            time.sleep(0.2)

    def stop(self) -> None:
        for process in self.engine.values():
            process.terminate()
        for process in self.engine.values():
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.engine = {}
        try:
            super().stop()
        finally:
            import redis

            client = redis.Redis.from_url(self.env["REDIS_URL"])
            for pattern in (f"{self.namespace}*", f"_kombu.binding*{self.namespace}*",
                            f"{self.env['CELERY_QUEUE']}*"):
                keys = list(client.scan_iter(pattern))
                if keys:
                    client.delete(*keys)


def setup(deploy: Deployment, token: str) -> object:
    from streamgate.client import Client

    client = Client(deploy.url, token)
    client.call("cluster create", {"name": SOURCE})
    client.call("cluster create", {"name": REPLICA})
    client.call("cluster gateway set", {"dstcluster": REPLICA, "gateways": "gw1 gw2"})
    return client


def create_pair(client, name: str, *, paused: bool,  # type: ignore[no-untyped-def]
                partitions: int = PARTITIONS) -> tuple[str, str]:
    src, dst = f"/mapr/{SOURCE}/{name}", f"/mapr/{REPLICA}/{name}"
    client.call("stream create", {"path": src})
    client.call("stream topic create", {"path": src, "topic": TOPIC, "partitions": partitions})
    client.call("stream create", {"path": dst})
    client.call("stream replica add", {"path": src, "replica": dst, "paused": paused})
    client.call("stream upstream add", {"path": dst, "upstream": src})
    return client.stream_uuid(src), client.stream_uuid(dst)


def watermarks(store, stream: uuid.UUID) -> dict[int, int]:  # type: ignore[no-untyped-def]
    from replication.engine.store import UnknownTopic

    try:
        return {p: high for p, (_, high) in store.watermarks(stream, TOPIC).items()}
    except UnknownTopic:
        return {}


@contextlib.contextmanager
def profiling(deploy: Deployment, phase: str):  # type: ignore[no-untyped-def]
    """With SGBENCH_PROFILE=<folder>, py-spy (on PATH or SGBENCH_PYSPY) samples the engine
    processes and the portal's workers during the phase, as collapsed stacks."""
    folder = os.environ.get("SGBENCH_PROFILE")
    if not folder:
        yield
        return
    spy = os.environ.get("SGBENCH_PYSPY", "py-spy")
    targets = {label: p.pid for label, p in deploy.engine.items()}
    if deploy.process:
        for n, pid in enumerate(tree(deploy.process.pid)[1:]):
            targets[f"portal{n}"] = pid
    spies = [subprocess.Popen([spy, "record", "--nonblocking", "-r", "100", "-f", "raw",
                               "-o", f"{folder}/{phase}-{label}.txt", "--pid", str(pid)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for label, pid in targets.items()]
    try:
        yield
    finally:
        for spy_process in spies:
            spy_process.send_signal(2)
        for spy_process in spies:
            try:
                spy_process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                spy_process.kill()


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


def copy_pipe(src_url: str, dst_url: str, stream: uuid.UUID) -> tuple[float, int]:
    """Binary COPY of the stream's rows out of the source store into a same-shaped table of
    the replica database, streamed through the engine's relay (the gateways' own), one
    transaction per PIPE_BATCH rows of a partition."""
    with psycopg.connect(src_url) as src, psycopg.connect(dst_url) as dst:
        dst.execute("DROP TABLE IF EXISTS sgbench_pipe")
        dst.execute("CREATE TABLE sgbench_pipe (LIKE messages INCLUDING ALL)")
        dst.commit()
        ranges = [(pid, high) for pid, high in src.execute(
            "SELECT id, next_offset FROM partitions WHERE stream = %s AND topic = %s",
            (stream, TOPIC)).fetchall()]
        src.commit()
        rows = 0
        start = time.perf_counter()
        with dst.cursor() as into:
            for pid, high in ranges:
                for first in range(0, high, PIPE_BATCH):
                    copy_out = sql.SQL(
                        "COPY (SELECT {} FROM messages WHERE pid = {} AND \"offset\" >= {} "
                        "AND \"offset\" < {} ORDER BY \"offset\") TO STDOUT (FORMAT BINARY)"
                    ).format(sql.SQL(COLUMNS), pid, first, first + PIPE_BATCH)
                    relay(src, copy_out.as_bytes(src), into, PIPE_IN)
                    src.commit()
                    dst.commit()
                    rows += min(PIPE_BATCH, high - first)
        elapsed = time.perf_counter() - start
        dst.execute("DROP TABLE sgbench_pipe")
        dst.commit()
    return elapsed, rows


def logical_setup(source_url: str) -> tuple[str, str, PrivatePostgres | None]:
    """(publisher URL, subscriber URL, the private instance or None)."""
    with psycopg.connect(_with_db(source_url, "postgres")) as conn:
        level = conn.execute("SHOW wal_level").fetchone()[0]
    private = None
    if level != "logical":  # default settings (fsync on) but the one logical replication needs
        private = PrivatePostgres(prefix="sgbench-pg-", settings={"wal_level": "logical"})
        atexit.register(private.remove)
        source_url = private.launch().url("postgres")
    with psycopg.connect(_with_db(source_url, "postgres"), autocommit=True) as conn:
        for name in ("sgbench_pub", "sgbench_sub"):
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return _with_db(source_url, "sgbench_pub"), _with_db(source_url, "sgbench_sub"), private


def logical_run(store_url: str, stream: uuid.UUID, pub_url: str, sub_url: str) -> tuple[float, int]:
    """Load the stream's rows into the publisher (untimed), then time a subscription with
    copy_data=true until the subscriber holds them all."""
    with psycopg.connect(pub_url, autocommit=True) as pub, \
            psycopg.connect(sub_url, autocommit=True) as sub:
        with contextlib.suppress(psycopg.Error):
            sub.execute("DROP SUBSCRIPTION IF EXISTS sgbench_sub")
        for conn in (pub, sub):
            conn.execute("DROP TABLE IF EXISTS messages")
            conn.execute(MESSAGES_DDL)
        with psycopg.connect(store_url) as src, src.cursor() as out, pub.cursor() as into:
            pids = source_pids(src, stream)
            with out.copy(sql.SQL("COPY (SELECT {} FROM messages WHERE pid = ANY({})) TO STDOUT "
                                  "(FORMAT BINARY)").format(sql.SQL(COLUMNS), pids)) as reader, \
                    into.copy(f"COPY messages ({COLUMNS}) FROM STDIN (FORMAT BINARY)") as writer:
                for chunk in reader:
                    writer.write(chunk)
        expected = pub.execute("SELECT count(*) FROM messages").fetchone()[0]
        pub.execute("DROP PUBLICATION IF EXISTS sgbench_pub")
        pub.execute("CHECKPOINT")
        pub.execute("CREATE PUBLICATION sgbench_pub FOR TABLE messages")
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
                    "SELECT count(*) FROM messages").fetchone()[0] >= expected:
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
            conn.execute("DROP TABLE messages")
    return elapsed, expected


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
    from replication.engine.pg import PostgresStore

    src_store, dst_store = (PostgresStore(deploy.store_url(c)) for c in (SOURCE, REPLICA))
    pub_url, sub_url, private = logical_setup(args.url)
    results: dict[str, list[float]] = {"sg": [], "copy": [], "logical": []}
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
            copy_s, rows = copy_pipe(deploy.store_url(SOURCE), deploy.store_url(REPLICA), src)
            results["copy"].append(rows / copy_s)
            logical_s, lrows = logical_run(deploy.store_url(SOURCE), src, pub_url, sub_url)
            results["logical"].append(lrows / logical_s)
            print(f"catch-up run {n + 1}: streamgate {total:,} in {elapsed:.1f} s "
                  f"= {total / elapsed:,.0f}/s; COPY pipe {rows / copy_s:,.0f}/s; logical "
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
            with psycopg.connect(_with_db(args.url, "postgres"), autocommit=True) as conn:
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
    from replication.engine.pg import PostgresStore

    src, dst = (uuid.UUID(u) for u in create_pair(client, "steady", paused=False))
    dst_store = PostgresStore(deploy.store_url(REPLICA))
    seen: dict[int, list[tuple[float, int]]] = {p: [(0.0, 0)] for p in range(PARTITIONS)}
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            marks = watermarks(dst_store, dst)
            at = time.monotonic()
            for p, high in marks.items():
                if high > seen[p][-1][1]:
                    seen[p].append((at, high))
            time.sleep(0.005)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
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
    deadline = time.monotonic() + 30
    ends: dict[int, int] = {}
    for p, o, _ in acked:
        ends[p] = max(ends.get(p, 0), o + 1)
    while any(seen[p][-1][1] < e for p, e in ends.items()) and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    poller.join()
    dst_store.close()
    lags = []
    missing = 0
    for p, o, at in acked:
        marks = seen[p]
        i = bisect.bisect_right([h for _, h in marks], o)  # first mark with high > o
        if i >= len(marks):
            missing += 1
            continue
        lags.append((marks[i][0] - at) * 1000)
    lags.sort()

    def pct(q: float) -> float:
        return lags[min(len(lags) - 1, int(q * len(lags)))]

    return {"produced": len(acked), "rate": len(acked) / took, "p50": pct(0.50),
            "p99": pct(0.99), "max": lags[-1], "mean": statistics.fmean(lags),
            "missing": missing, "load": (load_before, os.getloadavg()[0]),
            # CPU ms per 1,000 acknowledged messages, per process, over the whole run.
            "cpu_per_1k": {label: (used - cpu_before.get(label, 0.0)) * 1e6 / max(len(acked), 1)
                           for label, used in cpu_by_process(deploy).items()},
            "errors": len(errors), "first_error": errors[0] if errors else ""}


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


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree(pid: int) -> list[int]:
    pids = [pid]
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            for child in (task / "children").read_text().split():
                pids += tree(int(child))
    return pids


def cpu_by_process(deploy: Deployment) -> dict[str, float]:
    """CPU seconds so far of the portal (all its workers) and each engine process; PostgreSQL
    and Redis are shared with whatever else runs, so they are not counted."""
    procs = {"portal": deploy.process, **deploy.engine}
    return {label: sum(cpu_seconds(p) for p in tree(process.pid))
            for label, process in procs.items() if process is not None}


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

    def each(values: list[float]) -> str:
        return ", ".join(f"{v / 1000:,.0f}k" for v in values)

    if catchup:
        sg, cp, lg = (statistics.median(catchup[k]) for k in ("sg", "copy", "logical"))
        where = ("a private PostgreSQL 15 instance (wal_level=logical, both databases on it)"
                 if catchup["logical_where"][0] else "the same server")
        r_copy = [a / b for a, b in zip(catchup["sg"], catchup["copy"], strict=True)]
        r_log = [a / b for a, b in zip(catchup["sg"], catchup["logical"], strict=True)]
        lines += [
            f"Backlog catch-up: {args.messages:,} messages of {VALUE_BYTES} B in {PARTITIONS} "
            f"partitions, link paused while loading, then resumed; medians of {args.runs} runs. "
            f"Logical replication on {where}.", "",
            "| measure | messages/s (median) | each run | streamgate / this (median) |",
            "| --- | ---: | --- | ---: |",
            f"| streamgate catch-up (resume -> replica watermarks = source) | {sg:,.0f} | "
            f"{each(catchup['sg'])} | 1.00x |",
            f"| raw binary COPY pipe, commit per {PIPE_BATCH:,} rows | {cp:,.0f} | "
            f"{each(catchup['copy'])} | {statistics.median(r_copy):.2f}x |",
            f"| PostgreSQL logical replication, copy_data=true | {lg:,.0f} | "
            f"{each(catchup['logical'])} | {statistics.median(r_log):.2f}x |", ""]
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
