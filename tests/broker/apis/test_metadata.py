"""Several listeners: Metadata lists the live ones as brokers, spreads partition leadership over
them the same way on each, and moves a dead listener's partitions within seconds."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka.admin import AdminClient

from tests.broker.wire import Wire
from tests.factories import ClusterFactory, StreamFactory, TopicFactory

pytestmark = pytest.mark.slow
TOPIC = "/mapr/c1/apps:orders"


def leaders(config: dict) -> tuple[set[int], dict[int, int]]:  # type: ignore[type-arg]
    metadata = AdminClient(config).list_topics(TOPIC, timeout=20)
    partitions = metadata.topics[TOPIC].partitions
    return set(metadata.brokers), {p: partitions[p].leader for p in partitions}


@pytest.fixture
def orders(owner):  # type: ignore[no-untyped-def]
    stream = StreamFactory(cluster=ClusterFactory(name="c1"), name="apps", created_by=owner,
                           tenant=owner.memberships.get().tenant)
    return TopicFactory(stream=stream, name="orders", partitions=16)


def test_leadership_spreads_over_live_listeners_and_moves_when_one_dies(kafka, orders):
    second = kafka.listeners.start("k2", "--node-id", "2")
    deadline = time.monotonic() + 30
    while len(leaders(kafka.confluent())[0]) < 2:
        assert time.monotonic() < deadline, "the second listener never appeared"
        time.sleep(0.3)
    brokers, spread = leaders(kafka.confluent())
    assert 2 in brokers and set(spread.values()) == brokers  # both lead some partitions
    # Every listener answers alike, so clients agree whichever they ask.
    assert leaders(kafka.confluent(**{"bootstrap.servers": second}))[1] == spread
    kafka.listeners.stop("k2", kill=True)
    started = time.monotonic()
    while 2 in leaders(kafka.confluent())[0]:
        assert time.monotonic() - started < 10, "a dead listener stayed a broker"
        time.sleep(0.3)
    brokers, moved = leaders(kafka.confluent())
    assert set(moved.values()) == brokers == {next(iter(brokers))}
    unchanged = {p for p, leader in spread.items() if leader != 2}
    assert all(moved[p] == spread[p] for p in unchanged)  # only the dead one's partitions move


def test_a_listener_limited_to_a_cluster_serves_only_its_streams(kafka_listeners, owner,
                                                                orders):
    other = StreamFactory(cluster=ClusterFactory(name="c2"), name="apps", created_by=owner,
                          tenant=owner.memberships.get().tenant)
    TopicFactory(stream=other, name="orders")
    from tests.broker.conftest import KafkaEndpoint, sasl_token

    bootstrap = kafka_listeners.start("c2only", "--cluster", "c2")
    endpoint = KafkaEndpoint(bootstrap, "alice", sasl_token(owner), kafka_listeners)
    topics = AdminClient(endpoint.confluent()).list_topics(timeout=20).topics
    assert "/mapr/c2/apps:orders" in topics and TOPIC not in topics


def test_an_unknown_topic_id_gets_the_name_each_version_can_carry(kafka, orders):
    """By id (v10+): a topic's name is nullable from v12 on; before, "" (a null name would
    not encode, and the listener would drop the connection)."""
    wire = Wire(kafka.bootstrap)
    assert wire.authenticate(kafka.username, kafka.password).error_code == 0
    unknown = uuid.uuid4()
    for version, name in ((10, ""), (11, ""), (12, None)):
        [topic] = wire.call(3, version, topics=[{"name": None, "topic_id": unknown}],
                            allow_auto_topic_creation=False,
                            include_topic_authorized_operations=False).topics
        assert (topic.error_code, topic.name, topic.topic_id) == (100, name, unknown)
    wire.close()
