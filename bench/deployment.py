"""The replication benchmarks' deployment (bench/replication.py): a portal served as
compose.yaml serves it, the engine as its own processes (two gateways on the replica cluster,
a replicator) on a scratch control database, the two clusters and a linked stream pair; and
what the benchmarks read of it (watermarks, CPU time per process, profiles)."""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from bench.processes import stop_process
from bench.produce import ROOT, Portal

VALUE_BYTES = 200
LOAD_BATCH = 1000
PIPE_BATCH = 5000
PARTITIONS = 4
SOURCE, REPLICA = "sanfrancisco", "newyork"
TOPIC = "t"
MESSAGES_DDL = """
CREATE TABLE IF NOT EXISTS messages (
    pid integer NOT NULL, "offset" bigint NOT NULL, ts bigint NOT NULL, key bytea,
    value bytea, headers bytea, origin uuid NOT NULL, producer text,
    PRIMARY KEY (pid, "offset"))
"""
COLUMNS = 'pid, "offset", ts, key, value, headers, origin, producer'
PIPE_IN = f"COPY sgbench_pipe ({COLUMNS}) FROM STDIN (FORMAT BINARY)"


def with_db(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


def add_load_arguments(parser: argparse.ArgumentParser, *, runs: int, steady_seconds: float,
                       batch_help: str = "records per produce call of the steady producers",
                       ) -> None:
    """The backlog and steady-load options of the replication benchmarks."""
    parser.add_argument("--messages", type=int, default=1_000_000, help="backlog size")
    parser.add_argument("--runs", type=int, default=runs, help="catch-up runs (medians reported)")
    parser.add_argument("--steady-seconds", type=float, default=steady_seconds)
    parser.add_argument("--steady-rate", type=int, default=5000, help="messages/s produced")
    parser.add_argument("--producers", type=int, default=4,
                        help="producer processes sharing the steady rate (a REST call takes "
                             "longer than 10 ms, so one paced client cannot keep 5,000/s)")
    parser.add_argument("--steady-batch", type=int, default=50, help=batch_help)


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
        return with_db(self.server, f"{self.name}_store_{cluster}")

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
        wait_engine(self.env, self.namespace, ("gw1", "gw2"), timeout=timeout, logs=self.logs)

    def stop(self) -> None:
        for process in self.engine.values():
            process.terminate()  # all at once, then each waited for
        for process in self.engine.values():
            stop_process(process)
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


def wait_engine(env: dict[str, str], namespace: str, gateways: tuple[str, ...], *,
                timeout: float = 120.0, logs: object = "the processes' logs") -> None:
    """Until the gateways of REPLICA beat and a replicator holds its leases: on a loaded
    machine the processes take more than a few seconds to import Django, and a run measured
    before that would time their start-up, not replication."""
    import redis

    client = redis.Redis.from_url(env["REDIS_URL"])
    keys = [f"{namespace}sg:gw:{REPLICA}:{name}" for name in gateways]
    deadline = time.monotonic() + timeout
    while client.exists(*keys) < len(keys) or not client.zcount(
            f"{namespace}sg:replicators", int(time.time() * 1000), "+inf"):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the engine was not up after {timeout:.0f} s: see {logs}")
        time.sleep(0.2)


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


class ReplicaWatch:
    """The replica's high watermarks as they move, polled every 5 ms in a thread from now
    until `finish()`: partition -> [(monotonic time, high)]."""

    def __init__(self, deploy: Deployment, stream: uuid.UUID) -> None:
        from replication.engine.factory import open_store

        self.store, self.stream = open_store(deploy.store_url(REPLICA)), stream  # its layout
        self.seen: dict[int, list[tuple[float, int]]] = {p: [(0.0, 0)] for p in range(PARTITIONS)}
        self._stop = threading.Event()
        self._poller = threading.Thread(target=self._poll, daemon=True)
        self._poller.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            marks = watermarks(self.store, self.stream)
            at = time.monotonic()
            for p, high in marks.items():
                if high > self.seen[p][-1][1]:
                    self.seen[p].append((at, high))
            time.sleep(0.005)

    def finish(self, acked: list) -> dict[int, list[tuple[float, int]]]:
        """Wait (30 s at most) until every acknowledged (partition, offset, _) is replicated,
        then stop watching; what was seen."""
        ends: dict[int, int] = {}
        for p, o, _ in acked:
            ends[p] = max(ends.get(p, 0), o + 1)
        deadline = time.monotonic() + 30
        while any(self.seen[p][-1][1] < e for p, e in ends.items()) and time.monotonic() < deadline:
            time.sleep(0.05)
        self._stop.set()
        self._poller.join()
        self.store.close()
        return self.seen
