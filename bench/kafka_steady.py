"""The steady-state replication lag with a librdkafka producer (bench/peers.py's steady row):
a confluent-kafka producer (acks=all, linger.ms=5) paced at the steady rate through a Kafka
listener of the deployment into a replicated stream; lag = the moment the replica's end passes
a message minus the moment the producer's delivery report acknowledged it (monotonic clocks,
the same on every process of this machine). Measured as bench/replication.py's REST steady
row is, so the two rows compare."""

from __future__ import annotations

import argparse
import bisect
import multiprocessing
import os
import statistics
import threading
import time
import uuid

from bench import replication
from bench.kafka import Listener


def _producer(config: dict, topic: str, batch: int, interval: float, seconds: float,
              out: multiprocessing.Queue) -> None:
    from confluent_kafka import Producer

    acked: list[tuple[int, int, float]] = []
    errors: list[str] = []

    def report(err, msg) -> None:  # type: ignore[no-untyped-def]
        if err is not None:
            errors.append(str(err))
        else:
            acked.append((msg.partition(), msg.offset(), time.monotonic()))

    producer = Producer({**config, "acks": "all", "linger.ms": 5, "on_delivery": report})
    producer.list_topics(topic, timeout=20)
    value = os.urandom(replication.VALUE_BYTES)
    start = time.monotonic()
    due, deadline = start, start + seconds
    while due < deadline:
        producer.poll(max(due - time.monotonic(), 0))
        for _ in range(batch):
            producer.produce(topic, value)
        due = max(due + interval, time.monotonic())
    producer.flush(60)
    out.put((acked, time.monotonic() - start, errors))


def measure(deploy: replication.Deployment, client, token: str,  # type: ignore[no-untyped-def]
            args: argparse.Namespace) -> dict:
    from replication.engine.pg import PostgresStore

    listener = Listener(deploy.env)
    deploy.engine["kafka"] = listener.process  # counted by cpu_by_process, stopped by stop()
    src, dst = (uuid.UUID(u) for u in replication.create_pair(client, "ksteady", paused=False))
    dst_store = PostgresStore(deploy.store_url(replication.REPLICA))
    seen: dict[int, list[tuple[float, int]]] = {p: [(0.0, 0)]
                                                for p in range(replication.PARTITIONS)}
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            marks = replication.watermarks(dst_store, dst)
            at = time.monotonic()
            for p, high in marks.items():
                if high > seen[p][-1][1]:
                    seen[p].append((at, high))
            time.sleep(0.005)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    config = {"bootstrap.servers": f"127.0.0.1:{listener.port}",
              "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
              "sasl.username": "bench", "sasl.password": token}
    topic = f"/mapr/{replication.SOURCE}/ksteady:{replication.TOPIC}"
    out: multiprocessing.Queue = multiprocessing.Queue()
    cpu_before = replication.cpu_by_process(deploy)
    worker = multiprocessing.Process(target=_producer, args=(
        config, topic, args.steady_batch, args.steady_batch / args.steady_rate,
        args.steady_seconds, out))
    with replication.profiling(deploy, "ksteady"):
        worker.start()
        acked, took, errors = out.get()
        worker.join()
    ends: dict[int, int] = {}
    for p, o, _ in acked:
        ends[p] = max(ends.get(p, 0), o + 1)
    deadline = time.monotonic() + 30
    while any(seen[p][-1][1] < e for p, e in ends.items()) and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    poller.join()
    dst_store.close()
    del src
    return _summary(acked, seen, took, errors, cpu_before, deploy)


def _summary(acked: list, seen: dict, took: float, errors: list, cpu_before: dict,
             deploy: replication.Deployment) -> dict:
    lags, missing = [], 0
    for p, o, at in acked:
        marks = seen[p]
        i = bisect.bisect_right([h for _, h in marks], o)  # first mark with high > o
        if i >= len(marks):
            missing += 1
            continue
        lags.append((marks[i][0] - at) * 1000)
    lags.sort()

    def pct(q: float) -> float:
        return lags[min(len(lags) - 1, int(q * len(lags)))] if lags else float("nan")

    return {"produced": len(acked), "rate": len(acked) / took, "p50": pct(0.50),
            "p99": pct(0.99), "max": lags[-1] if lags else float("nan"),
            "mean": statistics.fmean(lags) if lags else float("nan"), "missing": missing,
            "cpu_per_1k": {label: (used - cpu_before.get(label, 0.0)) * 1e6 / max(len(acked), 1)
                           for label, used in replication.cpu_by_process(deploy).items()},
            "errors": len(errors), "first_error": errors[0] if errors else ""}
