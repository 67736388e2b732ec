"""Consumer groups with real clients through a real listener: two members share a topic's
partitions, rebalance when one leaves, and every message is consumed once by the group; the
offsets they commit are the stream's cursors (`stream cursor list`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from confluent_kafka import Consumer, Producer

from replication.services.cursors import cursor_report
from tests.factories import ClusterFactory, StreamFactory, TopicFactory

pytestmark = pytest.mark.slow
TOPIC = "/mapr/c1/apps:orders"
PARTITIONS = 4
DEADLINE = 90.0


@pytest.fixture
def orders(owner):
    stream = StreamFactory(cluster=ClusterFactory(name="c1"), name="apps", created_by=owner,
                           tenant=owner.memberships.get().tenant)
    TopicFactory(stream=stream, name="orders", partitions=PARTITIONS)
    return stream


def produce(kafka, values: list[str], topic: str = TOPIC) -> None:
    producer = Producer(kafka.confluent(**{"linger.ms": 5}))
    for index, value in enumerate(values):
        producer.produce(topic, value.encode(), partition=index % PARTITIONS)
    assert producer.flush(30) == 0


def wait_for(check: Callable[[], bool], what: str, deadline: float = DEADLINE) -> None:
    end = time.monotonic() + deadline
    while not check():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.1)


@dataclass
class Member:
    """A consumer polling in a thread, committing each message before the next poll."""

    name: str
    make: Callable[[], object]
    seen: list[str] = field(default_factory=list)
    partitions: set[int] = field(default_factory=set)
    stop: threading.Event = field(default_factory=threading.Event)
    errors: list[BaseException] = field(default_factory=list)

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            consumer = self.make()
            consumer.subscribe([TOPIC])
            while not self.stop.is_set():
                message = consumer.poll(0.2)
                self.partitions = {tp.partition for tp in consumer.assignment()}
                if message is None or message.error():
                    continue
                self.seen.append(message.value().decode())
                consumer.commit(message=message, asynchronous=False)
            consumer.close()  # LeaveGroup: the others rebalance at once
        except BaseException as error:  # reported by the test thread
            self.errors.append(error)

    def leave(self) -> None:
        self.stop.set()
        self.thread.join(30)
        assert not self.errors, self.errors


def confluent_member(kafka, name: str, group: str) -> Member:
    config = kafka.confluent(**{
        "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False,
        "session.timeout.ms": 6000, "heartbeat.interval.ms": 300, "client.id": name})
    return Member(name, lambda: Consumer(config))


def test_confluent_group_shares_partitions_and_rebalances_when_one_leaves(kafka, owner, orders):
    first = [f"a{i}" for i in range(200)]
    produce(kafka, first)
    a, b = confluent_member(kafka, "m-a", "billing"), confluent_member(kafka, "m-b", "billing")
    a.start()
    b.start()
    wait_for(lambda: len(a.seen) + len(b.seen) >= len(first) and a.partitions and b.partitions
             and len(a.partitions | b.partitions) == PARTITIONS, "both members consuming")
    assert not a.partitions & b.partitions, (a.partitions, b.partitions)
    b.leave()
    wait_for(lambda: a.partitions == set(range(PARTITIONS)), "a taking every partition")
    second = [f"b{i}" for i in range(100)]
    produce(kafka, second)
    wait_for(lambda: len(a.seen) + len(b.seen) >= len(first) + len(second), "the second batch")
    a.leave()
    consumed = a.seen + b.seen
    assert sorted(consumed) == sorted(first + second)  # each message once, none lost
    cursors = cursor_report(actor=owner, stream=orders, group="billing")
    assert sorted((c["partitionid"], c["committedoffset"]) for c in cursors) == [
        (p, 75) for p in range(PARTITIONS)]
