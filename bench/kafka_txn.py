"""`python -m bench kafka --transactions` (issue 31): what Kafka transactions cost, side by side
in one run on the same listener and store (bench/kafka.py's set-up). Each run measures:
- idempotent produce: librdkafka, enable.idempotence=true, acks=all, linger.ms=5, VALUE_BYTES
  keyless values over the topic's PARTITIONS partitions;
- transactional produce: the same producer with a transactional.id, the messages in
  transactions of TXN_SIZE (begin, produce, commit_transaction), from the first produce() to
  the last commit;
- consume of the transactional messages, read_uncommitted then read_committed (stopping at
  the last stable offset, skipping the commit markers), each a fresh consumer assigned every
  partition at the run's first transactional offsets, until it has them all.
Targets: transactional produce at least 0.8x idempotent, read_committed at least 0.9x
read_uncommitted."""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import time
import uuid

from bench.kafka import (
    PARTITIONS,
    TOPIC,
    VALUE_BYTES,
    _kafka_config,
    ends,
    kafka_consume,
    kafka_produce,
    served,
)

TXN_SIZE = 1000
MEASURES = ("idempotent", "transactional", "uncommitted", "committed")


def _txn_produce(config: dict, messages: int, out: multiprocessing.Queue) -> None:
    from confluent_kafka import Producer

    failed = [0]

    def report(err: object, _msg: object) -> None:
        if err is not None:
            failed[0] += 1

    producer = Producer({"acks": "all", "linger.ms": 5, "queue.buffering.max.messages": 1_000_000,
                         **config, "transactional.id": f"bench-{uuid.uuid4().hex[:8]}",
                         "on_delivery": report})
    producer.init_transactions(30)
    producer.list_topics(TOPIC, timeout=20)
    value = os.urandom(VALUE_BYTES)
    start = time.perf_counter()
    for first in range(0, messages, TXN_SIZE):
        producer.begin_transaction()
        for _ in range(first, min(first + TXN_SIZE, messages)):
            while True:
                try:
                    producer.produce(TOPIC, value)
                    break
                except BufferError:
                    producer.poll(0.005)
        producer.commit_transaction(120)
    out.put((messages / (time.perf_counter() - start), failed[0]))


def transactional_produce(config: dict, messages: int) -> float:
    out: multiprocessing.Queue = multiprocessing.Queue()
    worker = multiprocessing.Process(target=_txn_produce, args=(config, messages, out))
    worker.start()
    rate, failed = out.get()
    worker.join()
    if failed:
        raise RuntimeError(f"{failed} transactional messages were not acknowledged")
    return rate


def one_run(store_url: str, config: dict, messages: int) -> dict[str, float]:
    result = {"idempotent": kafka_produce({**config, "enable.idempotence": True}, messages)}
    starts = ends(store_url) or dict.fromkeys(range(PARTITIONS), 0)
    result["transactional"] = transactional_produce(config, messages)
    # the partitions' ends now hold the commit markers: consumers count messages, not offsets
    result["uncommitted"] = kafka_consume(config, starts, messages)
    result["committed"] = kafka_consume(config, starts, messages, "read_committed")
    return result


def transactions_main(args: argparse.Namespace) -> int:
    results: dict[str, list[float]] = {k: [] for k in MEASURES}
    with served(args) as (portal, listener, token, _stream):
        store_url = portal.env["DATABASE_URL"].replace("postgres://", "postgresql://", 1) \
            + "_store_bench"
        config = _kafka_config(f"127.0.0.1:{listener.port}", token)
        for n in range(args.runs):
            got = one_run(store_url, config, args.messages)
            for key, value in got.items():
                results[key].append(value)
            print(f"run {n + 1}: idempotent {got['idempotent']:,.0f}/s  transactional "
                  f"{got['transactional']:,.0f}/s  read_uncommitted {got['uncommitted']:,.0f}/s  "
                  f"read_committed {got['committed']:,.0f}/s", flush=True)
            time.sleep(args.rest_seconds)
    print()
    print(table(results, args))
    return 0


def table(results: dict[str, list[float]], args: argparse.Namespace) -> str:
    med = {k: statistics.median(v) for k, v in results.items()}

    def each(key: str) -> str:
        return ", ".join(f"{v / 1000:,.0f}k" for v in results[key])

    def ratio(of: str, to: str) -> str:
        values = [a / b for a, b in zip(results[of], results[to], strict=True)]
        return (f"{statistics.median(values):.2f}x {to} "
                f"({', '.join(f'{v:.2f}' for v in values)})")

    return "\n".join([
        f"{args.messages:,} messages of {VALUE_BYTES} B per run, {PARTITIONS} partitions, "
        f"transactions of {TXN_SIZE:,}, medians of {args.runs} runs, the {args.layout} store "
        "layout",
        "",
        "| measure | messages/s (median) | each run | ratio (median of runs) |",
        "| --- | ---: | --- | --- |",
        f"| idempotent produce, acks=all, linger.ms=5 | {med['idempotent']:,.0f} | "
        f"{each('idempotent')} | |",
        f"| transactional produce, {TXN_SIZE:,} a transaction | {med['transactional']:,.0f} | "
        f"{each('transactional')} | {ratio('transactional', 'idempotent')} (target 0.8x) |",
        f"| consume read_uncommitted | {med['uncommitted']:,.0f} | {each('uncommitted')} | |",
        f"| consume read_committed | {med['committed']:,.0f} | {each('committed')} | "
        f"{ratio('committed', 'uncommitted')} (target 0.9x) |",
    ])
