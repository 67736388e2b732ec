"""A new group's first rebalance waits for more members (Kafka's
group.initial.rebalance.delay.ms, 3 s by default): two librdkafka consumers started a second
apart share the partitions in one generation, the first never handed every partition only to
give half back (librdkafka's 0118 commits in that revoke, expecting it only at close). With
the wait off, as the other tests run, the first takes all and is revoked."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Consumer

from tests.broker.conftest import KafkaEndpoint, orders_topic, sasl_token

pytestmark = pytest.mark.slow
TOPIC = "/mapr/c1/apps:orders"


class Watched:
    """A consumer polling in a thread, recording each assignment and revocation it is told."""

    def __init__(self, bootstrap_config: dict, name: str) -> None:
        self.events: list[tuple[str, int]] = []
        self.stop = threading.Event()
        self.consumer = Consumer({**bootstrap_config, "group.id": "delayed", "client.id": name,
                                  "session.timeout.ms": 6000, "heartbeat.interval.ms": 300,
                                  "auto.offset.reset": "earliest"})
        self.consumer.subscribe([TOPIC], on_assign=self._note("assign"),
                                on_revoke=self._note("revoke"))
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _note(self, kind: str):  # type: ignore[no-untyped-def]
        return lambda consumer, partitions: self.events.append((kind, len(partitions)))

    def _poll(self) -> None:
        while not self.stop.is_set():
            self.consumer.poll(0.2)
        self.consumer.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)


def first_assignments(kafka_listeners, owner, delay_ms: str) -> tuple[list, list]:  # type: ignore[no-untyped-def]
    """The assignments and revocations each of two consumers saw, the second started a second
    after the first, on a listener whose initial delay is `delay_ms`."""
    orders_topic(owner, 4)
    bootstrap = kafka_listeners.start(
        "k1", env={"STREAMGATE_KAFKA_GROUP_INITIAL_DELAY_MS": delay_ms})
    config = KafkaEndpoint(bootstrap, owner.get_username(), sasl_token(owner),
                           kafka_listeners).confluent()
    first = Watched(config, "first")
    time.sleep(1.0)
    second = Watched(config, "second")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not _shared(first.events, second.events):
        time.sleep(0.2)
    time.sleep(1.0)  # a late rebalance would show here
    first.close()
    second.close()
    return first.events, second.events


def _shared(first: list, second: list) -> bool:
    """Whether both hold an assignment now, together the four partitions."""
    lasts = [events[-1] for events in (first, second) if events]
    return len(lasts) == 2 and all(kind == "assign" for kind, _ in lasts) and \
        sum(count for _, count in lasts) == 4


def test_consumers_started_together_share_one_generation(kafka_listeners, owner):
    first, second = first_assignments(kafka_listeners, owner, "3000")
    assert first[:1] == [("assign", 2)] and second[:1] == [("assign", 2)]
    assert ("revoke", 4) not in first


def test_without_the_wait_the_first_takes_all_and_gives_half_back(kafka_listeners, owner):
    first, second = first_assignments(kafka_listeners, owner, "0")
    assert first[:2] == [("assign", 4), ("revoke", 4)]
    assert ("assign", 2) in second
