"""Compacted topics through the Kafka protocol (issue 31), with confluent-kafka: keys
overwritten and deleted (tombstones), compacted by the domain's pass, consumed back with the
offsets' gaps and the latest values; a keyless record refused with INVALID_RECORD and nothing
written; the compaction settings as Kafka's topic configs."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from replication.models import Stream, Topic
from replication.services import stream_edit
from replication.services.compaction import stream_compact
from replication.stores import store_for
from tests.factories import ClusterFactory, StreamFactory, TopicFactory

pytestmark = pytest.mark.slow
NAME = "/mapr/kcompact/state:changelog"
LATER = 1 << 45  # a clock past every record's lag and tombstone retention


@pytest.fixture
def compacted_topic(owner, settings):
    settings.STORE_LAYOUT = "batches"  # the cluster's new store is a batch store
    stream = StreamFactory(cluster=ClusterFactory(name="kcompact"), name="state",
                           created_by=owner, tenant=owner.memberships.get().tenant)
    stream_edit(actor=owner, stream=stream, compact=True, deleteretention=1_000)
    topic = TopicFactory(stream=stream, name="changelog", partitions=1)
    store_for(stream.cluster).ensure_topic(stream.uuid, "changelog", 1)
    return topic


def _produce(kafka, records: list[tuple[bytes | None, bytes | None]], **conf) -> list:
    """Each record's delivery error (None: written)."""
    outcomes: list = []
    producer = Producer({**kafka.confluent(), "linger.ms": 50, "enable.idempotence": True,
                         **conf})
    for key, value in records:
        producer.produce(NAME, value, key, partition=0,
                         on_delivery=lambda err, _msg: outcomes.append(err))
    assert producer.flush(30) == 0
    return outcomes


def _consume(kafka, count: int) -> list[tuple[int, bytes | None, bytes | None]]:
    consumer = Consumer({**kafka.confluent(), "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(NAME, 0, 0)])
    got = []
    while len(got) < count:
        batch = consumer.consume(count - len(got), timeout=20)
        assert batch, f"only {len(got)} of {count} arrived"
        got += [m for m in batch if m.error() is None]
    consumer.close()
    return [(m.offset(), m.key(), m.value()) for m in got]


def test_a_consumer_sees_the_latest_value_per_key_with_the_offsets_gaps(kafka, compacted_topic):
    sent = [(b"k%d" % (i % 10), b"v%d" % i) for i in range(100)]
    sent += [(b"k3", None), (b"k4", None)]  # tombstones: k3 and k4 deleted
    sent += [(b"k5", b"last")]
    assert _produce(kafka, sent) == [None] * len(sent)
    stream = compacted_topic.stream
    done = stream_compact(stream=stream, now_ms=LATER)
    expected = {key: (offset, value) for offset, (key, value) in enumerate(sent)}
    kept = sorted((offset, key, value) for key, (offset, value) in expected.items()
                  if value is not None)
    assert done.removed == len(sent) - len(kept)
    assert _consume(kafka, len(kept)) == kept  # offsets as produced: gaps between them
    assert store_for(stream.cluster).watermarks(stream.uuid, "changelog") == {0: (0, 103)}


def test_tombstones_are_kept_null_until_the_delete_retention(kafka, compacted_topic):
    stream = compacted_topic.stream
    stream_edit(actor=stream.created_by, stream=stream, deleteretention=3_600_000)
    assert _produce(kafka, [(b"a", b"1"), (b"a", None), (b"b", b"")]) == [None] * 3
    stream_compact(stream=stream, now_ms=int(time.time() * 1000) + 1000)  # an hour to go
    assert _consume(kafka, 2) == [(1, b"a", None), (2, b"b", b"")]  # null stays null


def test_a_keyless_record_is_refused_with_invalid_record_and_nothing_is_written(
        kafka, compacted_topic):
    outcomes = _produce(kafka, [(b"a", b"1"), (None, b"keyless"), (b"b", b"2")],
                        **{"enable.idempotence": False, "retries": 0})
    assert {e.code() for e in outcomes if e is not None} == {KafkaError.INVALID_RECORD}
    stream = compacted_topic.stream
    assert store_for(stream.cluster).watermarks(stream.uuid, "changelog") == {0: (0, 0)}


def _configs(admin: AdminClient) -> dict[str, str]:
    resource = ConfigResource(ConfigResource.Type.TOPIC, NAME)
    return {n: e.value for n, e in admin.describe_configs([resource])[resource].result().items()}


def test_compaction_settings_are_kafkas_topic_configs(kafka, compacted_topic):
    admin = AdminClient(kafka.confluent())
    configs = _configs(admin)
    assert (configs["cleanup.policy"], configs["delete.retention.ms"]) == (
        "compact,delete", "1000")  # the stream's: compact, with the stream's ttl
    resource = ConfigResource(ConfigResource.Type.TOPIC, NAME, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("min.compaction.lag.ms", "60000",
                    incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)
    topic = Topic.objects.get(pk=compacted_topic.pk)  # the topic's own, not the stream's
    assert (topic.cleanuppolicy, topic.mincompactionlag) == ("compact", 60000)
    stream = Stream.objects.get(pk=compacted_topic.stream.pk)
    assert (stream.compact, stream.mincompactionlag) == (True, 0) and stream.ttl
    assert _configs(admin)["cleanup.policy"] == "compact"
    created = admin.create_topics([NewTopic("/mapr/kcompact/state:store-changelog", 1, 1,
                                            config={"cleanup.policy": "compact"})])
    created["/mapr/kcompact/state:store-changelog"].result(30)
    resource = ConfigResource(ConfigResource.Type.TOPIC, NAME, incremental_configs=[
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)
    assert Topic.objects.get(pk=compacted_topic.pk).policy == "delete"
    assert Stream.objects.get(pk=stream.pk).compact  # the stream's setting untouched
    resource = ConfigResource(ConfigResource.Type.TOPIC, NAME, incremental_configs=[
        ConfigEntry("delete.retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException, match="whole number of milliseconds"):
        admin.incremental_alter_configs([resource])[resource].result(30)
