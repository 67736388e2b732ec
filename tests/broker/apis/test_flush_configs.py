"""flush.ms and flush.messages on a topic, with real admin clients (issue 29): the store commits
every write to disk before acknowledging it, so any value is always more than honoured. Kafka
3.x accepts them per topic; so does the listener, keeping the value given so that it is
described as set (tools that compare what they set with what they read see no drift), and
refusing what Kafka refuses (a negative flush.ms, flush.messages below 1) with the reason."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigSource,
    NewTopic,
)

from replication.models import Topic
from tests.broker.apis.test_configs import altered, apps, described, incremental, refusal

pytestmark = pytest.mark.slow
KAFKA_DEFAULT = str(2**63 - 1)
__all__ = ["apps"]  # the fixture, shared with test_configs


def test_flush_ms_is_kept_and_described_as_set(kafka, apps):
    admin = AdminClient(kafka.confluent())
    assert described(admin)["flush.ms"].value == KAFKA_DEFAULT
    altered(admin, {"compression.type": "gzip", "flush.ms": "12345678"})  # as librdkafka's 0081
    entry = described(admin)["flush.ms"]
    assert entry.value == "12345678" and not entry.is_read_only
    assert entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert Topic.objects.get(stream=apps, name="orders").flushms == 12345678
    apps.refresh_from_db()
    assert apps.compression == "zlib"


def test_delete_and_omission_go_back_to_kafkas_default(kafka, apps):
    admin = AdminClient(kafka.confluent())
    incremental(admin, ConfigEntry("flush.messages", "1000",
                                   incremental_operation=AlterConfigOpType.SET))
    assert described(admin)["flush.messages"].value == "1000"
    incremental(admin, ConfigEntry("flush.messages", None,
                                   incremental_operation=AlterConfigOpType.DELETE))
    entry = described(admin)["flush.messages"]
    assert (entry.value, entry.source) == (KAFKA_DEFAULT, ConfigSource.DEFAULT_CONFIG.value)
    altered(admin, {"flush.ms": "5"})
    altered(admin, {"message.timestamp.type": "CreateTime"})  # flush.ms left out: dropped
    assert Topic.objects.get(stream=apps, name="orders").flushms is None


def test_create_topics_keeps_flush_settings(kafka, apps):
    admin = AdminClient(kafka.confluent())
    name = "/mapr/c1/apps:flushed"
    admin.create_topics([NewTopic(name, 2, 1, config={
        "flush.ms": "0", "flush.messages": "1"})])[name].result(30)
    configs = described(admin, name)
    assert (configs["flush.ms"].value, configs["flush.messages"].value) == ("0", "1")


@pytest.mark.parametrize(("config", "value"), [
    ("flush.ms", "-5"), ("flush.messages", "0"), ("flush.ms", "soon"),
    ("flush.ms", str(2**63)),
])
def test_a_flush_value_kafka_refuses_is_refused_with_the_reason(kafka, apps, config, value):
    admin = AdminClient(kafka.confluent())
    error = refusal(incremental, admin, ConfigEntry(
        config, value, incremental_operation=AlterConfigOpType.SET))
    assert error.code() == KafkaError.INVALID_CONFIG and "give a whole number" in error.str()
    topic = Topic.objects.get(stream=apps, name="orders")
    assert (topic.flushms, topic.flushmessages) == (None, None)


def test_outsider_cannot_set_flush_on_another_tenants_topic(kafka, apps, outsider):
    admin = AdminClient(kafka.as_user(outsider).confluent())
    error = refusal(incremental, admin, ConfigEntry(
        "flush.ms", "100", incremental_operation=AlterConfigOpType.SET))
    assert error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert Topic.objects.get(stream=apps, name="orders").flushms is None


def test_a_member_without_topicperm_cannot_set_flush(kafka, apps, member):
    admin = AdminClient(kafka.as_user(member).confluent())
    error = refusal(incremental, admin, ConfigEntry(
        "flush.ms", "100", incremental_operation=AlterConfigOpType.SET))
    assert error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED and "topicperm" in error.str()
    assert Topic.objects.get(stream=apps, name="orders").flushms is None
