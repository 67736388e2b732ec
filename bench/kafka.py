"""Kafka listener throughput with librdkafka, next to the store's physical limit and REST.

On a private PostgreSQL (bench/pgserver.py: the shared server's other users would skew it),
a production-mode portal (uvicorn, two workers, as compose.yaml) and one Kafka listener
(`manage.py runkafka`) serve a topic of PARTITIONS partitions. Each run measures, one after
the other on the same database:
- raw binary COPY: the rows the store writes for this run's messages, made inline from
  constants, COPY ... FROM STDIN (FORMAT BINARY) into a same-shaped table, a commit per 1,000
  rows: the physical limit of a durable ingest of the same rows;
- raw binary COPY of the same batches: the run's messages as 1,000-message record batches
  (blobs of random bytes the size of their records, as a broker keeping client batches
  stores them; STORAGE EXTERNAL, so PostgreSQL does not compress them), a commit per 4
  batches: the store's limit for a batch layout (issue 30);
- librdkafka's mock broker (`test.mock.num.brokers`, in the producer's own process): the same
  producer against an in-memory broker, the protocol's ceiling on this machine;
- Kafka produce: a confluent-kafka (librdkafka) producer process, acks=all, linger.ms=5,
  values of VALUE_BYTES, keyless (librdkafka spreads them over the partitions), from the first
  produce() to the end of flush();
- Kafka consume: a librdkafka (confluent-kafka) consumer, connected first, assigned every
  partition at the run's first offsets, until it has every message of the run; then the same
  with fetch.queue.backoff.ms=10 (librdkafka's default, 1 s, idles a consumer whose queue
  passed queued.min.messages: with a broker faster than the Python client the run is mostly
  that wait); then librdkafka's C benchmark client, rdkafka_performance (bench/rdkafkaperf.py,
  built once), whose own cost per message is a fraction of the Python client's;
- REST produce: four client processes posting 50-message calls to the API for a few seconds;
- compression (issue 30): the same Kafka produce of JSON-like VALUE_BYTES values (bench/values.py),
  once uncompressed and once with librdkafka's compression.type=lz4; the store keeps batches as
  sent, so the growth of the layout's table (pg_table_size: heap and TOAST, not the index)
  divided by the messages is what a message costs on disk, against the value's own size.
The listener's CPU (user + system, /proc/<pid>/stat) is taken around the Kafka phases and
printed per 1,000 messages.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
from psycopg import sql

from bench import rdkafkaperf
from bench.pgserver import PrivatePostgres
from bench.pipes import add_layout_argument, stored_table
from bench.produce import Portal, _free_port, produce_run, setup_stream, start_portal
from bench.values import json_values

ROOT = Path(__file__).resolve().parent.parent
VALUE_BYTES = 200
PARTITIONS = 4
REST_BATCH = 50
RAW_BATCH = 1000
TOPIC = "/mapr/bench/produce:t"
RAW_COPY = ('COPY raw_messages (pid, "offset", ts, key, value, headers, origin, producer) '
            "FROM STDIN (FORMAT BINARY)")
BATCH_COMMIT = 4  # batches per commit in the batch COPY
RECORD_OVERHEAD = 8  # a v2 record's framing around a 200 B value with no key or headers
# The row layout's messages table (replication/engine/pg/schema.py), whichever layout the
# store under test has.
RAW_MESSAGES = ('CREATE TABLE IF NOT EXISTS raw_messages (pid integer NOT NULL, "offset" bigint '
                "NOT NULL, ts bigint NOT NULL, key bytea, value bytea, headers bytea, origin uuid "
                'NOT NULL, producer text, PRIMARY KEY (pid, "offset"))')
RAW_BATCHES = ("CREATE TABLE IF NOT EXISTS raw_batches (pid integer, base_offset bigint, "
               "last_offset bigint, records integer, data bytea, "
               "PRIMARY KEY (pid, base_offset))")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--messages", type=int, default=1_000_000, help="per run")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rest-seconds", type=float, default=5.0)
    add_layout_argument(parser)
    parser.add_argument("--transactions", action="store_true",
                        help="transactional produce (transactions of 1,000 messages) beside "
                             "idempotent produce, read_committed beside read_uncommitted "
                             "consume (bench/kafka_txn.py)")
    parser.add_argument("--profile", default="",
                        help="write py-spy's collapsed stacks of the listener here (FILE.txt)")


# --- the listener --------------------------------------------------------------------------------


class Listener:
    def __init__(self, env: dict[str, str], args: list[str] | None = None) -> None:
        self.port = _free_port()
        self.log = Path(tempfile.mkstemp(prefix="sgbench-kafka-", suffix=".log")[1])
        self.process = subprocess.Popen(
            [sys.executable, "manage.py", "runkafka", "--listen", f"127.0.0.1:{self.port}",
             *(args or [])],
            cwd=ROOT, env=env, stdout=self.log.open("wb"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while "kafka listener ready" not in self.log.read_text(errors="replace"):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the listener did not start:\n{self.log.read_text()}")
            time.sleep(0.1)

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self, keep_log: Path | None = None) -> None:
        """Stop the listener; its log moves to `keep_log`, or is deleted."""
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=15)
        if keep_log is not None:
            self.log.replace(keep_log)
        self.log.unlink(missing_ok=True)


# --- the phases ----------------------------------------------------------------------------------


def _kafka_config(bootstrap: str, token: str) -> dict:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": "bench", "sasl.password": token}


def _produce(config: dict, messages: int, out: multiprocessing.Queue,
             topic: str = TOPIC, values: list[bytes] | None = None) -> None:
    from confluent_kafka import Producer

    failed = [0]

    def report(err: object, _msg: object) -> None:
        if err is not None:
            failed[0] += 1

    producer = Producer({"acks": "all", "linger.ms": 5, "queue.buffering.max.messages": 1_000_000,
                         **config, "on_delivery": report})
    producer.list_topics(topic, timeout=20)  # connected and the metadata known before timing
    values = values or [os.urandom(VALUE_BYTES)]
    start = time.perf_counter()
    for n in range(messages):
        while True:
            try:
                producer.produce(topic, values[n % len(values)])
                break
            except BufferError:
                producer.poll(0.005)
        if n % 5000 == 0:
            producer.poll(0)
    left = producer.flush(120)
    out.put((messages / (time.perf_counter() - start), failed[0] + left))


def kafka_produce(config: dict, messages: int, topic: str = TOPIC,
                  values: list[bytes] | None = None) -> float:
    out: multiprocessing.Queue = multiprocessing.Queue()
    worker = multiprocessing.Process(target=_produce, args=(config, messages, out, topic, values))
    worker.start()
    rate, failed = out.get()
    worker.join()
    if failed:
        raise RuntimeError(f"{failed} messages were not acknowledged")
    return rate


def profile(listener: Listener, path: str) -> subprocess.Popen:
    """py-spy sampling the listener (its threads too) until SIGINT, into collapsed stacks."""
    spy = Path(sys.executable).parent / "py-spy"
    return subprocess.Popen([str(spy), "record", "--pid", str(listener.process.pid),
                             "--format", "raw", "--nonblocking", "--threads", "-o", path],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def kafka_consume(config: dict, starts: dict[int, int], messages: int,
                  isolation: str = "read_uncommitted", topic: str = TOPIC) -> float:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**config, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "isolation.level": isolation})
    consumer.list_topics(topic, timeout=20)  # connected before timing, as the producer
    consumer.assign([TopicPartition(topic, p, o) for p, o in starts.items()])
    got, start = 0, time.perf_counter()
    try:
        while got < messages:
            batch = consumer.consume(10_000, timeout=10)
            if not batch:
                raise RuntimeError(f"the consumer stalled at {got} of {messages} messages")
            got += sum(1 for m in batch if m.error() is None)
    finally:
        consumer.close()
    return messages / (time.perf_counter() - start)


def raw_copy(url: str, messages: int) -> float:
    """The same rows the store writes (one partition id, 200 B values, no key or headers)."""
    from replication.engine.pg.schema import COPY_TYPES, configure_connection

    origin, value = uuid.uuid4().bytes, os.urandom(VALUE_BYTES)
    with psycopg.connect(url) as conn:
        configure_connection(conn)
        conn.execute(RAW_MESSAGES)
        conn.execute("TRUNCATE raw_messages")
        conn.commit()
        now, start = time.time_ns() // 1_000_000, time.perf_counter()
        with conn.cursor() as cur:
            for first in range(0, messages, RAW_BATCH):
                with cur.copy(RAW_COPY) as copy:
                    copy.set_types(COPY_TYPES)
                    for offset in range(first, min(first + RAW_BATCH, messages)):
                        copy.write_row((1, offset, now, None, value, None, origin, None))
                conn.commit()
        rate = messages / (time.perf_counter() - start)
        conn.execute("TRUNCATE raw_messages")
        conn.commit()
    return rate


def raw_batch_copy(url: str, messages: int) -> float:
    """The run's messages as RAW_BATCH-message blobs, one row each, a commit per BATCH_COMMIT."""
    blob = os.urandom(RAW_BATCH * (VALUE_BYTES + RECORD_OVERHEAD))
    with psycopg.connect(url) as conn:
        conn.execute(RAW_BATCHES)
        conn.execute("ALTER TABLE raw_batches ALTER COLUMN data SET STORAGE EXTERNAL")
        conn.execute("TRUNCATE raw_batches")
        conn.commit()
        start, copied = time.perf_counter(), 0
        with conn.cursor() as cur:
            while copied < messages:
                with cur.copy("COPY raw_batches FROM STDIN (FORMAT BINARY)") as copy:
                    copy.set_types(["int4", "int8", "int8", "int4", "bytea"])
                    for _ in range(BATCH_COMMIT):
                        count = min(RAW_BATCH, messages - copied)
                        if count <= 0:
                            break
                        copy.write_row((1, copied, copied + count - 1, count,
                                        blob[:count * (VALUE_BYTES + RECORD_OVERHEAD)]))
                        copied += count
                conn.commit()
        rate = messages / (time.perf_counter() - start)
        conn.execute("TRUNCATE raw_batches")
        conn.commit()
    return rate


