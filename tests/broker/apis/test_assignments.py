"""Manual replica assignments in CreateTopics and CreatePartitions with real admin clients: an
assignment naming each partition's leader among the live listeners is accepted and is what
Metadata then answers (one listener: its own node id); any other is refused with Kafka's error
and the reason, and creates nothing."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from broker.apis.metadata import key_of, leader_of
from broker.session import Node
from tests.factories import ClusterFactory, StreamFactory

pytestmark = pytest.mark.slow
NAME = "/mapr/c1/apps:placed"


def done(futures: dict) -> dict:  # type: ignore[type-arg]
    return {key: future.exception(timeout=30) for key, future in futures.items()}


def code(futures: dict) -> int:  # type: ignore[type-arg]
    [error] = done(futures).values()
    assert error is not None, "accepted"
    return error.args[0].code()


def brokers(admin: AdminClient, count: int = 1) -> list[int]:
    """The listeners' node ids once `count` of them answer in Metadata."""
    deadline = time.monotonic() + 30
    while len(found := sorted(admin.list_topics(timeout=10).brokers)) < count:
        assert time.monotonic() < deadline, f"brokers {found}, waiting for {count}"
        time.sleep(0.5)
    return found


def replicas(admin: AdminClient, name: str = NAME) -> dict[int, list[int]]:
    topic = admin.list_topics(name, timeout=10).topics[name]
    return {p.id: list(p.replicas) for p in topic.partitions.values()}


@pytest.fixture
def apps(owner):  # type: ignore[no-untyped-def]
    return StreamFactory(cluster=ClusterFactory(name="c1"), name="apps", created_by=owner,
                         tenant=owner.memberships.get().tenant)


def test_an_assignment_naming_the_listener_creates_and_grows_the_topic(kafka, apps):
    admin = AdminClient(kafka.confluent())
    [node] = brokers(admin)
    created = done(admin.create_topics([NewTopic(NAME, 3, replica_assignment=[[node]] * 3)]))
    assert created == {NAME: None}
    assert apps.topics.get(name="placed").partitions == 3
    grown = done(admin.create_partitions([NewPartitions(NAME, 5, replica_assignment=[[node]] * 2)]))
    assert grown == {NAME: None}
    assert replicas(admin) == {p: [node] for p in range(5)}


def test_assignments_kafka_refuses_are_refused_with_its_errors(kafka, apps):
    admin = AdminClient(kafka.confluent())
    [node] = brokers(admin)
    refused = {
        "unknown broker": [[node + 1000]],
        "a broker twice": [[node, node]],
        "a broker unknown in one partition": [[node], [node, node + 1000]],
    }
    for why, assignment in refused.items():
        topic = NewTopic(NAME, len(assignment), replica_assignment=assignment)
        futures = admin.create_topics([topic])
        assert code(futures) == KafkaError.INVALID_REPLICA_ASSIGNMENT, why
    assert not apps.topics.exists()
    apps.topics.create(name="placed", origin_uuid=apps.uuid, partitions=2)
    too_few = admin.create_partitions([NewPartitions(NAME, 4, replica_assignment=[[node]])])
    assert code(too_few) == KafkaError.INVALID_REPLICA_ASSIGNMENT
    assert apps.topics.get(name="placed").partitions == 2


def test_kafka_python_assignment_with_a_partition_count_is_an_invalid_request(kafka, apps):
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic as PyNewTopic
    from kafka.errors import InvalidRequestError

    admin = KafkaAdminClient(**kafka.kafka_python())
    try:
        node = next(iter(b.nodeId for b in admin._client.cluster.brokers()))
        with pytest.raises(InvalidRequestError, match="give -1 for both"):
            admin.create_topics([PyNewTopic(NAME, 1, 1, replica_assignments={0: [node]})])
        admin.create_topics([PyNewTopic(NAME, -1, -1, replica_assignments={0: [node],
                                                                            1: [node]})])
    finally:
        admin.close()
    assert apps.topics.get(name="placed").partitions == 2


def test_with_two_listeners_each_partition_must_name_its_leader(kafka, apps):
    kafka.listeners.start("k2")
    admin = AdminClient(kafka.confluent())
    nodes = brokers(admin, 2)
    live = [Node(n, "127.0.0.1", 0) for n in nodes]
    leaders = [leader_of(key_of(apps.uuid, "placed"), p, live) for p in range(8)]
    others = [[next(n for n in nodes if n != leader)] for leader in leaders]
    futures = admin.create_topics([NewTopic(NAME, 8, replica_assignment=others)])
    assert code(futures) == KafkaError.INVALID_REPLICA_ASSIGNMENT
    assert "led by broker" in str(done(futures)[NAME])
    assert not apps.topics.exists()
    assert done(admin.create_topics([NewTopic(NAME, 8, replica_assignment=[
        [leader] for leader in leaders])])) == {NAME: None}
    assert replicas(admin) == {p: [leader] for p, leader in enumerate(leaders)}
