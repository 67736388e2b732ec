"""A partition move's copy rate and cut-over pause (issue 33), engine level: two batch stores
on the local PostgreSQL (databases sgbench_move_a and _b, made again each run), a partition of
`--messages` 100-byte values appended `--batch` a batch, then the bulk copy timed, then the
cut-over timed while a writer keeps appending 10-record batches to the partition (its appends'
latencies reported; the one caught by the cut-over meets NOT_HELD, as a router would).

    PYTHONPATH=. .venv/bin/python -m bench.partitionmove --messages 1000000

`--copy-rates N`: instead, the bulk copy alone N times by the COPY pipe and N times by a Spark
job (workers/spark/movecopy.py, a local session started beforehand, `--split` offsets a task),
the target emptied before each, medians reported.
"""

from __future__ import annotations

import argparse
import threading
import time
import uuid

import psycopg

from replication.engine import fence
from replication.engine import partitionmove as moving
from replication.engine.factory import create_database, open_store
from replication.engine.store import Record
from replication.engine.storebase import MessageStore

SERVER = "postgresql://postgres@127.0.0.1:5432/"
VALUE = b"x" * 100


def stores() -> tuple[MessageStore, MessageStore]:
    urls = [SERVER + "sgbench_move_a", SERVER + "sgbench_move_b"]
    with psycopg.connect(SERVER + "postgres", autocommit=True) as conn:
        for url in urls:
            conn.execute(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}" WITH (FORCE)')
    for url in urls:
        create_database(url)
    source, target = (open_store(url) for url in urls)
    return source, target


def fill(source: MessageStore, target: MessageStore, stream: uuid.UUID, messages: int,
         batch: int) -> None:
    for store in (source, target):
        fence.install(store)
        store.ensure_topic(stream, "t", 1)
        moving.ensure_marker_table(store)
    fence.set_held(source, stream, "t", [0])
    fence.set_held(target, stream, "t", [])
    for _ in range(0, messages, batch):
        source.append(stream, "t", [Record(VALUE, partition=0)] * batch, origin=stream)


class Writer(threading.Thread):
    def __init__(self, store: MessageStore, stream: uuid.UUID) -> None:
        super().__init__(daemon=True)
        self.store, self.stream = store, stream
        self.latencies: list[float] = []
        self.refused: float | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            began = time.monotonic()
            try:
                self.store.append(self.stream, "t", [Record(VALUE, partition=0)] * 10,
                                  origin=self.stream)
            except Exception as err:  # the cut-over let go of the partition
                assert fence.is_not_held(err), err
                self.refused = time.monotonic() - began
                return
            self.latencies.append(time.monotonic() - began)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--copy-rates", type=int, default=0, metavar="RUNS")
    parser.add_argument("--split", type=int, default=200_000)
    args = parser.parse_args(argv)
    source, target = stores()
    stream = uuid.uuid4()
    fill(source, target, stream, args.messages, args.batch)
    spid, tpid = (moving.pid_of(s, stream, "t", 0) for s in (source, target))
    if args.copy_rates:
        copy_rates(source, target, spid, tpid, args)
        return
    began = time.monotonic()
    upto = moving.copy_history(source, target, spid, tpid)
    bulk = time.monotonic() - began
    print(f"bulk copy: {upto:,} messages ({upto // args.batch:,} batches, "
          f"{upto * len(VALUE) / 1e6:.0f} MB of values) in {bulk:.2f} s: "
          f"{upto / bulk:,.0f} msg/s, {upto * len(VALUE) / bulk / 1e6:.0f} MB/s")
    writer = Writer(source, stream)
    writer.start()
    time.sleep(1.0)
    began = time.monotonic()
    held = moving.cut_over(source, target, spid, tpid, copied_to=upto,
                           compaction=moving.compaction_mark(source, spid), target_name="b")
    pause = time.monotonic() - began
    writer.stop.set()
    writer.join()
    waits = sorted(writer.latencies)
    p99 = waits[int(len(waits) * 0.99)] * 1000 if waits else 0.0
    refused = "none" if writer.refused is None else f"{writer.refused * 1000:.0f} ms"
    print(f"cut-over: {pause * 1000:.0f} ms for a tail of {held - upto:,} messages "
          f"({held:,} in all); the writer's {len(waits)} appends before it: p99 {p99:.1f} ms; "
          f"its append caught by the cut-over waited {refused}, then NOT_HELD")
    source.close()
    target.close()


def copy_rates(source: MessageStore, target: MessageStore, spid: int, tpid: int,
               args: argparse.Namespace) -> None:
    from workers.spark.movecopy import MoveCopy, copy_on_spark
    from workers.spark.session import spark_context

    spark = spark_context()
    urls = [SERVER + "sgbench_move_a", SERVER + "sgbench_move_b"]
    move = MoveCopy(*urls, source.DATA_TABLE, moving.key_column(source), spid, tpid)  # type: ignore[attr-defined]
    copiers = {"COPY pipe": None,
               "Spark": lambda s, e: copy_on_spark(spark, move, s, e, args.split)}
    for name, bulk in copiers.items():
        rates = []
        for _ in range(args.copy_rates):
            moving.prepare(target, tpid)
            began = time.monotonic()
            upto = moving.copy_history(source, target, spid, tpid, bulk=bulk)
            rates.append(upto / (time.monotonic() - began))
        rates.sort()
        print(f"{name}: median {rates[len(rates) // 2]:,.0f} msg/s "
              f"({', '.join(f'{r:,.0f}' for r in rates)}) for {upto:,} messages")
    spark.stop()


if __name__ == "__main__":
    main()
