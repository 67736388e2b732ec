"""Server time of the portal's heaviest pages, on PostgreSQL and Redis as production runs them.

A scratch control database `streamgate_bench_pages_<pid>` (and its cluster stores) gets the
issue's scene: 1,000 streams in one tenant, one of which (`/mapr/sanfrancisco/hub`, a topic of
4 partitions and 1,000 messages) has 64 replicas on newyork, agreed both ways, each with an
hour of lag samples in the cache (720 points, as the recorder keeps); two gateways with
throughput samples. The portal is served as compose.yaml serves it (uvicorn, two worker
processes) and one signed-in client (keep-alive, no concurrency) requests each page in turn.

The time is the server's own: the `duration_ms` the portal logs for each request
(portal/logging.py, from the first middleware to the response), read from the server's log;
the client's round trip on loopback is shown beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import requests
from psycopg import sql

from bench.produce import SERVERS, _free_port

ROOT = Path(__file__).resolve().parent.parent
PASSWORD = "bench-pages-password"
HUB = "/mapr/sanfrancisco/hub"
TARGET_MS = 150.0
# The overview and topology of a tenant with 1,000 streams and 2,000 links (issue 17).
GRAPH_TARGET_MS = 300.0
GRAPH_PAGES = ("overview", "topology")
# The stream page's other tabs (issue 34), each its own URL.
STREAM_TABS = ("topics", "replication", "groups", "messages", "settings", "access")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--replicas", type=int, default=64)
    parser.add_argument("--links", type=int, default=2000,
                        help="replica links in all: the hub's, then among the other streams")
    parser.add_argument("--requests", type=int, default=200, help="timed requests per page")
    parser.add_argument("--server", choices=sorted(SERVERS), default="uvicorn")
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/postgres",
                        help="the PostgreSQL server (the benchmark creates its own databases)")
    parser.add_argument("--only", default="",
                        help="comma-separated labels' first words to time (e.g. streams,usage)")


class Scene:
    """A production-mode portal on a scratch database with the benchmark's scene."""

    def __init__(self, server_url: str, server: str, label: str) -> None:
        self.command = SERVERS[server]
        self.name = f"streamgate_bench_{label}_{os.getpid()}"
        self.server = server_url
        parts = urlsplit(server_url)
        self.namespace = f"bench{os.getpid()}:"
        self.env = {
            **os.environ,
            "DATABASE_URL": urlunsplit(parts._replace(scheme="postgres", path=f"/{self.name}")),
            "SECRET_KEY": secrets.token_urlsafe(50),
            "REDIS_URL": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"),
            "STREAMGATE_DATA_DIR": str(ROOT / "var" / "bench"),
            "STREAMGATE_NAMESPACE": self.namespace,
            "STREAMGATE_LOG_JSON": "true",
            "LOG_LEVEL": "INFO",
        }
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = ROOT / "var" / "bench" / f"{self.name}.log"
        self.processes: list[subprocess.Popen] = []

    def manage(self, *args: str) -> str:
        done = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=self.env,
                              capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"manage.py {args[0]} failed:\n{done.stderr[-4000:]}")
        return done.stdout

    def create(self, streams: int, replicas: int, links: int = 0) -> dict:
        with psycopg.connect(self.server, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.name)))
        self.manage("migrate", "--no-input", "-v0")
        self.manage("collectstatic", "--no-input", "-v0")  # the manifest the pages name
        out = self.manage("shell", "-c", f"from bench.pages import seed; seed(streams="
                                         f"{streams}, replicas={replicas}, links={links})")
        return json.loads(out.strip().splitlines()[-1])

    def start(self, *extra: list[str]) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        out = self.log.open("wb")
        self.processes.append(subprocess.Popen(
            [sys.executable, *(arg.format(port=self.port) for arg in self.command)],
            cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT))
        for command in extra:
            self.spawn(command)
        for _ in range(200):
            try:
                requests.get(f"{self.url}/login/", timeout=10)
                return
            except (requests.ConnectionError, requests.Timeout):
                time.sleep(0.2)
        raise RuntimeError("the portal did not start")

    def spawn(self, command: list[str]) -> subprocess.Popen:
        """A helper process (engine, producer) on the scene's database and Redis; its output
        goes to var/bench/<scene>-<n>.log."""
        log = self.log.with_name(f"{self.name}-{len(self.processes)}.log").open("wb")
        process = subprocess.Popen([sys.executable, *command], cwd=ROOT, env=self.env,
                                   stdout=log, stderr=subprocess.STDOUT)
        self.processes.append(process)
        return process

    def session(self) -> requests.Session:
        """Signed in as alice through the sign-in form (CSRF and all)."""
        client = requests.Session()
        client.get(f"{self.url}/login/", timeout=10).raise_for_status()
        response = client.post(f"{self.url}/login/", timeout=10, allow_redirects=False, data={
            "username": "alice", "password": PASSWORD,
            "csrfmiddlewaretoken": client.cookies["csrftoken"]},
            headers={"Referer": f"{self.url}/login/"})
        assert response.status_code == 302, "sign-in failed"
        return client

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
        with psycopg.connect(self.server, autocommit=True) as conn:
            for (name,) in conn.execute("SELECT datname FROM pg_database WHERE "
                                        "starts_with(datname, %s)", [self.name]).fetchall():
                conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(
                    sql.Identifier(name)))
        try:
            import redis

            client = redis.Redis.from_url(self.env["REDIS_URL"])
            keys = list(client.scan_iter(f"*{self.namespace}*"))
            if keys:
                client.delete(*keys)
        except Exception as error:  # leftovers expire on their own (cache timeouts)
            print(f"redis clean-up: {error}", file=sys.stderr)

    def server_times(self, path: str, wait_for: int = 0) -> list[float]:
        """`duration_ms` of every successful logged request of `path`, in order (waiting until
        there are `wait_for` of them: the log line follows the response)."""
        for _ in range(100):
            times = []
            for line in self.log.read_text(errors="replace").splitlines():
                if (f'"path": "{path}"' in line and '"status": 200' in line
                        and '"duration_ms"' in line):
                    found = re.search(r'"duration_ms": ([0-9.]+)', line)
                    if found:
                        times.append(float(found.group(1)))
            if len(times) >= wait_for:
                return times
            time.sleep(0.02)
        raise RuntimeError(f"no log line for {path}")


