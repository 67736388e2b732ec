"""Quota isolation: one tenant at its produce quota does not slow another (issue 29).

On a private PostgreSQL (bench/pgserver.py), a production-mode portal and one listener
(`manage.py runkafka`), as bench/kafka.py starts them, two tenants with a stream each. The quiet
tenant's librdkafka producer (acks=all, linger.ms 0) sends `--rate` messages of 1 KB a second
for `--seconds`, and each message's produce-to-acknowledgement time is taken. Two phases in
turn within each run, so a busy moment hits both alike: the quiet tenant alone; beside the noisy
tenant's producers sending flat out while it holds a produce quota of `--quota` bytes a second;
and, once after all runs, beside the same producers with no quota (what the quota buys).
Printed: the quiet tenant's p50 and p99 per phase (medians over runs), p99 against alone, and
the noisy tenant's rate.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import statistics
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from confluent_kafka import Producer

from bench.kafka import Listener
from bench.pgserver import PrivatePostgres
from bench.produce import Portal, start_portal

if TYPE_CHECKING:
    from streamgate.client import Client

TENANTS = ("quiet", "noisy")
VALUE = b"q" * 1024
PHASES = ("alone", "noisy at its quota", "noisy without a quota")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rate", type=int, default=200, help="quiet messages a second")
    parser.add_argument("--seconds", type=float, default=15.0, help="per phase")
    parser.add_argument("--quota", type=int, default=1 << 20,
                        help="the noisy tenant's produce quota, bytes a second")
    parser.add_argument("--noisy", type=int, default=2, help="noisy producer threads")
    parser.add_argument("--runs", type=int, default=3)


def _config(port: int, user: str, token: str, **extra: object) -> dict[str, object]:
    return {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": token,
            "acks": "all", "log_level": 2, **extra}


def quiet_latencies(port: int, token: str, rate: int, seconds: float,
                    until: Callable[[], bool] | None = None) -> list[float]:
    """Milliseconds from produce() to the acknowledgement of each quiet message, sent for
    `seconds` or until `until()` is true (bench/compaction_producers.py: while a pass runs)."""
    producer = Producer(_config(port, "quiet", token, **{"linger.ms": 0}))
    took: list[float] = []

    def report(sent: float, error: object, message: object) -> None:
        if error is None:
            took.append((time.perf_counter() - sent) * 1000)

    began, n = time.perf_counter(), 0
    while (now := time.perf_counter()) - began < seconds and not (until and until()):
        due = began + n / rate
        if now < due:
            producer.poll(min(due - now, 0.01))
            continue
        producer.produce("/mapr/bench/quiet:t", VALUE,
                         on_delivery=functools.partial(report, time.perf_counter()))
        producer.poll(0)
        n += 1
    producer.flush(60)
    return took


class Noisy:
    """Producers of the noisy tenant sending flat out until stopped; the bytes acknowledged."""

    def __init__(self, port: int, token: str, threads: int) -> None:
        self.stop, self.acked = threading.Event(), 0
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(port, token), daemon=True)
                        for _ in range(threads)]

    def _run(self, port: int, token: str) -> None:
        producer = Producer(_config(port, "noisy", token, **{"linger.ms": 5}))

        def report(error: object, message: object) -> None:
            if error is None:
                with self.lock:
                    self.acked += len(VALUE)

        while not self.stop.is_set():
            try:
                producer.produce("/mapr/bench/noisy:t", VALUE, on_delivery=report)
            except BufferError:
                producer.poll(0.05)
            producer.poll(0)
        producer.flush(30)

    def __enter__(self) -> Noisy:
        self.began = time.perf_counter()
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        # What was acknowledged while the quiet tenant was measured; the flush after is not.
        self.seconds, self.measured = time.perf_counter() - self.began, self.acked
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=60)


def setup(portal: Portal, token: str) -> dict[str, str]:
    """The two tenants, each a user and a stream /mapr/bench/<tenant> with topic t: tokens."""
    from streamgate.client import Client

    Client(portal.url, token).call("cluster create", {"name": "bench"})
    tokens = {}
    for name in TENANTS:
        tokens[name] = portal.manage("createtenantuser", "--tenant", name, "--username",
                                     name).strip().splitlines()[-1]
        client = Client(portal.url, tokens[name])
        client.call("stream create", {"path": f"/mapr/bench/{name}"})
        client.call("stream topic create", {"path": f"/mapr/bench/{name}", "topic": "t",
                                            "partitions": 4})
    return tokens


def measure(port: int, tokens: dict[str, str], phase: str, args: argparse.Namespace,
            operator: Client) -> tuple[list[float], float | None]:
    """One phase: the quiet tenant's latencies, and the noisy tenant's rate meanwhile."""
    quota = args.quota if phase == PHASES[1] else 0
    operator.call("tenant quota set", {"tenant": "noisy", "producebytes": quota})
    time.sleep(6)  # the listener reads quotas afresh within 5 s
    if phase == "alone":
        return quiet_latencies(port, tokens["quiet"], args.rate, args.seconds), None
    with Noisy(port, tokens["noisy"], args.noisy) as noisy:
        time.sleep(2)  # the noisy ones reach their pace
        took = quiet_latencies(port, tokens["quiet"], args.rate, args.seconds)
    return took, noisy.measured / noisy.seconds


@contextlib.contextmanager
def quiet_stack(server_url: str, rate: int) -> Iterator[tuple[int, dict[str, str], Client]]:
    """A production-mode portal on `server_url`'s server, the tenants and one listener, its
    quiet producer warmed: the listener's port, the tenants' tokens and an operator client.
    Shared with bench/compaction_producers.py, which measures the quiet producer beside a
    compaction pass on the same server."""
    from streamgate.client import Client

    portal = Portal(server_url, "uvicorn")
    listener = None
    try:
        token = start_portal(portal)
        operator, tokens = Client(portal.url, token), setup(portal, token)
        listener = Listener(portal.env)
        quiet_latencies(listener.port, tokens["quiet"], rate, 2.0)  # warm
        yield listener.port, tokens, operator
    finally:
        if listener is not None:
            listener.stop()
        portal.stop()


def main(args: argparse.Namespace) -> int:
    p50: dict[str, list[float]] = {p: [] for p in PHASES}
    p99: dict[str, list[float]] = {p: [] for p in PHASES}
    noisy_rates: dict[str, list[float]] = {p: [] for p in PHASES[1:]}
    with (PrivatePostgres(prefix="sgbench-quota-") as server,
          quiet_stack(server.url("postgres"), args.rate) as (port, tokens, operator)):
        # The unlimited phase last and once: the gigabyte it writes keeps the store busy
        # (checkpoints, autovacuum) long after, and would weigh on any phase after it.
        schedule = [*[(n, phase) for n in range(args.runs) for phase in PHASES[:2]],
                    (args.runs - 1, PHASES[2])]
        for n, phase in schedule:
            took, rate = measure(port, tokens, phase, args, operator)
            cuts = statistics.quantiles(took, n=100)
            p50[phase].append(cuts[49])
            p99[phase].append(cuts[98])
            if rate is not None:
                noisy_rates[phase].append(rate)
            print(f"run {n + 1}, {phase}: p50 {cuts[49]:.1f} ms p99 {cuts[98]:.1f} ms"
                  + (f", noisy {rate / (1 << 20):.2f} MiB/s" if rate else ""), flush=True)
    print()
    print(table(p50, p99, noisy_rates, args))
    return 0


def table(p50: dict[str, list[float]], p99: dict[str, list[float]],
          noisy_rates: dict[str, list[float]], args: argparse.Namespace) -> str:
    def rate(phase: str) -> str:
        return (f"{statistics.median(noisy_rates[phase]) / (1 << 20):.2f} MiB/s"
                if phase in noisy_rates else "-")

    return latency_table(
        f"the quiet tenant: {args.rate} messages of 1 KB a second for {args.seconds:g} s per "
        f"phase; the noisy tenant: {args.noisy} producers flat out; quota {args.quota:,} bytes "
        f"a second; medians of {args.runs} runs",
        ("quiet p50 ms", "quiet p99 ms", "noisy tenant's rate"), PHASES, p50, p99, rate)


def latency_table(title: str, columns: tuple[str, str, str], phases: Iterable[str],
                  p50: dict[str, list[float]], p99: dict[str, list[float]],
                  last: Callable[[str], str]) -> str:
    """A row a phase: the medians of its p50 and p99, its p99 against the `alone` phase's,
    and `last(phase)` (shared with bench/compaction_producers.py)."""
    alone = statistics.median(p99["alone"])
    lines = [title, "", f"| phase | {columns[0]} | {columns[1]} | p99 vs alone | {columns[2]} |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for phase in phases:
        lines.append(f"| {phase} | {statistics.median(p50[phase]):.1f} | "
                     f"{statistics.median(p99[phase]):.1f} | "
                     f"{statistics.median(p99[phase]) / alone:.2f}x | {last(phase)} |")
    return "\n".join(lines)
