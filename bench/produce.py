"""Produce throughput through the REST API, and a range read through it, on PostgreSQL.

A scratch control database `streamgate_bench_<pid>` (and its cluster store) is created, the
portal is served as compose.yaml serves it (uvicorn, two worker processes; `--server daphne`
for the embedded default's single process), and client processes post
pre-encoded batches of 1,000 records of 200 B to
`/api/v1/streams/<uuid>/topics/<topic>/messages/` over keep-alive connections. Everything runs
on this machine: the clients take CPU from the server, as a co-located producer would.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import secrets
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import requests
from psycopg import sql

ROOT = Path(__file__).resolve().parent.parent
SERVERS = {
    # As compose.yaml runs the web service: uvicorn with WEB_WORKERS (2) processes.
    "uvicorn": ["-m", "uvicorn", "--host", "127.0.0.1", "--port", "{port}", "--no-access-log",
                "--workers", "2", "portal.asgi:application"],
    # One process, as the embedded default serves.
    "daphne": ["-m", "daphne", "-b", "127.0.0.1", "-p", "{port}", "portal.asgi:application"],
}
BATCH = 1000
VALUE_BYTES = 200


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each run")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--clients", type=int, default=4, help="producer processes")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--server", choices=sorted(SERVERS), default="uvicorn",
                        help="the ASGI server, as production runs it")
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/postgres",
                        help="the PostgreSQL server (the benchmark creates its own databases)")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Portal:
    """A production-mode portal on a scratch database, served by daphne."""

    probe_timeout = 1.0  # seconds the start-up probe waits for an answer

    def __init__(self, server_url: str, server: str) -> None:
        self.command = SERVERS[server]
        self.name = f"streamgate_bench_{os.getpid()}"
        parts = urlsplit(server_url)
        self.server = server_url
        self.env = {
            **os.environ,
            "DATABASE_URL": urlunsplit(parts._replace(scheme="postgres", path=f"/{self.name}")),
            "SECRET_KEY": secrets.token_urlsafe(50),
            "REDIS_URL": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"),
            "STREAMGATE_DATA_DIR": str(ROOT / "var" / "bench"),
            # Its own Redis keys: listeners of another deployment must not read as its own.
            "STREAMGATE_NAMESPACE": f"{self.name}:",
            "LOG_LEVEL": "WARNING",
        }
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def manage(self, *args: str) -> str:
        done = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=self.env,
                              capture_output=True, text=True)
        if done.returncode:  # say why, not only that it failed
            raise RuntimeError(f"manage.py {args[0]} failed ({done.returncode}): "
                               f"{done.stderr[-3000:]}")
        return done.stdout

    def start(self) -> str:
        with psycopg.connect(self.server, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.name)))
        self.manage("migrate", "--no-input", "-v0")
        token = self.manage("createtenantuser", "--tenant", "bench", "--username", "bench",
                            "--operator").strip().splitlines()[-1]
        self.serve(subprocess.DEVNULL)
        return token

    def serve(self, output: Any) -> None:
        """Start the server, its output into `output`, and return once it answers."""
        self.process = subprocess.Popen(
            [sys.executable, *(arg.format(port=self.port) for arg in self.command)],
            cwd=ROOT, env=self.env, stdout=output, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                requests.get(f"{self.url}/rest/", timeout=self.probe_timeout)
                return
            except requests.ConnectionError:
                time.sleep(0.1)
        raise RuntimeError("the portal did not start within 60 s")

    def stop(self) -> None:
        if self.process:
            self.process.terminate()
            self.process.wait(timeout=10)
        with psycopg.connect(self.server, autocommit=True) as conn:
            for (name,) in conn.execute("SELECT datname FROM pg_database WHERE "
                                        "starts_with(datname, %s)", [self.name]).fetchall():
                conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(
                    sql.Identifier(name)))


def setup_stream(url: str, token: str, partitions: int) -> str:
    from streamgate.client import Client

    client = Client(url, token)
    client.call("cluster create", {"name": "bench"})
    client.call("stream create", {"path": "/mapr/bench/produce"})
    client.call("stream topic create", {"path": "/mapr/bench/produce", "topic": "t",
                                        "partitions": partitions})
    return client.stream_uuid("/mapr/bench/produce")


def producer(url: str, token: str, body: bytes, seconds: float, start_at: float,
             counts: multiprocessing.Queue, batch: int = BATCH) -> None:
    session = requests.Session()
    session.headers.update({"Authorization": f"Token {token}",
                            "Content-Type": "application/json"})
    while time.time() < start_at:
        time.sleep(0.001)
    sent, deadline = 0, start_at + seconds
    while time.time() < deadline:
        response = session.post(url, data=body, timeout=30)
        response.raise_for_status()
        sent += batch
    counts.put(sent)


def produce_run(url: str, token: str, stream: str, clients: int, seconds: float,
                batch: int = BATCH) -> float:
    """Messages/s of `clients` processes producing `batch`-message REST calls for `seconds`."""
    value = "x" * VALUE_BYTES
    body = json.dumps({"records": [{"value": value}] * batch}).encode()
    target = f"{url}/api/v1/streams/{stream}/topics/t/messages/"
    counts: multiprocessing.Queue = multiprocessing.Queue()
    start_at = time.time() + 0.5
    workers = [multiprocessing.Process(target=producer,
                                       args=(target, token, body, seconds, start_at, counts, batch))
               for _ in range(clients)]
    for worker in workers:
        worker.start()
    total = sum(counts.get() for _ in workers)
    for worker in workers:
        worker.join()
    return total / seconds


def read_run(url: str, token: str, stream: str) -> float:
    """One consumer reading partition 0 from offset 0 to its end, 1,000 per request."""
    session = requests.Session()
    session.headers["Authorization"] = f"Token {token}"
    target, offset, start = f"{url}/api/v1/streams/{stream}/topics/t/messages/", 0, time.time()
    while True:
        got = session.get(target, params={"partition": 0, "offset": offset, "limit": 1000},
                          timeout=30).json()["messages"]
        if not got:
            return offset / (time.time() - start)
        offset = got[-1]["offset"] + 1


def main(args: argparse.Namespace) -> int:
    portal = Portal(args.url, args.server)
    produced, read = [], []
    try:
        token = portal.start()
        stream = setup_stream(portal.url, token, args.partitions)
        for n in range(args.runs):
            produced.append(produce_run(portal.url, token, stream, args.clients, args.seconds))
            read.append(read_run(portal.url, token, stream))
            print(f"run {n + 1}: produce {produced[-1]:,.0f} msg/s  "
                  f"REST read {read[-1]:,.0f} msg/s", flush=True)
    finally:
        portal.stop()
    print()
    print(f"REST API on {args.server}, batches of {BATCH:,} records of {VALUE_BYTES} B, "
          f"{args.clients} producer "
          f"processes, {args.partitions} partitions, {args.seconds:.0f} s per run; "
          f"medians of {args.runs} runs")
    print()
    print("| measure | messages/s (median) | each run |")
    print("| --- | ---: | --- |")
    for label, values in (("produce (POST .../messages/)", produced),
                          ("consume, one partition (GET .../messages/)", read)):
        each = ", ".join(f"{v / 1000:,.0f}k" for v in values)
        print(f"| {label} | {statistics.median(values):,.0f} | {each} |")
    return 0


def start_portal(deploy: Portal) -> str:
    """The deployment's portal and an operator token. bench/produce.py's `Portal.start` polls
    with a 1 s read timeout, which a busy machine exceeds while the portal starts: then wait
    longer and take a new token (createtenantuser is idempotent)."""
    import requests

    try:
        return deploy.start()
    except requests.ReadTimeout:
        requests.get(f"{deploy.url}/rest/", timeout=60)
        return deploy.manage("createtenantuser", "--tenant", "bench", "--username", "bench",
                             "--operator").strip().splitlines()[-1]
