"""`python -m bench ha`: the price and the speed of the replicated group (bench/hagroup), in
one run on this machine:

- produce latency (p50, p99) and throughput of the engine's append, one client appending
  batches of `--batch` 200-byte records back to back for `--seconds`, on the group (each
  commit waits for the synchronous standby's flush) beside a single PostgreSQL server of the
  same build (bench/pgserver), and on the group with acks=1's synchronous_commit=local;
- the time from a store primary's death (kill -9, data folder deleted) to the first append
  acknowledged by the promoted standby, over `--kills` kills (the member rebuilt between);
- the same for the Redis master under the sentinels: time to the first write acknowledged.

The engine's append is what the listener and the portal call; a Kafka client adds its own
retry backoff (100 ms in the tests) on top of the failover times."""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from bench.hagroup import HaGroup
from bench.pgserver import PrivatePostgres
from replication.engine.durability import primary_commit_only
from replication.engine.factory import create_database, open_store
from replication.engine.store import Record

STREAM, TOPIC = uuid.uuid4(), "bench"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=float, default=20, help="each latency run")
    parser.add_argument("--batch", type=int, default=10, help="records per append")
    parser.add_argument("--kills", type=int, default=5, help="primary (and master) kills")
    parser.add_argument("--base", type=int, default=27400, help="the group's first port")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _appends(url: str, seconds: float, batch: int, local: bool = False) -> dict:
    create_database(url)
    store = open_store(url)
    try:
        store.ensure_topic(STREAM, TOPIC, 1)
        records = [Record(partition=0, key=None, value=b"x" * 200) for _ in range(batch)]
        took: list[float] = []
        end = time.monotonic() + seconds
        with primary_commit_only(local):
            while time.monotonic() < end:
                started = time.perf_counter()
                store.append(STREAM, TOPIC, records, origin=STREAM)
                took.append(time.perf_counter() - started)
    finally:
        store.close()
    return {"p50_ms": percentile(took, 0.5) * 1000, "p99_ms": percentile(took, 0.99) * 1000,
            "msg_per_s": len(took) * batch / seconds}


def _until(call: Callable[[], object], timeout: float = 120) -> float:
    deadline = time.monotonic() + timeout
    while True:
        try:
            call()
            return time.monotonic()
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _store_failovers(group: HaGroup, kills: int) -> list[float]:
    url = group.url("bench_failover")
    create_database(url)
    store = open_store(url, wait=2)
    store.ensure_topic(STREAM, TOPIC, 1)
    record = [Record(partition=0, key=None, value=b"x")]
    times = []
    try:
        for _ in range(kills):
            victim = group.primary()
            group.kill(victim, wipe=True)
            died = time.monotonic()
            times.append(_until(lambda: store.append(STREAM, TOPIC, record, origin=STREAM))
                         - died)
            group.start(victim)
            group.wait_healthy(300)
    finally:
        store.close()
    return times


def _redis_failovers(group: HaGroup, kills: int) -> list[float]:
    from replication.engine.redisurl import redis_from_url

    client = redis_from_url(group.redis_url(), socket_connect_timeout=1, socket_timeout=1)
    times = []
    for _ in range(kills):
        port = group.redis_master()[1]
        name = f"redis{port - group.ports.redis(0)}"
        group.kill(name, wipe=True)
        died = time.monotonic()
        times.append(_until(lambda: client.set("bench", "x")) - died)
        group.start(name)
        group.wait_healthy(120)
    return times


def _summary(label: str, times: list[float]) -> str:
    return (f"{label}: median {statistics.median(times):.1f} s, max {max(times):.1f} s over "
            f"{len(times)} kills ({', '.join(f'{t:.1f}' for t in times)})")


def main(args: argparse.Namespace) -> int:
    root = Path(tempfile.mkdtemp(prefix="sg-ha-bench-"))
    root.chmod(0o755)
    group = HaGroup(root, args.base)
    try:
        group.up()
        with PrivatePostgres(prefix="sg-ha-single-") as single:
            single_url = single.url("bench_single")
            rows = {"single server": _appends(single_url, args.seconds, args.batch),
                    "group, acks=all (sync standby)": _appends(group.url("bench_sync"),
                                                               args.seconds, args.batch),
                    "group, acks=1 (local commit)": _appends(group.url("bench_local"),
                                                             args.seconds, args.batch, True)}
        for label, row in rows.items():
            print(f"{label:32} p50 {row['p50_ms']:6.2f} ms  p99 {row['p99_ms']:6.2f} ms  "
                  f"{row['msg_per_s']:9.0f} msg/s")
        print(_summary("store primary killed -> first append", _store_failovers(group, args.kills)))
        print(_summary("Redis master killed -> first write", _redis_failovers(group, args.kills)))
    finally:
        group.remove()
    return 0


