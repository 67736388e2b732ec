"""Message store throughput on PostgreSQL, next to the physical limit.

In a scratch database (`sgstore_bench_<pid>`, dropped at the end), each run measures:
- raw COPY: the rows the store writes, made inline from constants, binary COPY into a table
  of the same shape (same columns, same primary key), one transaction per batch as the store
  commits: the physical limit of a durable batch;
- append: `PostgresStore.append` of the same batches (one topic, one partition, no keys);
- read: `PostgresStore.read` of that partition from offset 0 to the end, 1,000 per call.
The machine is shared and noisy, so raw COPY and append run interleaved in slices of
`SLICE` batches (alternating which goes first): both meet the same noise, and the ratio
between them stays meaningful when the absolute numbers move.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid

import psycopg
from psycopg import sql

from bench.deployment import with_db
from replication.engine import Record, create_database
from replication.engine.pg import PostgresStore
from replication.engine.pg.schema import COPY_TYPES, configure_connection

BATCH = 1000
SLICE = 10  # batches per timed slice
VALUE_BYTES = 200
RAW_COPY = (
    'COPY raw_messages (pid, "offset", ts, key, value, headers, origin, producer) '
    "FROM STDIN (FORMAT BINARY)"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--messages", type=int, default=500_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--url",
        default=os.environ.get(
            "SGSTORE_BENCH_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
        ),
        help="the PostgreSQL server to use (any database on it); the benchmark creates its own",
    )


class Bench:
    def __init__(self, url: str, messages: int) -> None:
        self.url, self.batches = url, max(1, messages // BATCH)
        self.store = PostgresStore(url)
        self.raw = psycopg.connect(url)
        configure_connection(self.raw)  # the same C dumpers as the store's connections
        self.raw.execute("CREATE TABLE IF NOT EXISTS raw_messages (LIKE messages INCLUDING ALL)")
        self.raw.commit()
        self.origin, self.stream = uuid.uuid4(), uuid.uuid4()
        self.records = [Record(os.urandom(VALUE_BYTES)) for _ in range(BATCH)]

    def reset(self) -> None:
        self.raw.execute(
            "TRUNCATE messages, raw_messages, partitions, replication_cursors, consumer_cursors"
        )
        self.raw.commit()
        self.store.close()
        self.store = PostgresStore(self.url)  # it caches partition ids
        self.store.ensure_topic(self.stream, "bench", 1)
        self.raw.autocommit = True
        self.raw.execute("CHECKPOINT")  # no run pays for the previous one's dirty pages
        self.raw.autocommit = False

    def raw_slice(self, first: int, count: int) -> float:
        now, origin = time.time_ns() // 1_000_000, self.origin.bytes
        start = time.perf_counter()
        with self.raw.cursor() as cur:
            for b in range(first, first + count):
                with cur.copy(RAW_COPY) as copy:
                    copy.set_types(COPY_TYPES)
                    for offset in range(b * BATCH, (b + 1) * BATCH):
                        copy.write_row(
                            (1, offset, now, None, self.records[0].value, None, origin, None)
                        )
                self.raw.commit()
        return time.perf_counter() - start

    def append_slice(self, count: int) -> float:
        start = time.perf_counter()
        for _ in range(count):
            self.store.append(self.stream, "bench", self.records, origin=self.origin)
        return time.perf_counter() - start

    def write(self) -> tuple[float, float]:
        """(raw COPY, append) in messages/s, interleaved slice by slice."""
        raw = append = 0.0
        for n, first in enumerate(range(0, self.batches, SLICE)):
            count = min(SLICE, self.batches - first)
            if n % 2:
                append += self.append_slice(count)
                raw += self.raw_slice(first, count)
            else:
                raw += self.raw_slice(first, count)
                append += self.append_slice(count)
        total = self.batches * BATCH
        return total / raw, total / append

    def read(self) -> float:
        offset, high = 0, self.batches * BATCH
        start = time.perf_counter()
        while offset < high:
            offset = self.store.read(self.stream, "bench", 0, offset)[-1].offset + 1
        return high / (time.perf_counter() - start)

    def close(self) -> None:
        self.store.close()
        self.raw.close()


def run(url: str, messages: int, runs: int) -> dict[str, list[float]]:
    bench = Bench(url, messages)
    results: dict[str, list[float]] = {"raw": [], "append": [], "read": []}
    try:
        for n in range(runs):
            bench.reset()
            raw, append = bench.write()
            read = bench.read()
            for key, value in (("raw", raw), ("append", append), ("read", read)):
                results[key].append(value)
            print(
                f"run {n + 1}: raw COPY {raw:,.0f}/s  append {append:,.0f}/s "
                f"({append / raw:.2f}x)  read {read:,.0f}/s",
                flush=True,
            )
    finally:
        bench.close()
    return results


def table(results: dict[str, list[float]], messages: int, runs: int) -> str:
    raw, append, read = (statistics.median(results[k]) for k in ("raw", "append", "read"))
    ratios = [a / r for a, r in zip(results["append"], results["raw"], strict=True)]
    return "\n".join(
        [
            f"{messages:,} messages of {VALUE_BYTES} B in batches of {BATCH:,}; "
            f"medians of {runs} runs",
            "",
            "| measure | messages/s (median) | each run | vs raw COPY (median of runs) |",
            "| --- | ---: | --- | ---: |",
            f"| raw binary COPY, commit per batch | {raw:,.0f} | {_each(results['raw'])} | 1.00x |",
            f"| store append | {append:,.0f} | {_each(results['append'])} | "
            f"{statistics.median(ratios):.2f}x ({', '.join(f'{r:.2f}' for r in ratios)}) |",
            f"| store read, one partition | {read:,.0f} | {_each(results['read'])} | |",
        ]
    )


def _each(values: list[float]) -> str:
    return ", ".join(f"{v / 1000:,.0f}k" for v in values)


def main(args: argparse.Namespace) -> int:
    name = f"sgstore_bench_{os.getpid()}"
    url = with_db(args.url, name)
    create_database(url)
    try:
        results = run(url, args.messages, args.runs)
    finally:
        with psycopg.connect(with_db(args.url, "postgres"), autocommit=True) as conn:
            drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
            conn.execute(drop.format(sql.Identifier(name)))
    print()
    print(table(results, args.messages, args.runs))
    return 0
