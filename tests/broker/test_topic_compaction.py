"""Per-topic compaction through the Kafka protocol (issue 31), with confluent-kafka's admin
client as quixstreams and faust use it: a compacted changelog created by CreateTopics beside a
delete-policy topic of the same stream, each shown by DescribeConfigs with its source (the
topic's override or the stream's setting), keyless records refused on the changelog only, the
compactor and the ttl each honouring the topic's policy, and IncrementalAlterConfigs' DELETE
and AlterConfigs' omission going back to the stream's setting."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)

from replication.models import Topic
from replication.services.compaction import stream_compact
from replication.services.purge import stream_expire
from replication.stores import store_for
from tests.factories import ClusterFactory, StreamFactory

pytestmark = pytest.mark.slow
STREAM = "/mapr/ktopics/app"
CHANGELOG, EVENTS = f"{STREAM}:changelog-counts", f"{STREAM}:events"
LATER = 1 << 45  # a clock past every record's lag, tombstone retention and ttl


@pytest.fixture
def app(owner, settings):
    settings.STORE_LAYOUT = "batches"  # the cluster's new store is a batch store
    stream = StreamFactory(cluster=ClusterFactory(name="ktopics"), name="app", created_by=owner,
                           tenant=owner.memberships.get().tenant, ttl=3600)
    stream.topics.create(name="events", origin_uuid=stream.uuid, partitions=1)
    store_for(stream.cluster).ensure_topic(stream.uuid, "events", 1)
    return stream


def described(admin: AdminClient, name: str) -> dict[str, ConfigEntry]:
    [future] = admin.describe_configs([ConfigResource("topic", name)]).values()
    return future.result(timeout=30)


def incremental(admin: AdminClient, name: str, *entries: ConfigEntry) -> None:
    resource = ConfigResource("topic", name, incremental_configs=list(entries))
    [future] = admin.incremental_alter_configs([resource]).values()
    future.result(timeout=30)


def produce(kafka, topic: str, records: list[tuple[bytes | None, bytes]]) -> list:
    """Each record's delivery error (None: written)."""
    outcomes: list = []
    producer = Producer({**kafka.confluent(), "linger.ms": 20, "retries": 0})
    for key, value in records:
        producer.produce(topic, value, key, partition=0,
                         on_delivery=lambda err, _msg: outcomes.append(err))
    assert producer.flush(30) == 0
    return outcomes


def create_changelog(admin: AdminClient) -> None:
    made = admin.create_topics([NewTopic(CHANGELOG, 1, 1, config={
        "cleanup.policy": "compact", "delete.retention.ms": "1000"})])
    made[CHANGELOG].result(30)


def test_a_changelog_created_compacted_sits_beside_a_delete_topic(kafka, app):
    admin = AdminClient(kafka.confluent())
    create_changelog(admin)
    changelog, events = described(admin, CHANGELOG), described(admin, EVENTS)
    assert changelog["cleanup.policy"].value == "compact"
    assert changelog["cleanup.policy"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert changelog["delete.retention.ms"].value == "1000"
    assert changelog["min.compaction.lag.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert events["cleanup.policy"].value == "delete"
    assert events["cleanup.policy"].source == ConfigSource.DEFAULT_CONFIG.value
    assert not app.compact  # the stream itself is not compacted
    # keys: needed on the changelog only
    refused = produce(kafka, CHANGELOG, [(None, b"keyless")])
    assert [e.code() for e in refused] == [KafkaError.INVALID_RECORD]
    assert produce(kafka, EVENTS, [(None, b"keyless")] * 3) == [None] * 3
    sent = [(b"k%d" % (i % 2), b"%d" % i) for i in range(6)]
    assert produce(kafka, CHANGELOG, sent) == [None] * 6
    # the compactor takes the changelog, the ttl the events topic only
    done = stream_compact(stream=app, now_ms=LATER)
    assert (done.partitions, done.removed) == (1, 4)
    assert stream_expire(stream=app, now_ms=LATER) == 3
    marks = {name: store_for(app.cluster).watermarks(app.uuid, name)
             for name in ("changelog-counts", "events")}
    assert marks == {"changelog-counts": {0: (0, 6)}, "events": {0: (3, 3)}}


def test_incremental_delete_goes_back_to_the_streams_setting(kafka, app):
    admin = AdminClient(kafka.confluent())
    create_changelog(admin)
    incremental(admin, CHANGELOG, ConfigEntry(
        "min.cleanable.dirty.ratio", "0.1", incremental_operation=AlterConfigOpType.SET))
    assert Topic.objects.get(name="changelog-counts").mincleanabledirtyratio == 0.1
    incremental(admin, CHANGELOG,
                ConfigEntry("cleanup.policy", "", incremental_operation=AlterConfigOpType.DELETE),
                ConfigEntry("min.cleanable.dirty.ratio", "",
                            incremental_operation=AlterConfigOpType.DELETE))
    topic = Topic.objects.get(name="changelog-counts")
    assert (topic.cleanuppolicy, topic.mincleanabledirtyratio) == ("", None)
    assert topic.deleteretention == 1000  # left as it was
    assert described(admin, CHANGELOG)["cleanup.policy"].value == "delete"  # the stream's
    assert produce(kafka, CHANGELOG, [(None, b"keyless")]) == [None]


def test_a_streams_compaction_shows_as_the_default_its_topics_take(kafka, app):
    admin = AdminClient(kafka.confluent())
    app.compact = True
    app.save()
    incremental(admin, EVENTS, ConfigEntry("cleanup.policy", "delete",
                                           incremental_operation=AlterConfigOpType.SET))
    create_changelog(admin)  # compact only: the stream is compact,delete (it has a ttl)
    changelog, events = described(admin, CHANGELOG), described(admin, EVENTS)
    assert changelog["cleanup.policy"].value == "compact"  # its own: the stream's has a ttl
    assert events["cleanup.policy"].value == "delete"
    assert events["cleanup.policy"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert changelog["delete.retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    incremental(admin, CHANGELOG, ConfigEntry("cleanup.policy", "",
                                              incremental_operation=AlterConfigOpType.DELETE))
    entry = described(admin, CHANGELOG)["cleanup.policy"]
    assert (entry.value, entry.source) == (
        "compact,delete", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    assert produce(kafka, EVENTS, [(None, b"keyless")]) == [None]


def test_alter_configs_drops_the_overrides_it_leaves_out(kafka, app):
    admin = AdminClient(kafka.confluent())
    resource = ConfigResource("topic", EVENTS, set_config={
        "cleanup.policy": "compact,delete", "min.compaction.lag.ms": "5000"})
    [future] = admin.alter_configs([resource]).values()
    future.result(timeout=30)
    topic = Topic.objects.get(name="events")
    assert (topic.policy, topic.mincompactionlag) == ("compact,delete", 5000)
    resource = ConfigResource("topic", EVENTS, set_config={"retention.ms": "3600000"})
    [future] = admin.alter_configs([resource]).values()
    future.result(timeout=30)
    topic = Topic.objects.get(name="events")
    assert (topic.cleanuppolicy, topic.mincompactionlag) == ("", None)
