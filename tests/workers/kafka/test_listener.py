"""The listener with real clients: SASL/PLAIN with an API token, ApiVersions, Metadata."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from tests.factories import ClusterFactory, StreamFactory, TopicFactory

pytestmark = pytest.mark.slow


def list_topics(config: dict, topic: str | None = None):  # type: ignore[no-untyped-def]
    return AdminClient(config).list_topics(topic=topic, timeout=20)


def test_confluent_admin_lists_topics_by_mapr_name_after_sasl(kafka, owner):
    stream = StreamFactory(cluster=ClusterFactory(name="c1"), name="apps", created_by=owner,
                           tenant=owner.memberships.get().tenant)
    TopicFactory(stream=stream, name="orders", partitions=3)
    metadata = list_topics(kafka.confluent())
    assert "/mapr/c1/apps:orders" in metadata.topics
    assert len(metadata.topics["/mapr/c1/apps:orders"].partitions) == 3
    broker = next(iter(metadata.brokers.values()))
    assert f"{broker.host}:{broker.port}" == kafka.bootstrap


def test_wrong_token_fails_authentication_with_kafkas_error(kafka, owner):
    seen: list[KafkaError] = []
    config = kafka.confluent(**{"sasl.password": "not-a-token", "error_cb": seen.append})
    producer = Producer(config)
    with pytest.raises(KafkaException):
        producer.list_topics(timeout=5)
    producer.poll(1)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in seen)
    assert "API tokens" in str(seen[0])
    assert "sasl_authentication_failed" in kafka.listeners.log()


def test_outsider_does_not_see_another_tenants_topics(kafka, owner, outsider):
    stream = StreamFactory(cluster=ClusterFactory(name="c1"), name="apps", created_by=owner,
                           tenant=owner.memberships.get().tenant)
    TopicFactory(stream=stream, name="orders")
    metadata = list_topics(kafka.as_user(outsider).confluent())
    assert "/mapr/c1/apps:orders" not in metadata.topics
    named = list_topics(kafka.as_user(outsider).confluent(), "/mapr/c1/apps:orders")
    assert named.topics["/mapr/c1/apps:orders"].error is not None
