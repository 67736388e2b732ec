"""Produce latency with a synchronous replica beside an asynchronous one (issue 4).

The deployment of bench/replication.py (the portal under uvicorn, two gateways on newyork and
the replicator as their own processes, production's engine settings), with two stream pairs
sanfrancisco -> newyork: one replica added `-synchronous true`, one not. One client produces
a single 200 B message per request through /api/v1, alternating between the two streams so
both meet the same noise, and times each request until its acknowledgement. A synchronous
produce is acknowledged once the replica applied it, so its latency includes the replicator's
linger, the hand-off to a gateway and the apply; the asynchronous one is the store's append.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time

import requests

from bench.replication import PARTITIONS, REPLICA, SOURCE, TOPIC, Deployment, setup

VALUE_BYTES = 200


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--produces", type=int, default=1000,
                        help="produces of one message to each stream")
    parser.add_argument("--warmup", type=int, default=50, help="produces not measured")
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/postgres",
                        help="the PostgreSQL server for the scratch databases")


def create_pair(client, name: str, *, synchronous: bool) -> str:  # type: ignore[no-untyped-def]
    src, dst = f"/mapr/{SOURCE}/{name}", f"/mapr/{REPLICA}/{name}"
    client.call("stream create", {"path": src})
    client.call("stream topic create", {"path": src, "topic": TOPIC, "partitions": PARTITIONS})
    client.call("stream create", {"path": dst})
    client.call("stream replica add", {"path": src, "replica": dst,
                                       "synchronous": synchronous})
    client.call("stream upstream add", {"path": dst, "upstream": src})
    return client.stream_uuid(src)


def replica_row(client, name: str) -> dict:  # type: ignore[no-untyped-def]
    return client.call("stream replica list", {"path": f"/mapr/{SOURCE}/{name}"})[0]


def wait_for_sync(client, name: str, timeout: float = 60) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while replica_row(client, name)["mode"] != "sync":
        if time.monotonic() > deadline:
            raise RuntimeError(f"the synchronous replica of {name} never reached sync mode")
        time.sleep(0.2)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measure(url: str, token: str, streams: dict[str, str], produces: int,
            warmup: int) -> tuple[dict[str, list[float]], int]:
    """Latencies (ms) per stream, and how many requests failed (a shared PostgreSQL server
    out of connections answers 500: such a request is left out and tried again)."""
    session = requests.Session()
    session.headers.update({"Authorization": f"Token {token}"})
    body = {"records": [{"value": "x" * VALUE_BYTES}]}
    times: dict[str, list[float]] = {name: [] for name in streams}
    failed = 0
    for i in range(warmup + produces):
        for name, stream in (streams.items() if i % 2 else reversed(streams.items())):
            while True:
                started = time.perf_counter()
                response = session.post(
                    f"{url}/api/v1/streams/{stream}/topics/{TOPIC}/messages/", json=body,
                    timeout=30)
                elapsed = (time.perf_counter() - started) * 1000
                if response.status_code < 500 or failed > 100:
                    break
                failed += 1
                time.sleep(0.2)
            response.raise_for_status()
            if i >= warmup:
                times[name].append(elapsed)
    return times, failed


class SyncDeployment(Deployment):
    """Keeps the portal's log beside the engine's, so a failed request can be explained."""

    def start(self) -> str:
        token = super().start()
        assert self.process is not None
        self.process.terminate()  # started logging nowhere: again, logging to a file
        self.process.wait(timeout=10)
        self.serve((self.logs / "portal.log").open("ab"))
        return token


def main(args: argparse.Namespace) -> int:
    deploy = SyncDeployment(args.url)
    deploy.env["STREAMGATE_PRODUCE_RATE"] = "100000/second"  # measure latency, not the limit
    try:
        token = deploy.start()
        client = setup(deploy, token)
        deploy.start_engine()
        streams = {"sync": create_pair(client, "sync", synchronous=True),
                   "async": create_pair(client, "async", synchronous=False)}
        wait_for_sync(client, "sync")
        since = replica_row(client, "sync")["modeSince"]
        times, failed = measure(deploy.url, token, streams, args.produces, args.warmup)
        row = replica_row(client, "sync")
        row["switchedDuringRun"] = row["modeSince"] != since
    except Exception:
        print(f"logs kept in {deploy.logs}", file=sys.stderr)
        deploy.stop()
        raise
    deploy.stop()
    shutil.rmtree(deploy.logs, ignore_errors=True)
    print(report(times, row, failed))
    return 0


def report(times: dict[str, list[float]], row: dict, failed: int) -> str:
    lines = ["produce latency, one 200 B message per request through /api/v1 (ms):",
             f"{'replica':<8} {'n':>6} {'p50':>8} {'p99':>8} {'mean':>8} {'max':>8}"]
    for name, values in times.items():
        lines.append(f"{name:<8} {len(values):>6} {percentile(values, 0.5):>8.2f} "
                     f"{percentile(values, 0.99):>8.2f} {statistics.fmean(values):>8.2f} "
                     f"{max(values):>8.2f}")
    lines.append(f"synchronous replica at the end: mode {row['mode']} "
                 f"({row['modeReason']}), switched during the run: "
                 f"{'yes' if row['switchedDuringRun'] else 'no'}; {failed} requests failed "
                 "(too many clients) and were retried")
    return "\n".join(lines)
