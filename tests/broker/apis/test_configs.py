"""AlterConfigs and IncrementalAlterConfigs with real admin clients: topic configs land on the
stream's and the topic's settings through stream_edit and topic_edit (adminperm, topicperm),
what cannot be set is refused with INVALID_CONFIG and the reason, validate_only changes
nothing, and DescribeConfigs then shows the new values and where they come from."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
)

from replication.models import Stream, Topic
from replication.services.defaultstreams import default_stream_set
from replication.stores import store_for
from tests.factories import ClusterFactory, StreamFactory

pytestmark = pytest.mark.slow
NAME = "/mapr/c1/apps:orders"


@pytest.fixture
def apps(owner):  # type: ignore[no-untyped-def]
    stream = StreamFactory(cluster=ClusterFactory(name="c1"), name="apps", created_by=owner,
                           tenant=owner.memberships.get().tenant, ttl=3600)
    stream.topics.create(name="orders", origin_uuid=stream.uuid, partitions=1)
    return stream


def described(admin: AdminClient, name: str = NAME) -> dict[str, ConfigEntry]:
    [future] = admin.describe_configs([ConfigResource("topic", name)]).values()
    return future.result(timeout=30)


def altered(admin: AdminClient, configs: dict[str, str], **options: object) -> None:
    resource = ConfigResource("topic", NAME, set_config=configs)
    [future] = admin.alter_configs([resource], **options).values()
    future.result(timeout=30)


def incremental(admin: AdminClient, *entries: ConfigEntry, **options: object) -> None:
    resource = ConfigResource("topic", NAME, incremental_configs=list(entries))
    [future] = admin.incremental_alter_configs([resource], **options).values()
    future.result(timeout=30)


def refusal(call, *args: object) -> KafkaError:  # type: ignore[no-untyped-def]
    with pytest.raises(KafkaException) as refused:
        call(*args)
    return refused.value.args[0]


def test_alter_configs_round_trip_sets_the_streams_ttl(kafka, apps):
    admin = AdminClient(kafka.confluent())
    everything = {name: entry.value for name, entry in described(admin).items()}
    altered(admin, {**everything, "retention.ms": "7200000"})  # as librdkafka's tests do
    apps.refresh_from_db()
    assert apps.ttl == 7200
    entry = described(admin)["retention.ms"]
    assert entry.value == "7200000" and not entry.is_read_only
    assert entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert described(admin)["max.message.bytes"].is_read_only


def test_alter_configs_reverts_what_it_leaves_out_as_kafka_does(kafka, apps):
    admin = AdminClient(kafka.confluent())
    altered(admin, {"message.timestamp.type": "LogAppendTime"})
    apps.refresh_from_db()
    assert apps.ttl == 604800  # a new stream's ttl: retention.ms was left out
    assert Topic.objects.get(stream=apps, name="orders").timestamptype == "logappendtime"
    assert described(admin)["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value


def test_incremental_alter_sets_and_deletes_each_config(kafka, apps):
    admin = AdminClient(kafka.confluent())
    incremental(admin, ConfigEntry("compression.type", "gzip",
                                   incremental_operation=AlterConfigOpType.SET),
                ConfigEntry("message.timestamp.type", "LogAppendTime",
                            incremental_operation=AlterConfigOpType.SET),
                ConfigEntry("cleanup.policy", "delete",
                            incremental_operation=AlterConfigOpType.APPEND))
    apps.refresh_from_db()
    assert (apps.compression, apps.ttl) == ("zlib", 3600)  # gzip is the stream's zlib
    assert described(admin)["message.timestamp.type"].value == "LogAppendTime"
    incremental(admin, ConfigEntry("retention.ms", None,
                                   incremental_operation=AlterConfigOpType.DELETE))
    apps.refresh_from_db()
    assert apps.ttl == 604800


@pytest.mark.parametrize(("config", "value", "reason"), [
    ("max.message.bytes", "10", "STREAMGATE_MAX_MESSAGE_BYTES"),
    ("retention.ms", "1500", "whole seconds"),
    ("compression.type", "zstd", "is not one a stream keeps"),
    ("cleanup.policy", "shred", "is not one of compact, compact,delete, delete"),
    ("min.compaction.lag.ms", "-5", "whole number of milliseconds"),
    ("min.cleanable.dirty.ratio", "1.5", "from 0 to 1"),
    ("segment.bytes", "1024", "is not supported"),
    ("message.format.version", "banana", "is not a Kafka version"),
])
def test_a_config_that_cannot_be_set_is_refused_with_the_reason(kafka, apps, config, value,
                                                                 reason):
    admin = AdminClient(kafka.confluent())
    error = refusal(incremental, admin, ConfigEntry(
        config, value, incremental_operation=AlterConfigOpType.SET))
    assert error.code() == KafkaError.INVALID_CONFIG and reason in error.str()
    apps.refresh_from_db()
    assert (apps.ttl, apps.compression) == (3600, "lz4")


def test_compaction_on_a_row_store_is_refused_naming_the_conversion(kafka, owner, settings):
    settings.STORE_LAYOUT = "rows"  # a cluster whose store predates the batch layout
    stream = StreamFactory(cluster=ClusterFactory(name="rowsconf"), name="apps",
                           created_by=owner, tenant=owner.memberships.get().tenant)
    stream.topics.create(name="orders", origin_uuid=stream.uuid, partitions=1)
    assert not store_for(stream.cluster).KEEPS_BATCHES  # made here, before the listener opens it
    admin = AdminClient(kafka.confluent())
    resource = ConfigResource("topic", "/mapr/rowsconf/apps:orders", incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])
    error = refusal(lambda: next(iter(admin.incremental_alter_configs([resource]).values()))
                    .result(timeout=30))
    assert error.code() == KafkaError.INVALID_CONFIG and "manage.py convertstores" in error.str()
    stream.refresh_from_db()
    assert not stream.compact


def test_append_applies_only_to_list_configs(kafka, apps):
    admin = AdminClient(kafka.confluent())
    error = refusal(incremental, admin, ConfigEntry(
        "retention.ms", "1000", incremental_operation=AlterConfigOpType.APPEND))
    assert error.code() == KafkaError.INVALID_CONFIG and "not a list" in error.str()


def test_validate_only_changes_nothing(kafka, apps):
    admin = AdminClient(kafka.confluent())
    altered(admin, {"retention.ms": "-1", "compression.type": "uncompressed"},
            validate_only=True)
    incremental(admin, ConfigEntry("message.timestamp.type", "LogAppendTime",
                                   incremental_operation=AlterConfigOpType.SET),
                validate_only=True)
    apps.refresh_from_db()
    assert (apps.ttl, apps.compression) == (3600, "lz4")
    assert Topic.objects.get(stream=apps, name="orders").timestamptype == "createtime"


def test_message_format_version_is_accepted_and_ignored_as_kafka_3_does(kafka, apps):
    admin = AdminClient(kafka.confluent())
    everything = {name: entry.value for name, entry in described(admin).items()}
    altered(admin, {**everything, "message.format.version": "0.10.0.0"})
    apps.refresh_from_db()
    assert (apps.ttl, apps.compression) == (3600, "lz4")


def test_broker_configs_are_refused_as_kafka_refuses_a_client_without_alter_configs(
        kafka, apps):
    admin = AdminClient(kafka.confluent())
    [node] = admin.list_topics(timeout=30).brokers  # librdkafka sends it to that broker
    resource = ConfigResource("broker", str(node), set_config={"log.retention.ms": "1000"})
    incremental = ConfigResource("broker", str(node), incremental_configs=[ConfigEntry(
        "background.threads", "9", incremental_operation=AlterConfigOpType.SET)])
    for futures in (admin.alter_configs([resource]), admin.incremental_alter_configs(
            [incremental])):
        [future] = futures.values()
        with pytest.raises(KafkaException) as refused:
            future.result(timeout=30)
        error = refused.value.args[0]
        assert error.code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
        assert "no config a client may set" in error.str()


def test_stream_settings_need_adminperm_and_the_topics_topicperm(kafka, apps, member):
    Stream.objects.filter(pk=apps.pk).update(topicperm="u:alice | u:bob")
    admin = AdminClient(kafka.as_user(member).confluent())
    error = refusal(incremental, admin, ConfigEntry(
        "retention.ms", "60000", incremental_operation=AlterConfigOpType.SET))
    assert error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED and "adminperm" in error.str()
    incremental(admin, ConfigEntry("message.timestamp.type", "LogAppendTime",
                                   incremental_operation=AlterConfigOpType.SET))
    assert Topic.objects.get(stream=apps, name="orders").timestamptype == "logappendtime"
    apps.refresh_from_db()
    assert apps.ttl == 3600


def test_outsider_cannot_alter_another_tenants_topic(kafka, apps, outsider):
    admin = AdminClient(kafka.as_user(outsider).confluent())
    error = refusal(incremental, admin, ConfigEntry(
        "retention.ms", "60000", incremental_operation=AlterConfigOpType.SET))
    assert error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    apps.refresh_from_db()
    assert apps.ttl == 3600


def test_kafka_python_alters_and_describes_a_plain_topic(kafka, owner, apps):
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource as PyConfigResource
    from kafka.admin import ConfigResourceType

    default_stream_set(actor=owner, cluster="c1", path="/mapr/c1/apps")
    admin = KafkaAdminClient(**kafka.kafka_python())
    try:
        admin.alter_configs([PyConfigResource(ConfigResourceType.TOPIC, "orders", configs={
            "retention.ms": "120000", "compression.type": "lz4"})])
        apps.refresh_from_db()
        assert apps.ttl == 120
        [response] = admin.describe_configs([PyConfigResource(ConfigResourceType.TOPIC,
                                                              "orders")])
        configs = {c[0]: c[1] for c in response.resources[0][4]}
        assert configs["retention.ms"] == "120000"
    finally:
        admin.close()
