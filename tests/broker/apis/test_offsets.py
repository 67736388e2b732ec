"""ListOffsets with real clients: partitions CreatePartitions added answer at once (empty, from
offset 0), and MAX_TIMESTAMP (KIP-734, ListOffsets v7) finds the record with the largest
timestamp, whatever its offset."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, OffsetSpec

from replication.services.defaultstreams import default_stream_set
from tests.broker.conftest import orders_topic

pytestmark = pytest.mark.slow
NAME = "/mapr/c1/apps:orders"


@pytest.fixture
def topic(owner):  # type: ignore[no-untyped-def]
    return orders_topic(owner, 2)


def _list(admin: AdminClient, spec: OffsetSpec, partitions: list[int]) -> dict[int, tuple]:
    futures = admin.list_offsets({TopicPartition(NAME, p): spec for p in partitions})
    found = {tp.partition: f.result(timeout=30) for tp, f in futures.items()}
    return {p: (info.offset, info.timestamp) for p, info in found.items()}


def test_partitions_added_by_create_partitions_answer_list_offsets(kafka, topic):
    admin = AdminClient(kafka.confluent())
    admin.create_partitions([NewPartitions(NAME, 4)])[NAME].result(timeout=30)
    assert {p: o for p, (o, _) in _list(admin, OffsetSpec.latest(), [0, 1, 2, 3]).items()} == {
        0: 0, 1: 0, 2: 0, 3: 0}
    assert _list(admin, OffsetSpec.earliest(), [3])[3][0] == 0
    consumer = Consumer(kafka.confluent(**{"group.id": "grown"}))
    try:
        assert consumer.get_watermark_offsets(TopicPartition(NAME, 3), timeout=20) == (0, 0)
    finally:
        consumer.close()


def test_kafka_python_sees_the_new_partitions_end_offsets(kafka, owner, topic):
    from kafka import KafkaConsumer
    from kafka import TopicPartition as PyTopicPartition

    default_stream_set(actor=owner, cluster="c1", path="/mapr/c1/apps")  # a plain name
    admin = AdminClient(kafka.confluent())
    admin.create_partitions([NewPartitions(NAME, 3)])[NAME].result(timeout=30)
    consumer = KafkaConsumer(**kafka.kafka_python())
    try:
        partition = PyTopicPartition("orders", 2)
        assert consumer.end_offsets([partition]) == {partition: 0}
        assert consumer.beginning_offsets([partition]) == {partition: 0}
    finally:
        consumer.close()


def test_max_timestamp_is_the_record_with_the_largest_timestamp(kafka, topic):
    producer = Producer(kafka.confluent())
    for ts in (1_000, 9_000, 4_000):
        producer.produce(NAME, b"v", partition=0, timestamp=ts)
    assert producer.flush(30) == 0
    admin = AdminClient(kafka.confluent())
    assert _list(admin, OffsetSpec.max_timestamp(), [0, 1]) == {0: (1, 9_000), 1: (-1, -1)}


def test_outsider_may_not_list_offsets_in_another_tenants_stream(kafka, outsider, topic):
    admin = AdminClient(kafka.as_user(outsider).confluent())
    with pytest.raises(KafkaException):
        _list(admin, OffsetSpec.latest(), [0])
