"""A Kafka consumer group commits on the source stream, its cursors replicate with the data
(real gateway and replicator processes), and the group continues on the replica through
another listener with nothing lost and nothing read twice: once with MapR names (the replica's
topic name), once with plain names where only the bootstrap changes."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer

from replication.services.cursors import cursors_fetch
from replication.services.defaultstreams import default_stream_set
from replication.services.replicas import replica_add
from replication.services.topics import topic_create
from replication.services.upstreams import upstream_add
from replication.stores import store_for
from tests.workers.conftest import wait_until
from tests.workers.test_replication import gateways  # noqa: F401 - fixture

pytestmark = pytest.mark.slow
GROUP, TOTAL, FIRST = "billing", 300, 120


@pytest.fixture
def pair(owner, activity, activity_ny):
    """activity (sanfrancisco) replicating to activity_ny (newyork), topic clicks of 3."""
    for cluster in (activity.cluster, activity_ny.cluster):
        store_for(cluster)
    topic_create(actor=owner, stream=activity, name="clicks", partitions=3)
    replica_add(actor=owner, source=activity, replica=activity_ny)
    upstream_add(actor=owner, replica=activity_ny, source=activity)
    return activity, activity_ny


def produce(config: dict, topic: str, values: list[str]) -> None:
    producer = Producer({**config, "linger.ms": 5, "acks": "all"})
    for index, value in enumerate(values):
        producer.produce(topic, value.encode(), partition=index % 3)
    assert producer.flush(30) == 0


def consume(config: dict, topic: str, count: int, *, settle: float = 0.0) -> list[str]:
    """Consume `count` messages as group GROUP, committing each before taking the next, then
    poll `settle` seconds more to catch anything delivered twice."""
    consumer = Consumer({**config, "group.id": GROUP, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "session.timeout.ms": 6000})
    consumer.subscribe([topic])
    seen: list[str] = []
    deadline = time.monotonic() + 90
    while len(seen) < count:
        assert time.monotonic() < deadline, f"consumed only {len(seen)} of {count}"
        message = consumer.poll(0.2)
        if message is not None and not message.error():
            seen.append(message.value().decode())
            consumer.commit(message=message, asynchronous=False)
    end = time.monotonic() + settle
    while time.monotonic() < end:
        message = consumer.poll(0.2)
        if message is not None and not message.error():
            seen.append(message.value().decode())
    consumer.close()
    return seen


def wait_cursors_replicated(owner, source, replica) -> dict:  # type: ignore[no-untyped-def]
    committed = cursors_fetch(actor=owner, stream=source, group=GROUP)
    assert sum(c.offset for c in committed.values()) == FIRST
    wait_until(lambda: cursors_fetch(actor=owner, stream=replica, group=GROUP) == committed,
               timeout=60)
    return committed


def failover(kafka, owner, pair, source_topic: str, replica_topic: str,
             replica_config: dict) -> None:
    source, replica = pair
    values = [f"m{i}" for i in range(TOTAL)]
    produce(kafka.confluent(), source_topic, values)
    before = consume(kafka.confluent(), source_topic, FIRST)
    wait_cursors_replicated(owner, source, replica)
    # The source side is gone for the application: it only knows the replica's listener.
    kafka.listeners.stop("k1")
    after = consume(replica_config, replica_topic, TOTAL - FIRST, settle=3.0)
    assert sorted(before + after) == sorted(values)  # no gap, no duplicate


def test_group_fails_over_to_the_replica_by_mapr_name(kafka, gateways, owner, pair):  # noqa: F811
    gateways.replicator()
    replica_bootstrap = kafka.listeners.start("k2", "--cluster", "newyork")
    replica_config = {**kafka.confluent(), "bootstrap.servers": replica_bootstrap}
    failover(kafka, owner, pair, "/mapr/sanfrancisco/activity:clicks",
             "/mapr/newyork/activity:clicks", replica_config)


def test_group_fails_over_with_plain_names_changing_only_the_bootstrap(
        kafka_listeners, gateways, owner, pair):  # noqa: F811
    from tests.broker.conftest import KafkaEndpoint, sasl_token

    source, replica = pair
    default_stream_set(actor=owner, cluster="sanfrancisco", path=source.path)
    default_stream_set(actor=owner, cluster="newyork", path=replica.path)
    gateways.replicator()
    source_bootstrap = kafka_listeners.start("k1", "--cluster", "sanfrancisco")
    replica_bootstrap = kafka_listeners.start("k2", "--cluster", "newyork")
    kafka = KafkaEndpoint(source_bootstrap, owner.get_username(), sasl_token(owner),
                          kafka_listeners)
    replica_config = {**kafka.confluent(), "bootstrap.servers": replica_bootstrap}
    failover(kafka, owner, pair, "clicks", "clicks", replica_config)