def mock_produce(messages: int) -> float:
    """The same producer against librdkafka's in-memory mock broker."""
    return kafka_produce({"test.mock.num.brokers": 1, "bootstrap.servers": ""}, messages,
                         topic="t")


def ends(store_url: str) -> dict[int, int]:
    with psycopg.connect(store_url) as conn:
        rows = conn.execute("SELECT partition, next_offset FROM partitions WHERE topic = 't'")
        return dict(rows.fetchall())


# --- the run -------------------------------------------------------------------------------------

MEASURES = ("raw", "raw_batches", "mock", "produce", "consume", "consume_tuned", "consume_c",
            "rest", "cpu_produce", "cpu_consume", "json", "lz4", "bytes_json", "bytes_lz4")
TUNED = {"fetch.queue.backoff.ms": 10}
CODECS = (("json", "none"), ("lz4", "lz4"))  # figure -> librdkafka's compression.type


def stored_bytes(store_url: str, layout: str) -> int:
    """The layout's table on disk: heap and TOAST (pg_table_size), not its index."""
    with psycopg.connect(store_url) as conn:
        return conn.execute(sql.SQL("SELECT pg_table_size({})").format(
            sql.Literal(stored_table(layout)))).fetchone()[0]


def compression_runs(config: dict, store_url: str, args: argparse.Namespace) -> dict[str, float]:
    """Messages/s and stored bytes per message of JSON-like values, uncompressed then lz4."""
    values, result = json_values(1000, VALUE_BYTES), {}
    for key, codec in CODECS:
        before = stored_bytes(store_url, args.layout)
        result[key] = kafka_produce({**config, "compression.type": codec}, args.messages,
                                    values=values)
        result[f"bytes_{key}"] = (stored_bytes(store_url, args.layout) - before) / args.messages
    return result


