"""DeleteRecords, DescribeProducers and DescribeCluster with real admin clients (and the wire
where no Python client speaks the API), and ApiVersions advertising exactly what is served."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from kafka import KafkaAdminClient
from kafka.errors import OffsetOutOfRangeError
from kafka.structs import TopicPartition as PyTopicPartition

from replication.engine.store import Record
from replication.models import KafkaProducerId, Stream
from replication.services.messages import messages_produce
from replication.services.purge import watermarks
from replication.stores import store_for
from tests.broker.test_consumer_groups import wait_for
from tests.broker.test_group_apis import connect
from tests.factories import ClusterFactory, StreamFactory, TopicFactory

pytestmark = pytest.mark.slow
TOPIC = "/mapr/c1/apps:orders"
LEGAL = "__mapr.c1_sapps_corders"  # the same topic, spelled for kafka-python
NONE, UNKNOWN_TOPIC, TOPIC_AUTHORIZATION = 0, 3, 29


@pytest.fixture
def apps(owner):  # type: ignore[no-untyped-def]
    """alice's stream with orders: 2 partitions of 4 messages each."""
    stream = StreamFactory(cluster=ClusterFactory(name="c1"), name="apps", created_by=owner,
                           tenant=owner.memberships.get().tenant)
    TopicFactory(stream=stream, name="orders", partitions=2)
    messages_produce(actor=owner, stream=stream, topic="orders",
                     records=[Record(value=b"o", partition=p) for p in (0, 1) * 4])
    return stream


def marks(stream) -> dict[int, tuple[int, int]]:  # type: ignore[no-untyped-def]
    return watermarks(store_for(stream.cluster), stream.uuid, "orders")


def deleted(admin: AdminClient, *cuts: tuple[int, int]) -> dict[int, object]:
    """partition -> the new low watermark, or the Kafka error code."""
    futures = admin.delete_records([TopicPartition(TOPIC, p, o) for p, o in cuts])
    out: dict[int, object] = {}
    for tp, future in futures.items():
        try:
            out[tp.partition] = future.result(timeout=30).low_watermark
        except KafkaException as error:
            out[tp.partition] = error.args[0].code()
    return out


def test_confluent_delete_records_moves_the_low_watermark_as_stream_purge(kafka, apps):
    admin = AdminClient(kafka.confluent())
    assert deleted(admin, (0, 3), (1, -1)) == {0: 3, 1: 4}
    assert marks(apps) == {0: (3, 4), 1: (4, 4)}
    [earliest] = admin.list_offsets({TopicPartition(TOPIC, 0): OffsetSpec.earliest()}).values()
    assert earliest.result(timeout=30).offset == 3
    assert deleted(admin, (0, 9)) == {0: KafkaError.OFFSET_OUT_OF_RANGE}
    assert deleted(admin, (0, 1)) == {0: 3}  # below the low watermark: nothing moves
    assert marks(apps)[0] == (3, 4)


def test_kafka_python_delete_records(kafka, apps):
    admin = KafkaAdminClient(**kafka.kafka_python())
    try:
        result = admin.delete_records({PyTopicPartition(LEGAL, 1): 2})
        assert [r["low_watermark"] for r in result.values()] == [2]
        with pytest.raises(OffsetOutOfRangeError):
            admin.delete_records({PyTopicPartition(LEGAL, 0): 5})
    finally:
        admin.close()
    assert marks(apps) == {0: (0, 4), 1: (2, 4)}


