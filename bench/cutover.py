"""The cut-over pause a Kafka producer sees while its partition moves (issue 33), the `cutover`
part of `python -m bench groups` (bench/groups.py serves the deployment).

A cluster `moving` of two groups (s2 a second database on the same server) with a topic of one
partition holding `--history` messages. A confluent-kafka producer process (idempotent,
acks=all, linger.ms=5) produces `--rate` messages a second to it, paced in 10 ms steps, and
records each message's delivery latency (librdkafka's Message.latency(): produce() to the
acknowledgement) and send time; meanwhile `stream topic partition move` (the /rest command,
replication/services/partitionmove.py) moves the partition to the other group `--moves` times,
3 s apart. A move's window is its call, from the request to the answer: history copy,
cut-over, the placement switch and the 2.5 s grace before the source's copy is deleted.
bench/partitionmove.py measures the engine's pause alone; this is what the client sees.
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing
import os
import statistics
import time

from bench.groups import beside, make_cluster, placed, settle, topic_of
from bench.kafka import kafka_produce
from bench.pages import _percentile
from bench.produce import Portal

PAUSE_TARGET_MS = 200.0
STEP = 0.01  # the producer's pacing step, seconds
WARM_UP = 1.0  # seconds of the producer's start left out of the steady figures


def _producer(config: dict, topic: str, rate: int, stop: multiprocessing.Event,  # type: ignore[valid-type]
              ready: multiprocessing.Event, out: multiprocessing.Queue) -> None:  # type: ignore[valid-type]
    from confluent_kafka import KafkaException, Producer

    delivered: list[tuple[float, float, int]] = []  # (sent at, latency s, offset)
    errors: list[str] = []

    def report(sent: float, err: object, msg: object) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            delivered.append((sent, msg.latency(), msg.offset()))  # type: ignore[attr-defined]

    producer = Producer({**config, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    producer.list_topics(topic, timeout=20)
    ready.set()
    value, per_step = os.urandom(200), max(1, round(rate * STEP))
    due = time.monotonic()
    while not stop.is_set():  # type: ignore[attr-defined]
        while (wait := due - time.monotonic()) > 0:
            producer.poll(wait)
        for _ in range(per_step):
            try:
                producer.produce(topic, value, on_delivery=functools.partial(
                    report, time.monotonic()))
            except (BufferError, KafkaException) as err:  # reached the app: counted
                errors.append(repr(err))
        producer.poll(0)
        due = max(due + STEP, time.monotonic())
    left = producer.flush(60)
    out.put((delivered, errors, left))


def _moves(client, count: int) -> list[tuple[float, float, dict]]:  # type: ignore[no-untyped-def]
    """Move the partition to the other group `count` times: (start, end, answer) each."""
    moves = []
    for _ in range(count):
        to = "s1" if placed(client, "moving").get("s2") else "s2"
        began = time.monotonic()
        answer = client.call("stream topic partition move", {
            "path": "/mapr/moving/produce", "topic": "t", "partition": 0, "to": to})[0]
        moves.append((began, time.monotonic(), answer))
        time.sleep(3.0)
    return moves


def cutover(portal: Portal, config: dict, client, args: argparse.Namespace  # type: ignore[no-untyped-def]
            ) -> list[str]:
    make_cluster(client, "moving", partitions=1, group_first=beside(portal, "moving_s2"))
    settle()
    kafka_produce(config, args.history, topic=topic_of("moving"))
    stop, ready = multiprocessing.Event(), multiprocessing.Event()
    out: multiprocessing.Queue = multiprocessing.Queue()
    worker = multiprocessing.Process(target=_producer, args=(
        config, topic_of("moving"), args.rate, stop, ready, out))
    worker.start()
    if not ready.wait(60):
        raise RuntimeError("the cut-over producer did not connect in 60 s")
    time.sleep(3.0)
    moves = _moves(client, args.moves)
    stop.set()
    delivered, errors, left = out.get()
    worker.join()
    return table(delivered, errors + [f"{left} left undelivered"] * bool(left), moves, args)


def _figures(latencies: list[float]) -> tuple[float, float, float]:
    ms = [v * 1000 for v in latencies]
    return statistics.median(ms), _percentile(ms, 0.99), max(ms)


def table(delivered: list[tuple[float, float, int]], errors: list[str],
          moves: list[tuple[float, float, dict]], args: argparse.Namespace) -> list[str]:
    offsets = sorted(o for _, _, o in delivered)
    once = len(set(offsets)) == len(offsets) == offsets[-1] - offsets[0] + 1
    lines = [f"{args.rate:,} msg/s of 200 B (idempotent, acks=all, linger.ms=5) to one "
             f"partition of {args.history:,}+ messages, {len(moves)} moves 3 s apart; "
             f"{len(delivered):,} messages delivered, errors reaching the app: "
             f"{len(errors)}{' (' + '; '.join(sorted(set(errors))[:3]) + ')' if errors else ''};"
             f" delivered offsets each once, no gap: {'yes' if once else 'NO'}", "",
             "| window | messages | p50 ms | p99 ms | max ms |", "| --- | ---: | ---: | ---: | "
             "---: |"]
    inside: set[int] = set()
    per_move = []
    for n, (began, ended, answer) in enumerate(moves, 1):
        window = [i for i, (sent, _, _) in enumerate(delivered) if began <= sent <= ended]
        inside.update(window)
        p50, p99, top = _figures([delivered[i][1] for i in window])
        per_move.append((p50, p99, top))
        lines.append(f"| move {n}: {answer['from']} -> {answer['to']}, "
                     f"{answer['messagesCopied']:,} copied, call {ended - began:.1f} s | "
                     f"{len(window):,} | {p50:.1f} | {p99:.1f} | {top:.0f} |")
    med = [statistics.median(f[i] for f in per_move) for i in range(3)]
    lines.append(f"| median of the moves | | {med[0]:.1f} | {med[1]:.1f} | {med[2]:.0f} |")
    # The producer's first second is left out of the steady figures: its first messages wait
    # for the connection and the idempotent producer's id (InitProducerId), up to ~0.5 s here.
    warm = delivered[0][0] + WARM_UP
    steady = [lat for i, (sent, lat, _) in enumerate(delivered) if i not in inside
              and sent >= warm]
    first = [lat for sent, lat, _ in delivered if sent < warm]
    p50, p99, top = _figures(steady)
    f50, f99, ftop = _figures(first)
    lines += [f"| outside the moves (steady, after the first {WARM_UP:.0f} s) | {len(steady):,} |"
              f" {p50:.1f} | {p99:.1f} | {top:.0f} |",
              f"| the producer's first {WARM_UP:.0f} s (connecting, its producer id) | "
              f"{len(first):,} | {f50:.1f} | {f99:.1f} | {ftop:.0f} |", "",
              f"Cut-over p99 (median of moves) {med[1]:.0f} ms, worst move "
              f"{max(f[1] for f in per_move):.0f} ms: target p99 < 200 ms "
              f"{'met' if med[1] < PAUSE_TARGET_MS else 'not met'}."]
    return lines
