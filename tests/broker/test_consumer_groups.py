"""Consumer groups with real clients through a real listener: two members share a topic's
partitions, rebalance when one leaves, and every message is consumed once by the group; the
offsets they commit are the stream's cursors (`stream cursor list`), and the stream page's
Consumer groups tab shows the live members with the partitions each holds."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from django.test import Client

from replication.services.cursors import cursor_report
from tests.factories import ClusterFactory, StreamFactory, TopicFactory

pytestmark = pytest.mark.slow
TOPIC = "/mapr/c1/apps:orders"
LEGAL = "__mapr.c1_sapps_corders"  # the same topic, spelled for kafka-python and aiokafka
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


def wait_for(check: Callable[[], bool], what: str, kafka=None,  # type: ignore[no-untyped-def]
             deadline: float = DEADLINE) -> None:
    end = time.monotonic() + deadline
    while not check():
        if time.monotonic() > end:
            log = kafka.listeners.log()[-3000:] if kafka else ""
            raise AssertionError(f"timed out waiting for {what}; listener log:\n{log}")
        time.sleep(0.1)


@dataclass
class Member:
    """A consumer running in a thread (`body`), committing what it consumed before it polls
    again; `seen` and `partitions` are what it consumed and what it is assigned now."""

    name: str
    body: Callable[[Member], None]
    seen: list[str] = field(default_factory=list)
    partitions: set[int] = field(default_factory=set)
    stop: threading.Event = field(default_factory=threading.Event)
    errors: list[str] = field(default_factory=list)
    # Values whose commit the coordinator refused (REBALANCE_IN_PROGRESS while the group
    # completes a rebalance, as Kafka answers): another member may read them again.
    uncommitted: list[str] = field(default_factory=list)

    def start(self) -> Member:
        self.thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self.thread.start()
        return self

    def _run(self) -> None:
        try:
            self.body(self)
        except BaseException:  # reported by the test thread, with the client's traceback
            self.errors.append(traceback.format_exc())

    def leave(self) -> None:
        self.stop.set()
        self.thread.join(30)
        assert not self.errors, self.errors[0]


def confluent_member(kafka, name: str, group: str, strategy: str = "range") -> Member:
    """librdkafka; `strategy` "kip848" is `group.protocol=consumer` (ConsumerGroupHeartbeat:
    the listener assigns, and the session and heartbeat interval are the listener's)."""
    own = ({"group.protocol": "consumer"} if strategy == "kip848" else {
        "session.timeout.ms": 6000, "heartbeat.interval.ms": 300,
        "partition.assignment.strategy": strategy})
    config = kafka.confluent(**{
        "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False,
        "client.id": name, **own})

    def body(member: Member) -> None:
        consumer = Consumer(config)
        consumer.subscribe([TOPIC])
        while not member.stop.is_set():
            message = consumer.poll(0.2)
            member.partitions = {tp.partition for tp in consumer.assignment()}
            if message is None or message.error():
                continue
            member.seen.append(message.value().decode())
            try:
                consumer.commit(message=message, asynchronous=False)
            except KafkaException:
                member.uncommitted.append(member.seen[-1])
        consumer.close()  # LeaveGroup (or epoch -1): the others rebalance at once

    return Member(name, body)


def kafka_python_member(kafka, name: str, group: str) -> Member:
    from kafka import KafkaConsumer
    from kafka.errors import CommitFailedError

    def body(member: Member) -> None:
        consumer = KafkaConsumer(**kafka.kafka_python(
            group_id=group, auto_offset_reset="earliest", enable_auto_commit=False,
            session_timeout_ms=6000, heartbeat_interval_ms=300, client_id=name))
        consumer.subscribe([LEGAL])  # kafka-python takes only Kafka-legal names
        while not member.stop.is_set():
            batches = consumer.poll(timeout_ms=200)
            member.partitions = {tp.partition for tp in consumer.assignment()}
            values = [r.value.decode() for records in batches.values() for r in records]
            member.seen += values
            if batches:
                try:
                    consumer.commit()
                except CommitFailedError:
                    member.uncommitted += values
        consumer.close()

    return Member(name, body)


def aiokafka_member(kafka, name: str, group: str) -> Member:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.errors import CommitFailedError as AioCommitFailed

    async def consume(member: Member) -> None:
        options = kafka.kafka_python()
        consumer = AIOKafkaConsumer(
            LEGAL, bootstrap_servers=options["bootstrap_servers"],
            security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
            sasl_plain_username=options["sasl_plain_username"],
            sasl_plain_password=options["sasl_plain_password"], group_id=group,
            auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=6000,
            heartbeat_interval_ms=300, client_id=name)
        await consumer.start()
        try:
            while not member.stop.is_set():
                batches = await consumer.getmany(timeout_ms=200)
                member.partitions = {tp.partition for tp in consumer.assignment()}
                values = [r.value.decode() for records in batches.values() for r in records]
                member.seen += values
                if batches:
                    try:
                        await consumer.commit()
                    except AioCommitFailed:
                        member.uncommitted += values
        finally:
            await consumer.stop()

    return Member(name, lambda member: asyncio.run(consume(member)))


def cooperative_member(kafka, name: str, group: str) -> Member:
    """librdkafka's incremental protocol: members rejoin with what they still own, and the
    coordinator completes the follow-up rebalance."""
    return confluent_member(kafka, name, group, "cooperative-sticky")


def kip848_member(kafka, name: str, group: str) -> Member:
    return confluent_member(kafka, name, group, "kip848")


def members_on_the_groups_tab(owner, stream, group: str) -> tuple[str, dict[str, set[int]]]:
    """The group's state and client id -> assigned partitions, as the portal's tab shows them
    (read from the rows the listener, another process, publishes)."""
    client = Client()
    client.force_login(owner)
    page = client.get(f"/streams/{stream.pk}/groups/").content.decode()
    block = re.search(rf'<article class="group" data-group="{group}">.*?</article>', page, re.S)
    if block is None or 'data-members="live"' not in block.group(0):
        return "", {}
    state = re.search(r'data-field="state">([^<]+)<', block.group(0)).group(1)
    rows = re.findall(r'data-field="client-id">([^<]+)</td>.*?data-field="assigned">(.*?)</td>',
                      block.group(0), re.S)
    return state, {name: {int(p) for p in re.findall(r"orders:(\d+)", cell)}
                   for name, cell in rows}


CLIENTS = {"confluent": confluent_member, "confluent-cooperative-sticky": cooperative_member,
           "confluent-kip848": kip848_member, "kafka-python": kafka_python_member,
           "aiokafka": aiokafka_member}


@pytest.mark.parametrize("client", list(CLIENTS))
def test_group_of_two_shares_partitions_and_rebalances_when_one_leaves(kafka, owner, orders,
                                                                        client):
    first = [f"a{i}" for i in range(200)]
    produce(kafka, first)
    member = CLIENTS[client]
    a, b = member(kafka, "m-a", "billing").start(), member(kafka, "m-b", "billing").start()
    # Each member reports its assignment after its poll returns, so wait for the settled
    # split: both hold partitions, none twice, all of them.
    wait_for(lambda: a.errors or b.errors or (
        len(a.seen) + len(b.seen) >= len(first) and a.partitions and b.partitions
        and not a.partitions & b.partitions and len(a.partitions | b.partitions) == PARTITIONS),
        "a disjoint split", kafka)
    assert not a.errors + b.errors, (a.errors + b.errors)[0]
    wait_for(lambda: members_on_the_groups_tab(owner, orders, "billing") == (
        "Stable", {"m-a": a.partitions, "m-b": b.partitions}), "both members on the tab", kafka)
    b.leave()
    wait_for(lambda: a.errors or a.partitions == set(range(PARTITIONS)),
             "a taking every partition", kafka)
    assert not a.errors, a.errors[0]
    second = [f"b{i}" for i in range(100)]
    produce(kafka, second)
    wait_for(lambda: len(a.seen) + len(b.seen) >= len(first) + len(second), "the second batch",
             kafka)
    a.leave()
    consumed = a.seen + b.seen
    assert set(consumed) == set(first + second)  # none lost
    twice = {value for value in consumed if consumed.count(value) > 1}
    assert twice <= set(a.uncommitted + b.uncommitted)  # only what was never committed
    cursors = cursor_report(actor=owner, stream=orders, group="billing")
    assert sorted((c.partition, c.committed) for c in cursors) == [
        (p, 75) for p in range(PARTITIONS)]


def test_group_survives_a_listener_killed_and_restarted(kafka, owner, orders):
    """Group state lives in the listener's memory; committed offsets in the store. A killed
    coordinator's members rejoin the restarted one and go on from their commits."""
    first, second = [f"a{i}" for i in range(100)], [f"b{i}" for i in range(100)]
    produce(kafka, first)
    a = confluent_member(kafka, "m-a", "billing").start()

    def committed() -> int:
        return sum(c.committed for c in cursor_report(actor=owner, stream=orders,
                                                               group="billing"))

    wait_for(lambda: committed() == len(first), "the first batch committed", kafka)
    port = kafka.listeners.processes["k1"][1]
    kafka.listeners.stop("k1", kill=True)
    kafka.listeners.start("k1", port=port)
    produce(kafka, second)
    wait_for(lambda: committed() == len(first) + len(second), "the second batch", kafka)
    a.leave()
    assert sorted(a.seen) == sorted(first + second)


KILLABLE = """
import json, sys
from confluent_kafka import Consumer
consumer = Consumer(json.loads(sys.argv[1]))
consumer.subscribe([sys.argv[2]])
while True:
    consumer.poll(0.2)
"""


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_member_killed_without_leaving_expires_after_its_session_timeout(kafka, owner,
                                                                          orders, protocol):
    """Classic: the member's 6 s session; KIP-848: the listener's (6 s in these tests)."""
    kip848 = protocol == "consumer"
    a = (kip848_member if kip848 else confluent_member)(kafka, "m-a", "billing").start()
    wait_for(lambda: a.errors or a.partitions == set(range(PARTITIONS)), "a alone", kafka)
    own = ({"group.protocol": "consumer"} if kip848
           else {"session.timeout.ms": 6000, "heartbeat.interval.ms": 300})
    config = kafka.confluent(**{"group.id": "billing", "client.id": "m-b", **own})
    b = subprocess.Popen([sys.executable, "-c", KILLABLE, json.dumps(config), TOPIC])
    try:
        wait_for(lambda: a.errors or 0 < len(a.partitions) < PARTITIONS, "b sharing", kafka)
    finally:
        b.kill()  # no LeaveGroup: only its silence tells the coordinator
        b.wait()
    killed = time.monotonic()
    wait_for(lambda: a.errors or a.partitions == set(range(PARTITIONS)), "b expired", kafka)
    assert time.monotonic() - killed >= 5.0  # not before b's 6 s session timeout (less a poll)
    a.leave()