def one_run(portal: Portal, listener: Listener, token: str, stream: str,
            args: argparse.Namespace) -> dict[str, float]:
    store_url = portal.env["DATABASE_URL"].replace("postgres://", "postgresql://", 1) \
        + "_store_bench"
    config = _kafka_config(f"127.0.0.1:{listener.port}", token)
    result = {"raw": raw_copy(store_url, args.messages),
              "raw_batches": raw_batch_copy(store_url, args.messages),
              "mock": mock_produce(args.messages)}
    starts = ends(store_url) or dict.fromkeys(range(PARTITIONS), 0)
    cpu = listener.cpu_seconds()
    result["produce"] = kafka_produce(config, args.messages)
    result["cpu_produce"] = (listener.cpu_seconds() - cpu) * 1e6 / args.messages  # ms per 1k
    cpu = listener.cpu_seconds()
    result["consume"] = kafka_consume(config, starts, args.messages)
    result["cpu_consume"] = (listener.cpu_seconds() - cpu) * 1e6 / args.messages
    result["consume_tuned"] = kafka_consume({**config, **TUNED}, starts, args.messages)
    result["consume_c"] = rdkafkaperf.consume(config, TOPIC, starts, args.messages)
    result["rest"] = produce_run(portal.url, token, stream, 4, args.rest_seconds, REST_BATCH)
    return {**result, **compression_runs(config, store_url, args)}