def seed(*, streams: int, replicas: int, links: int = 0) -> None:
    """The scene, inside Django (`manage.py shell -c`); prints ids as JSON."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from accounts.models import Membership, Role, Tenant
    from replication import lag_history
    from replication.engine.store import Record
    from replication.models import Gateway, Stream, Topic
    from replication.services import (
        cluster_create,
        cluster_gateway_set,
        replica_connect,
        stream_create,
        topic_create,
    )
    from replication.services.messages import messages_produce

    users = get_user_model()
    operator = users.objects.create_user("ops", password=PASSWORD, is_staff=True)
    alice = users.objects.create_user("alice", password=PASSWORD)
    tenant = Tenant.objects.create(name="bench")
    Membership.objects.create(user=alice, tenant=tenant, role=Role.MEMBER)
    sf, ny = (cluster_create(actor=operator, name=n) for n in ("sanfrancisco", "newyork"))
    cluster_gateway_set(actor=operator, dstcluster="newyork", gateways="gw1 gw2")
    hub = stream_create(actor=alice, path=HUB)
    topic_create(actor=alice, stream=hub, name="clicks", partitions=4)
    messages_produce(actor=alice, stream=hub, topic="clicks",
                     records=[Record(f"click-{i}".encode()) for i in range(1000)])
    for i in range(replicas):
        replica = stream_create(actor=alice, path=f"/mapr/newyork/hub-r{i:02d}",
                                copymetafrom=HUB)
        replica_connect(actor=alice, source=hub, replica=replica)
    aces = dict.fromkeys(("produceperm", "consumeperm", "topicperm", "copyperm", "adminperm"),
                         "u:alice")
    filler = Stream.objects.bulk_create(
        Stream(path=f"/mapr/{c.name}/s{i:04d}", cluster=c, name=f"s{i:04d}", tenant=tenant,
               created_by=alice, **aces)
        for i, c in ((i, (sf, ny)[i % 2]) for i in range(streams - 1 - replicas)))
    Topic.objects.bulk_create(Topic(stream=s, name="events", origin_uuid=s.uuid)
                              for s in filler)
    _more_links(filler, links - replicas, alice)
    now = time.time()
    lag_history.lag_record()  # the latest sample of each link, from the stores
    _fill_history(hub.pk, now)
    Gateway.objects.update(messages_applied=1000)
    lag_history.gateways_record(now=now - 5)
    Gateway.objects.update(messages_applied=6000, last_heartbeat=timezone.now())
    lag_history.gateways_record(now=now)
    print(json.dumps({"hub": hub.pk}))


def _more_links(streams: list, count: int, alice: object) -> None:
    """`count` agreed links among the filler streams (each to the next few streams, both
    clusters), written in bulk as the services would leave them; a few paused, waiting
    (no upstream) or in error, so every health shows."""
    from replication.models import Compression, ReplicaLink, Upstream

    n = len(streams)
    if count <= 0 or n < 2:
        return
    pairs = [(streams[j % n], streams[(j % n + 1 + j // n) % n]) for j in range(count)]
    pairs = [(a, b) for a, b in pairs if a.pk != b.pk]
    idx: dict[int, int] = {}
    rows = []
    for j, (a, b) in enumerate(pairs):
        idx[a.pk] = idx.get(a.pk, -1) + 1
        rows.append(ReplicaLink(source=a, replica=b, idx=idx[a.pk], paused=j % 97 == 0,
                                networkcompression=Compression.LZ4, created_by=alice,
                                last_error="gateway gw2 refused a batch" if j % 211 == 0
                                else ""))
    ReplicaLink.objects.bulk_create(rows)
    upstream_idx: dict[int, int] = {}
    upstreams = []
    for k, (a, b) in enumerate(pairs):
        if k % 53:  # every 53rd waits for its replica's owner
            upstream_idx[b.pk] = upstream_idx.get(b.pk, -1) + 1
            upstreams.append(Upstream(replica=b, source=a, idx=upstream_idx[b.pk],
                                      created_by=alice))
    Upstream.objects.bulk_create(upstreams)


def _fill_history(hub_id: int, now: float) -> None:
    """An hour of samples for every link of the hub, written as the recorder leaves them."""
    from replication.models import ReplicaLink

    fill_history(ReplicaLink.objects.filter(source_id=hub_id).values_list("pk", flat=True), now)


def fill_history(link_ids: Iterable[int], now: float) -> None:
    """An hour of samples for each link, written as the recorder leaves them."""
    from replication import lag_history

    ring = [[int((now - 3600 + t * 5) * 1000), (t * 37) % 500, (t * 37) % 500 * 10,
             (t * 53) % 4000, 0] for t in range(lag_history.MAX_POINTS)]
    lag_history.rings().fill(dict.fromkeys(link_ids, ring))


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _get(client: requests.Session, url: str, failures: list[str]) -> requests.Response:
    """GET, trying again a few times on a server error: the PostgreSQL server may be shared,
    and other processes filling its connection slots is not the page's time. Failures are
    counted and printed with the table."""
    for _ in range(30):
        response = client.get(url, timeout=60)
        if response.status_code < 500:
            return response
        failures.append(url)
        time.sleep(2)
    response.raise_for_status()
    return response


def measure(scene: Scene, pages: dict[str, str], count: int,
            failures: list[str]) -> list[tuple]:
    client = scene.session()
    rows = []
    for label, path in pages.items():
        for _ in range(10):  # warm-up: connections, template caches
            _get(client, scene.url + path, failures).raise_for_status()
        round_trips, server = [], []
        for _ in range(count):
            before = len(scene.server_times(path))
            start = time.perf_counter()
            response = _get(client, scene.url + path, failures)
            round_trips.append((time.perf_counter() - start) * 1000)
            response.raise_for_status()
            server.append(scene.server_times(path, wait_for=before + 1)[-1])
        rows.append((label, path, server, round_trips, len(response.content)))
    return rows


def main(args: argparse.Namespace) -> int:
    scene = Scene(args.url, args.server, "pages")
    try:
        started = time.perf_counter()
        ids = scene.create(args.streams, args.replicas, args.links)
        print(f"scene ready in {time.perf_counter() - started:.0f} s", flush=True)
        scene.start()
        hub = ids["hub"]
        pages = {"overview": "/", "topology": "/topology/",
                 "topology data JSON": "/topology/data/",
                 "streams list": "/streams/",
                 "stream page (64 replicas)": f"/streams/{hub}/",
                 **{f"stream tab {tab}": f"/streams/{hub}/{tab}/" for tab in STREAM_TABS},
                 "consumer groups (tenant)": "/groups/", "usage": "/usage/",
                 "schemas": "/schemas/",
                 "overview live fragment": "/overview/live/",
                 "stream replicas fragment": f"/streams/{hub}/replicas/",
                 "lag history JSON (64 x 720 points)": f"/streams/{hub}/lag/"}
        if args.only:
            wanted = tuple(word.strip() for word in args.only.split(","))
            pages = {k: v for k, v in pages.items() if k.startswith(wanted)}
        failures: list[str] = []
        rows = measure(scene, pages, args.requests, failures)
    finally:
        scene.stop()
    print()
    print(f"{args.streams:,} streams, {args.links:,} replica links ({args.replicas} of them "
          f"on one stream), {args.server} (2 workers), {args.requests} sequential requests "
          f"per page after 10 warm-up")
    print()
    print("| page | server p50 (ms) | server p95 (ms) | server max (ms) | round trip p95 (ms) "
          "| size (kB) | target met (p95 < 150 ms; overview and topology < 300 ms) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    if failures:
        print(f"({len(failures)} requests answered 5xx and were asked again: "
              "database connection slots taken by other processes; not counted)")
        print()
    ok = True
    for label, path, server, trips, size in rows:
        p95 = _percentile(server, 0.95)
        met = p95 < (GRAPH_TARGET_MS if label in GRAPH_PAGES else TARGET_MS)
        ok &= met or "JSON" in label or "fragment" in label
        print(f"| {label} `{path}` | {statistics.median(server):.1f} | {p95:.1f} | "
              f"{max(server):.1f} | {_percentile(trips, 0.95):.1f} | {size / 1024:.0f} | "
              f"{'yes' if met else 'no'} |")
    return 0 if ok else 1