def test_delete_records_needs_adminperm_and_another_tenants_topic_does_not_exist(
        kafka, apps, member, outsider):
    Stream.objects.filter(pk=apps.pk).update(consumeperm="u:alice | u:bob")  # bob reads it
    bob = AdminClient(kafka.as_user(member).confluent())
    assert deleted(bob, (0, 2)) == {0: KafkaError.TOPIC_AUTHORIZATION_FAILED}
    # librdkafka asks Metadata for the leader first and gives up there; the listener's own
    # answer, on the wire:
    answer = connect(kafka, outsider).call(21, 2, timeout=1000, topics=[
        {"name": TOPIC, "partitions": [{"partition_index": 0, "offset": 2}]}])
    assert [(p.error_code, p.low_watermark) for t in answer.topics for p in t.partitions] == [
        (UNKNOWN_TOPIC, -1)]
    assert marks(apps) == {0: (0, 4), 1: (0, 4)}


def producers(wire, *partitions: int) -> list[tuple]:  # type: ignore[no-untyped-def]
    answer = wire.call(61, 0, topics=[{"name": TOPIC, "partition_indexes": list(partitions)}])
    return [(p.partition_index, p.error_code,
             [(s.producer_id, s.producer_epoch, s.last_sequence, s.last_timestamp > 0)
              for s in p.active_producers])
            for t in answer.topics for p in t.partitions]


def test_describe_producers_shows_each_idempotent_producers_state(kafka, owner, member,
                                                                  outsider, apps):
    producer = Producer(kafka.confluent(**{"enable.idempotence": True, "linger.ms": 0}))
    for value in (b"a", b"b", b"c"):
        producer.produce(TOPIC, value, partition=0)
        assert producer.flush(30) == 0  # one batch each: sequences 0, 1, 2
    pid = KafkaProducerId.objects.get(user=owner).pk
    assert producers(connect(kafka, owner), 0, 1, 7) == [
        (0, NONE, [(pid, 0, 2, True)]), (1, NONE, []), (7, UNKNOWN_TOPIC, [])]
    assert producers(connect(kafka, member), 0) == [(0, TOPIC_AUTHORIZATION, [])]
    assert producers(connect(kafka, outsider), 0) == [(0, UNKNOWN_TOPIC, [])]


def test_describe_cluster_shows_the_live_listeners(kafka):
    second = kafka.listeners.start("k2")
    admin = AdminClient(kafka.confluent())

    def described() -> object:
        return admin.describe_cluster(include_authorized_operations=True).result(timeout=30)

    wait_for(lambda: len(described().nodes) == 2, "both listeners live", kafka)
    cluster = described()
    assert cluster.cluster_id == "streamgate"
    ports = sorted(node.port for node in cluster.nodes)
    assert ports == sorted(int(b.rsplit(":", 1)[1]) for b in (kafka.bootstrap, second))
    assert cluster.controller.id in {node.id for node in cluster.nodes}
    assert sorted(op.name for op in cluster.authorized_operations) == [
        "DESCRIBE", "DESCRIBE_CONFIGS", "IDEMPOTENT_WRITE"]
    py = KafkaAdminClient(**kafka.kafka_python())
    try:
        described = py.describe_cluster()
        assert described["cluster_id"] == "streamgate" and len(described["brokers"]) == 2
    finally:
        py.close()


def test_api_versions_advertise_the_admin_apis_served_and_no_others(kafka, owner):
    wire = connect(kafka, owner)
    answer = wire.call(18, 3, client_software_name="t", client_software_version="1")
    keys = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
    assert {key: keys[key] for key in (15, 16, 21, 42, 47, 60, 61)} == {
        15: (0, 5), 16: (0, 5), 21: (0, 2), 42: (0, 2), 47: (0, 0), 60: (0, 1), 61: (0, 0)}
    assert {key: keys[key] for key in (29, 30, 31)} == {29: (1, 3), 30: (1, 3), 31: (1, 3)}
    assert {key: keys[key] for key in (68, 69)} == {68: (1, 1), 69: (0, 0)}  # KIP-848
    assert {key: keys[key] for key in (24, 25, 26, 28, 65, 66)} == {  # transactions
        24: (0, 3), 25: (0, 3), 26: (0, 3), 28: (0, 3), 65: (0, 0), 66: (0, 1)}
    assert not keys.keys() & {48, 49}  # client quotas