@contextlib.contextmanager
def served(args: argparse.Namespace) -> Iterator[tuple[Portal, Listener, str, str]]:
    """A private PostgreSQL, a production-mode portal, the bench stream and one listener:
    (portal, listener, token, stream uuid), stopped on the way out."""
    with PrivatePostgres(prefix="sgbench-kafka-") as server:
        portal = Portal(server.url("postgres"), "uvicorn")
        portal.env["STREAMGATE_STORE_LAYOUT"] = args.layout
        listener = None
        try:
            token = start_portal(portal)
            stream = setup_stream(portal.url, token, PARTITIONS)
            listener = Listener(portal.env)
            yield portal, listener, token, stream
        finally:
            if listener is not None:
                listener.stop()
            portal.stop()


def main(args: argparse.Namespace) -> int:
    if args.transactions:
        from bench.kafka_txn import transactions_main

        return transactions_main(args)
    results: dict[str, list[float]] = {k: [] for k in MEASURES}
    with served(args) as (portal, listener, token, stream):
        spy = profile(listener, args.profile) if args.profile else None
        for n in range(args.runs):
            got = one_run(portal, listener, token, stream, args)
            for key, value in got.items():
                results[key].append(value)
            print(f"run {n + 1}: raw COPY {got['raw']:,.0f}/s  of batches "
                  f"{got['raw_batches']:,.0f}/s  mock broker {got['mock']:,.0f}/s  kafka "
                  f"produce {got['produce']:,.0f}/s ({got['produce'] / got['raw']:.2f}x)  "
                  f"consume {got['consume']:,.0f}/s (tuned {got['consume_tuned']:,.0f}/s, C "
                  f"{got['consume_c']:,.0f}/s)  REST {got['rest']:,.0f}/s  listener CPU "
                  f"{got['cpu_produce']:.1f} / {got['cpu_consume']:.1f} ms per 1k; JSON "
                  f"{got['json']:,.0f}/s {got['bytes_json']:.0f} B/msg, lz4 "
                  f"{got['lz4']:,.0f}/s {got['bytes_lz4']:.0f} B/msg",
                  flush=True)
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(timeout=60)
    print()
    print(table(results, args))
    return 0


def _each(values: list[float], unit: float = 1000, suffix: str = "k") -> str:
    return ", ".join(f"{v / unit:,.0f}{suffix}" for v in values)


