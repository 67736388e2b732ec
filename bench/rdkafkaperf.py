"""librdkafka's own benchmark client, rdkafka_performance (its examples/), as a consumer.

confluent-kafka's Python consumer spends about 0.85 ms of CPU per 1,000 messages of its own
(the Message objects), on the same two cores as the listener and PostgreSQL: it measures
itself as much as the broker. rdkafka_performance is librdkafka in C, the client the
librdkafka project measures brokers with; it counts from the first message received. It is
built once from the pinned snapshot the conformance suite uses (bench/conformance.py), in
var/conformance.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path


def tool() -> Path:
    """rdkafka_performance, built beside the conformance suite's test-runner if missing."""
    from bench.conformance import COMMIT, TARBALL, WORK, build

    tests = build(TARBALL, WORK / f"librdkafka-{COMMIT}")
    examples = tests.parent / "examples"
    binary = examples / "rdkafka_performance"
    if not binary.exists():
        done = subprocess.run(["make", "-C", str(examples), "rdkafka_performance"],
                              capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"building rdkafka_performance failed:\n{done.stderr[-2000:]}")
    return binary


def consume(config: dict, topic: str, starts: dict[int, int], messages: int) -> float:
    """Messages/s of rdkafka_performance consuming `messages` from `starts` (a consumer
    group's committed offsets, set here first), from its first message to its last."""
    from confluent_kafka import Consumer, TopicPartition

    group = f"bench-c-{uuid.uuid4().hex[:8]}"
    setter = Consumer({**config, "group.id": group, "enable.auto.commit": False})
    setter.commit(offsets=[TopicPartition(topic, p, o) for p, o in starts.items()],
                  asynchronous=False)
    setter.close()
    options = [arg for key, value in config.items() for arg in ("-X", f"{key}={value}")]
    done = subprocess.run([str(tool()), "-G", group, "-t", topic, "-c", str(messages), "-u",
                           *options], capture_output=True, text=True, timeout=600)
    rows = [line.split("|") for line in done.stdout.splitlines()
            if line.startswith("|") and "m/s" not in line]
    if done.returncode or not rows or int(rows[-1][2]) < messages:
        raise RuntimeError(f"rdkafka_performance did not consume {messages} messages:\n"
                           f"{done.stdout[-1500:]}{done.stderr[-1500:]}")
    return float(rows[-1][5])  # | elapsed | msgs | bytes | rtt | m/s | ...
