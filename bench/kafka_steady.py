"""The steady-state replication lag with a librdkafka producer (bench/peers.py's steady row):
a confluent-kafka producer (acks=all, linger.ms=5) paced at the steady rate through a Kafka
listener of the deployment into a replicated stream; lag = the moment the replica's end passes
a message minus the moment the producer's delivery report acknowledged it (monotonic clocks,
the same on every process of this machine). Measured as bench/replication.py's REST steady
row is, so the two rows compare."""

from __future__ import annotations

import argparse
import multiprocessing
import os
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
        while (wait := due - time.monotonic()) > 0:  # poll returns early on a delivery report
            producer.poll(wait)
        producer.poll(0)
        for _ in range(batch):
            producer.produce(topic, value)
        due = max(due + interval, time.monotonic())
    producer.flush(60)
    out.put((acked, time.monotonic() - start, errors))


def measure(deploy: replication.Deployment, client, token: str,  # type: ignore[no-untyped-def]
            args: argparse.Namespace) -> dict:
    listener = Listener(deploy.env)
    deploy.engine["kafka"] = listener.process  # counted by cpu_by_process, stopped by stop()
    src, dst = (uuid.UUID(u) for u in replication.create_pair(client, "ksteady", paused=False))
    watch = replication.ReplicaWatch(deploy, dst)
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
    seen = watch.finish(acked)
    del src
    return replication.steady_summary(acked, seen, took, errors, cpu_before, deploy)