def table(results: dict[str, list[float]], args: argparse.Namespace) -> str:
    med = {k: statistics.median(v) for k, v in results.items()}
    def ratios(of: str, to: str) -> list[float]:
        return [a / b for a, b in zip(results[of], results[to], strict=True)]

    def listed(values: list[float]) -> str:
        return ", ".join(f"{r:.2f}" for r in values)

    vs_raw, vs_rest = ratios("produce", "raw"), ratios("produce", "rest")
    vs_batches, vs_mock = ratios("produce", "raw_batches"), ratios("produce", "mock")
    return "\n".join([
        f"{args.messages:,} messages of {VALUE_BYTES} B per run, {PARTITIONS} partitions, "
        f"medians of {args.runs} runs, the {args.layout} store layout",
        "",
        "| measure | messages/s (median) | each run | ratio (median of runs) |",
        "| --- | ---: | --- | --- |",
        f"| raw binary COPY of the same rows, commit per {RAW_BATCH:,} | {med['raw']:,.0f} | "
        f"{_each(results['raw'])} | 1.00x |",
        f"| raw binary COPY of the same batches ({RAW_BATCH:,} messages a blob), commit per "
        f"{BATCH_COMMIT} | {med['raw_batches']:,.0f} | {_each(results['raw_batches'])} | "
        f"{statistics.median(ratios('raw_batches', 'raw')):.2f}x raw COPY of rows |",
        f"| librdkafka's mock broker (in memory; the protocol's ceiling) | {med['mock']:,.0f} | "
        f"{_each(results['mock'])} | |",
        f"| Kafka produce, librdkafka, acks=all, linger.ms=5 | {med['produce']:,.0f} | "
        f"{_each(results['produce'])} | {statistics.median(vs_raw):.2f}x raw COPY "
        f"({listed(vs_raw)}); {statistics.median(vs_batches):.2f}x batch COPY "
        f"({listed(vs_batches)}); {statistics.median(vs_mock):.3f}x the mock broker "
        f"({listed(vs_mock)}); {statistics.median(vs_rest):.1f}x REST |",
        f"| Kafka consume, librdkafka (confluent-kafka, defaults) | {med['consume']:,.0f} | "
        f"{_each(results['consume'])} | |",
        f"| Kafka consume, the same with fetch.queue.backoff.ms=10 | {med['consume_tuned']:,.0f}"
        f" | {_each(results['consume_tuned'])} | |",
        f"| Kafka consume, rdkafka_performance (librdkafka in C) | {med['consume_c']:,.0f} | "
        f"{_each(results['consume_c'])} | |",
        f"| REST produce, {REST_BATCH}-message calls, 4 clients | {med['rest']:,.0f} | "
        f"{_each(results['rest'])} | |",
        "",
        f"Listener CPU per 1,000 messages: produce {med['cpu_produce']:.2f} ms, consume "
        f"{med['cpu_consume']:.2f} ms (medians; each run: "
        f"{', '.join(f'{v:.2f}' for v in results['cpu_produce'])} / "
        f"{', '.join(f'{v:.2f}' for v in results['cpu_consume'])}).",
        "", *compression_table(results, med),
    ])


def compression_table(results: dict[str, list[float]], med: dict[str, float]) -> list[str]:
    def ratios(of: str, to: str | float) -> str:
        pairs = zip(results[of], results[to] if isinstance(to, str) else [to] * len(results[of]),
                    strict=True)
        each = [a / b for a, b in pairs]
        return f"{statistics.median(each):.2f}x ({', '.join(f'{r:.2f}' for r in each)})"

    return [
        f"JSON-like {VALUE_BYTES} B values (1,000 distinct), the same producer; stored = growth "
        "of the layout's table (heap + TOAST) per message:",
        "",
        "| produce | messages/s (median) | each run | vs uncompressed | stored B/message "
        f"(median) | stored / {VALUE_BYTES} B value |",
        "| --- | ---: | --- | ---: | ---: | ---: |",
        f"| uncompressed (compression.type=none) | {med['json']:,.0f} | {_each(results['json'])} "
        f"| 1.00x | {med['bytes_json']:.0f} | {ratios('bytes_json', VALUE_BYTES)} |",
        f"| lz4 (compression.type=lz4) | {med['lz4']:,.0f} | {_each(results['lz4'])} | "
        f"{ratios('lz4', 'json')} | {med['bytes_lz4']:.0f} | "
        f"{ratios('bytes_lz4', VALUE_BYTES)} |",
    ]
