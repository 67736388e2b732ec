"""OffsetCommit and OffsetFetch with real clients: any offset a consumer commits is kept as
committed (past the end, before the start, back), with its metadata string and leader epoch,
as Kafka keeps them; the REST cursor list shows the same cursor."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from replication.engine.store import Record
from replication.services.cursors import cursor_report
from replication.services.messages import messages_produce
from replication.services.purge import stream_purge
from tests.factories import ClusterFactory, StreamFactory, TopicFactory

pytestmark = pytest.mark.slow
TOPIC = "/mapr/c1/apps:orders"


@pytest.fixture
def orders(owner):  # type: ignore[no-untyped-def]
    stream = StreamFactory(cluster=ClusterFactory(name="c1"), name="apps", created_by=owner,
                           tenant=owner.memberships.get().tenant)
    TopicFactory(stream=stream, name="orders", partitions=2)
    messages_produce(actor=owner, stream=stream, topic="orders",
                     records=[Record(value=b"x", partition=0)] * 4)
    return stream


def _consumer(kafka, group: str = "billing") -> Consumer:  # type: ignore[no-untyped-def]
    return Consumer(kafka.confluent(**{"group.id": group, "enable.auto.commit": False}))


def _committed(consumer: Consumer, partitions=(0, 1)) -> list[tuple[int, str | None]]:  # type: ignore[no-untyped-def]
    found = consumer.committed([TopicPartition(TOPIC, p) for p in partitions], timeout=30)
    return [(tp.offset, tp.metadata) for tp in found]


def test_confluent_commit_keeps_any_offset_and_its_metadata(kafka, owner, orders):
    consumer = _consumer(kafka)
    try:
        assert _committed(consumer) == [(-1001, None), (-1001, None)]  # nothing committed yet
        consumer.commit(offsets=[TopicPartition(TOPIC, 0, 900, "Hello world!"),
                                 TopicPartition(TOPIC, 1, 42, "some_metadata")],
                        asynchronous=False)
        assert _committed(consumer) == [(900, "Hello world!"), (42, "some_metadata")]
        consumer.commit(offsets=[TopicPartition(TOPIC, 0, 1)], asynchronous=False)  # back
        assert _committed(consumer, [0]) == [(1, None)]  # no metadata given: none kept
    finally:
        consumer.close()
    rows = cursor_report(actor=owner, stream=orders, group="billing")
    assert sorted((r.partition, r.committed) for r in rows) == [(0, 1), (1, 42)]


def test_a_commit_keeps_its_leader_epoch_as_kafka_does(kafka, orders):
    consumer = _consumer(kafka)
    try:
        consumer.commit(offsets=[TopicPartition(TOPIC, 0, 3, leader_epoch=2),
                                 TopicPartition(TOPIC, 1, 7)], asynchronous=False)
        found = consumer.committed([TopicPartition(TOPIC, p) for p in (0, 1)], timeout=30)
        assert [(tp.offset, tp.leader_epoch) for tp in found] == [(3, 2), (7, None)]
    finally:
        consumer.close()


def test_a_commit_before_the_log_start_is_kept(kafka, owner, orders):
    stream_purge(actor=owner, stream=orders, everything=True)  # the log now starts at 4
    consumer = _consumer(kafka)
    try:
        consumer.commit(offsets=[TopicPartition(TOPIC, 0, 2, "old")], asynchronous=False)
        assert _committed(consumer, [0]) == [(2, "old")]
    finally:
        consumer.close()


def test_metadata_larger_than_kafkas_limit_is_refused(kafka, orders):
    consumer = _consumer(kafka)
    try:
        with pytest.raises(KafkaException) as refused:
            consumer.commit(offsets=[TopicPartition(TOPIC, 0, 1, "x" * 4097)],
                            asynchronous=False)
        assert refused.value.args[0].code() == KafkaError.OFFSET_METADATA_TOO_LARGE
        assert _committed(consumer, [0]) == [(-1001, None)]
    finally:
        consumer.close()


def test_kafka_python_commits_and_reads_back_metadata_holding_nul(kafka, orders):
    from kafka import KafkaConsumer
    from kafka import TopicPartition as PyTopicPartition
    from kafka.structs import OffsetAndMetadata

    consumer = KafkaConsumer(**kafka.kafka_python(group_id="python", enable_auto_commit=False))
    try:
        partition = PyTopicPartition(TOPIC, 1)
        consumer.commit({partition: OffsetAndMetadata(77, "Hello\0world!", -1)})
        assert consumer.committed(partition, metadata=True).offset == 77
        assert consumer.committed(partition, metadata=True).metadata == "Hello\0world!"
    finally:
        consumer.close()


def test_outsider_may_not_commit_in_another_tenants_stream(kafka, outsider, orders):
    consumer = _consumer(kafka.as_user(outsider))
    try:
        with pytest.raises(KafkaException):
            consumer.commit(offsets=[TopicPartition(TOPIC, 0, 1, "m")], asynchronous=False)
    finally:
        consumer.close()
