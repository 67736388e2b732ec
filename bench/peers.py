"""The peer benchmark (issue 7): streamgate against what users run today, on the same machine
and the same data (1,000,000 messages of 200 B), printed as one table.

- streamgate gateway catch-up, the raw binary COPY pipe and PostgreSQL logical replication:
  bench/replication.py's `measure_catchup` on its `Deployment` (imported, not copied).
- streamgate copystream: the Spark job (`workers.spark.copystream`, local mode) copying the
  same backlog into a paused replica; "not built" while `workers.spark` does not exist.
- NATS JetStream mirroring: a nats-server (Debian's package) started here on a loopback port
  of its own with a temporary store dir; a file-backed source stream loaded with the same
  messages, then a mirror stream created and timed until it holds them all.
- steady lag at 5,000 messages/s: a librdkafka producer through a Kafka listener
  (bench/kafka_steady.py) for streamgate's row, bench/replication.py's `measure_steady` (REST)
  as its second row, and a paced JetStream publisher for the mirror, all measured the same
  way (the replica's or mirror's end polled every ~5 ms; lag = readable there minus the
  producer's acknowledgement).

`python -m bench.peers [--messages 1000000] [--runs 1] [--steady-seconds 30] [--skip ...]`
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from bench import kafka_steady, replication
from bench.deployment import add_load_arguments
from bench.pgserver import PrivatePostgres
from bench.pipes import add_layout_argument
from bench.processes import stop_process
from bench.produce import start_portal

SUBJECTS = [f"src.{p}" for p in range(replication.PARTITIONS)]  # streamgate's 4 partitions
LOAD_PENDING = 4000  # JetStream publishes in flight while loading the backlog
NOT_BUILT = "not built"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_load_arguments(parser, runs=1, steady_seconds=30.0, batch_help="messages per produce "
                       "call (streamgate) or per burst (NATS)")
    parser.add_argument("--skip", default="",
                        help="comma-separated: streamgate,steady,nats")
    add_layout_argument(parser)
    parser.add_argument("--nats-server", default=shutil.which("nats-server") or "nats-server")
    parser.add_argument("--url", default="",
                        help="a PostgreSQL server for streamgate, the COPY pipe and logical "
                             "replication (default: a private PostgreSQL 15 started here)")


# --- NATS JetStream ------------------------------------------------------------------------------


class NatsServer:
    """nats-server -js on a free loopback port with a temporary store dir, removed at stop."""

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.folder = Path(tempfile.mkdtemp(prefix="sgbench-nats-"))
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"nats://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def start(self) -> NatsServer:
        log = (self.folder / "server.log").open("ab")
        self.process = subprocess.Popen(
            [self.binary, "-js", "-a", "127.0.0.1", "-p", str(self.port),
             "-sd", str(self.folder / "store")], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(
                    ("127.0.0.1", self.port), timeout=0.5):
                return self
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        raise RuntimeError(f"nats-server did not start: {(self.folder / 'server.log').read_text()}")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            stop_process(self.process)
        self.process = None
        shutil.rmtree(self.folder, ignore_errors=True)


async def _connect(url: str):  # type: ignore[no-untyped-def]
    import nats

    nc = await nats.connect(url, max_reconnect_attempts=0)
    return nc, nc.jetstream(timeout=30, publish_async_max_pending=LOAD_PENDING)


async def _streams(js, name: str) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    """A file-backed source stream over SUBJECTS (a fresh one per run)."""
    from nats.js.api import StorageType, StreamConfig

    source = f"SRC_{name}"
    await js.add_stream(StreamConfig(name=source, subjects=[f"{name}.>"],
                                     storage=StorageType.FILE))
    return source, f"MIR_{name}"


async def _mirror(js, source: str, mirror: str) -> None:  # type: ignore[no-untyped-def]
    from nats.js.api import StorageType, StreamConfig, StreamSource

    await js.add_stream(StreamConfig(name=mirror, storage=StorageType.FILE,
                                     mirror=StreamSource(name=source)))


async def nats_catchup(url: str, messages: int, run: int) -> float:
    """Messages/s of a mirror created over a loaded source, until it holds every message."""
    nc, js = await _connect(url)
    try:
        source, mirror = await _streams(js, f"catchup{run}")
        payload = os.urandom(replication.VALUE_BYTES)
        for n in range(messages):
            await js.publish_async(f"catchup{run}.{n % len(SUBJECTS)}", payload)
        await js.publish_async_completed()
        loaded = (await js.stream_info(source)).state.messages
        if loaded != messages:
            raise RuntimeError(f"the NATS source holds {loaded} of {messages} messages")
        start = time.perf_counter()
        await _mirror(js, source, mirror)
        while (await js.stream_info(mirror)).state.messages < messages:
            if time.perf_counter() - start > 900:
                raise RuntimeError("the NATS mirror did not catch up in 900 s")
            await asyncio.sleep(0.05)  # as streamgate's catch-up is polled
        elapsed = time.perf_counter() - start
        for name in (mirror, source):  # keep the store dir small for the next run
            await js.delete_stream(name)
        return messages / elapsed
    finally:
        await nc.close()


async def nats_steady(url: str, rate: int, seconds: float, batch: int) -> dict:
    """A publisher sending batches of `batch` on a fixed schedule (missed slots skipped,
    as bench/replication.py's producers do), each publish acknowledged by JetStream; the
    mirror's last sequence polled every ~5 ms on a connection of its own."""
    nc, js = await _connect(url)
    watch, wjs = await _connect(url)
    try:
        source, mirror = await _streams(js, "steady")
        await _mirror(js, source, mirror)
        seen: list[tuple[float, int]] = [(0.0, 0)]
        done = asyncio.Event()

        async def poll() -> None:
            while not done.is_set():
                last = (await wjs.stream_info(mirror)).state.last_seq
                if last > seen[-1][1]:
                    seen.append((time.monotonic(), last))
                await asyncio.sleep(0.005)

        acked: list[tuple[int, float]] = []
        payload = b"x" * replication.VALUE_BYTES

        async def one(n: int) -> None:
            ack = await js.publish(f"steady.{n % len(SUBJECTS)}", payload)
            acked.append((ack.seq, time.monotonic()))

        poller = asyncio.create_task(poll())
        interval = batch / rate
        start = time.monotonic()
        due, deadline, n = start, start + seconds, 0
        while due < deadline:
            now = time.monotonic()
            if due > now:
                await asyncio.sleep(due - now)
            await asyncio.gather(*(one(n + i) for i in range(batch)))
            n += batch
            due = max(due + interval, time.monotonic())
        took = time.monotonic() - start
        end = max(seq for seq, _ in acked)
        wait_until = time.monotonic() + 30
        while seen[-1][1] < end and time.monotonic() < wait_until:
            await asyncio.sleep(0.05)
        done.set()
        await poller
        return lag_summary(acked, seen, took)
    finally:
        await nc.close()
        await watch.close()


def lag_summary(acked: list[tuple[int, float]], seen: list[tuple[float, int]],
                took: float) -> dict:
    """Lag of each acknowledged sequence number: the first poll whose end passed it."""
    import bisect

    ends = [end for _, end in seen]
    lags, missing = [], 0
    for seq, at in acked:
        i = bisect.bisect_left(ends, seq)  # first mark with last_seq >= seq
        if i >= len(seen):
            missing += 1
            continue
        lags.append(max(0.0, seen[i][0] - at) * 1000)
    lags.sort()
    return {"produced": len(acked), "rate": len(acked) / took, "missing": missing,
            "p50": percentile(lags, 0.50), "p99": percentile(lags, 0.99),
            "max": lags[-1] if lags else float("nan")}


def percentile(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


# --- streamgate ----------------------------------------------------------------------------------


def warm_run(job, spark, spec) -> tuple[dict, float]:  # type: ignore[no-untyped-def]
    """One Spark job (`workers.spark.copystream` or `diffstreams`) on a context started
    beforehand, as a Celery worker's local mode reuses its own: (result, seconds), the
    context's start (the JVM) not counted. bench/spark.py times its warm rows with this."""
    start = time.perf_counter()
    result = job(spark, spec)
    return result, time.perf_counter() - start


def measure_copystream(deploy: replication.Deployment, client, args: argparse.Namespace  # type: ignore[no-untyped-def]
                       ) -> list[float] | str:
    """streamgate copystream: the Spark job (`workers.spark.copystream`, local mode, as the
    Celery side runs it without SPARK_MASTER_URL) copying the same backlog from the source
    store into a paused replica; messages/s per run, or why there is no figure."""
    if importlib.util.find_spec("workers.spark") is None:
        return NOT_BUILT
    from replication.engine.factory import open_store
    from workers.spark import Side, Spec, copystream, spark_context

    src_store = open_store(deploy.store_url(replication.SOURCE))  # the layout the portal made
    spark = spark_context()  # the JVM starts once, outside the timings
    rates: list[float] = []
    try:
        for n in range(args.runs):
            name = f"copystream{n + 1}"
            src, dst = replication.create_pair(client, name, paused=True)
            replication.load_backlog(src_store, uuid.UUID(src), args.messages)
            spec = Spec(Side(deploy.store_url(replication.SOURCE), src),
                        Side(deploy.store_url(replication.REPLICA), dst),
                        {replication.TOPIC: replication.PARTITIONS})
            result, seconds = warm_run(copystream, spark, spec)
            copied = result["messages"]
            rates.append(copied / seconds)
            print(f"copystream run {n + 1}: {copied:,} at {rates[-1]:,.0f}/s; load "
                  f"{os.getloadavg()[0]:.1f}", flush=True)
            for cluster in (replication.REPLICA, replication.SOURCE):
                with contextlib.suppress(Exception):
                    client.call("stream delete", {"path": f"/mapr/{cluster}/{name}"})
    except Exception as error:  # the job is young: show why in the table, keep the rest
        print(f"copystream failed: {error!r}", flush=True)
        return rates or f"failed: {type(error).__name__}"
    finally:
        spark.stop()
        src_store.close()
    return rates


def measure_streamgate(args: argparse.Namespace, skip: set[str]
                       ) -> tuple[dict | None, list[float] | str, dict | None]:
    catchup = steady = None
    copy: list[float] | str = "skipped"
    if {"streamgate", "steady"} <= skip:
        return catchup, copy, steady
    deploy = replication.Deployment(args.url)
    deploy.env["STREAMGATE_STORE_LAYOUT"] = args.layout  # the portal's and the engine's stores
    # Another session's clean-up removes /tmp/sgbench-logs-*: keep the logs under our own name.
    shutil.rmtree(deploy.logs, ignore_errors=True)
    deploy.logs = Path(tempfile.mkdtemp(prefix="sgpeers-logs-"))
    try:
        token = start_portal(deploy)
        client = replication.setup(deploy, token)
        deploy.start_engine()
        deploy.wait_engine()
        if "streamgate" not in skip:
            catchup = replication.measure_catchup(deploy, client, args)
            copy = measure_copystream(deploy, client, args)
        if "steady" not in skip:
            rest = replication.measure_steady(deploy, client, token, args)
            print(f"streamgate steady, REST: {rest}", flush=True)
            steady = kafka_steady.measure(deploy, client, token, args)
            print(f"streamgate steady, librdkafka: {steady}", flush=True)
            steady["rest"] = rest
    finally:
        deploy.stop()
        shutil.rmtree(deploy.logs, ignore_errors=True)
    return catchup, copy, steady


def measure_nats(args: argparse.Namespace, skip: set[str]) -> tuple[list[float], dict | None]:
    server = NatsServer(args.nats_server).start()
    rates: list[float] = []
    steady = None
    try:
        for run in range(args.runs):
            rates.append(asyncio.run(nats_catchup(server.url, args.messages, run)))
            print(f"NATS mirror catch-up run {run + 1}: {rates[-1]:,.0f}/s; load "
                  f"{os.getloadavg()[0]:.1f}", flush=True)
        if "steady" not in skip:
            steady = asyncio.run(nats_steady(server.url, args.steady_rate, args.steady_seconds,
                                             args.steady_batch))
            print(f"NATS steady: {steady}", flush=True)
    finally:
        server.stop()
    return rates, steady


# --- the table -----------------------------------------------------------------------------------


@dataclass
class Row:
    label: str
    rates: list[float] = field(default_factory=list)  # catch-up messages/s per run
    steady: dict | None = None
    note: str = ""

    @property
    def rate(self) -> float | None:
        return statistics.median(self.rates) if self.rates else None


def _ratio(a: float | None, b: float | None) -> str:
    if not a or not b:
        return ""
    return f"{a / b:.2f}x"


def table(rows: list[Row], sg: Row, copystream: Row) -> str:
    lines = ["| system | catch-up msg/s (median) | each run | steady rate | lag p50 | lag p99 "
             "| sg catch-up / this | sg copystream / this | sg lag p50 / this | "
             "sg lag p99 / this |",
             "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    sg_p50 = sg.steady["p50"] if sg.steady else None
    sg_p99 = sg.steady["p99"] if sg.steady else None
    for row in rows:
        s = row.steady
        rate = f"{row.rate:,.0f}" if row.rate else (row.note or "")
        each = ", ".join(f"{v / 1000:,.0f}k" for v in row.rates)
        is_sg = row.label.startswith("streamgate")
        lines.append(" | ".join([
            f"| {row.label}", rate, each,
            f"{s['rate']:,.0f}/s" if s else "",
            f"{s['p50']:.1f} ms" if s else "", f"{s['p99']:.1f} ms" if s else "",
            "" if is_sg else _ratio(sg.rate, row.rate),
            "" if is_sg else _ratio(copystream.rate, row.rate),
            "" if is_sg or not s else _ratio(sg_p50, s["p50"]),
            ("" if is_sg or not s else _ratio(sg_p99, s["p99"])) + " |"]))
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    skip = set(filter(None, args.skip.split(",")))
    if args.url:
        return measure_all(args, skip, args.url)
    # bench/replication.py's kind of private server (default settings, fsync on, wal_level
    # logical): no other session's connections crowd it, and logical replication runs on the
    # same server as the rest.
    with PrivatePostgres(prefix="sgbench-pg-", settings={"wal_level": "logical"}) as private:
        args.url = private.url("postgres")
        return measure_all(args, skip, "a private PostgreSQL 15 (wal_level=logical, fsync on)")


def measure_all(args: argparse.Namespace, skip: set[str], where: str) -> int:
    sg = Row("streamgate gateway catch-up (resume -> replica watermarks = source); steady: "
             "librdkafka producer (Kafka listener, acks=all, linger 5 ms) -> replica readable")
    rest = Row("streamgate steady: REST produce (50-message calls) -> replica readable")
    copystream = Row("streamgate copystream (Spark job, local mode; JVM start not timed)")
    pipe = Row(f"raw binary COPY pipe, commit per {replication.PIPE_BATCH:,} rows")
    logical = Row("PostgreSQL logical replication, copy_data=true")
    mirror = Row("NATS JetStream mirror (file storage)")
    catchup, copied, sg.steady = measure_streamgate(args, skip)
    rest.steady = sg.steady.pop("rest", None) if sg.steady else None
    if isinstance(copied, str):
        copystream.note = copied
    else:
        copystream.rates = copied
    if catchup:
        sg.rates, pipe.rates, logical.rates = catchup["sg"], catchup["copy"], catchup["logical"]
    if "nats" not in skip:
        mirror.rates, mirror.steady = measure_nats(args, skip)
    print()
    print(f"Peer benchmark: {args.messages:,} messages of {replication.VALUE_BYTES} B "
          f"({replication.PARTITIONS} partitions / subjects), {args.runs} catch-up run(s), "
          f"medians; steady: aiming at {args.steady_rate:,}/s for {args.steady_seconds:.0f} s; "
          f"PostgreSQL: {where}; load now {os.getloadavg()[0]:.1f}")
    print()
    print(table([sg, rest, copystream, pipe, logical, mirror], sg, copystream))
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.peers", description=__doc__)
    add_arguments(parser)
    sys.exit(main(parser.parse_args()))
