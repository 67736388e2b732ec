"""API token scopes on the Kafka listener (SASL/PLAIN with the token as the password), with
confluent-kafka: a read-only token fetches but may not produce, commit, create topics or change
credentials; a produce token produces and commits; the refusals are Kafka's authorization
error codes, naming the token's scope where the response carries a message."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from accounts.models import ScramCredential
from accounts.tokens import issue_token
from replication.stores import store_for
from tests.broker.conftest import KafkaEndpoint, orders_topic

pytestmark = pytest.mark.slow
NAME = "/mapr/c1/apps:orders"


@pytest.fixture
def topic(owner):
    return orders_topic(owner, 1)


def scoped(kafka: KafkaEndpoint, user, scope: str) -> dict:  # type: ignore[no-untyped-def]
    secret = issue_token(user, name=f"{scope} for kafka", scope=scope)[1]
    return KafkaEndpoint(kafka.bootstrap, user.get_username(), secret, kafka.listeners).confluent()


def produce(config: dict, value: bytes) -> KafkaError | None:
    reports: list = []
    producer = Producer({**config, "message.timeout.ms": 5000})
    producer.produce(NAME, value, partition=0, on_delivery=lambda err, _: reports.append(err))
    assert producer.flush(30) == 0
    return reports[0]


def fetch_and_commit(config: dict) -> tuple[list[bytes], KafkaException | None]:
    consumer = Consumer({**config, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(NAME, 0, 0)])
    try:
        got = [m.value() for m in consumer.consume(1, timeout=20)]
        try:
            consumer.commit(offsets=[TopicPartition(NAME, 0, 1)], asynchronous=False)
        except KafkaException as refused:
            return got, refused
        return got, None
    finally:
        consumer.close()


def test_a_read_only_token_fetches_but_may_not_produce_or_commit(kafka, topic, owner):
    assert produce(kafka.confluent(), b"by an admin token") is None  # a token made before scopes
    reader = scoped(kafka, owner, "read")
    refused = produce(reader, b"by the reader")
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    got, commit_refused = fetch_and_commit(reader)
    assert got == [b"by an admin token"]
    assert commit_refused is not None
    assert "TOPIC_AUTHORIZATION_FAILED" in str(commit_refused)
    assert store_for(topic.stream.cluster).watermarks(topic.stream.uuid, "orders")[0] == (0, 1)


def test_a_produce_token_produces_and_commits(kafka, topic, owner):
    producer = scoped(kafka, owner, "produce")
    assert produce(producer, b"by the producer") is None
    got, commit_refused = fetch_and_commit(producer)
    assert got == [b"by the producer"] and commit_refused is None


def test_a_read_only_token_may_not_create_topics_nor_change_credentials(kafka, topic, owner):
    admin = AdminClient(scoped(kafka, owner, "read"))
    created = admin.create_topics([NewTopic("/mapr/c1/apps:new", 1, 1)])
    with pytest.raises(KafkaException) as refused:
        created["/mapr/c1/apps:new"].result(30)
    error = refused.value.args[0]
    assert error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert "scope is read-only" in str(error) and "needs the admin scope" in str(error)
    upsert = UserScramCredentialUpsertion(
        "alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), b"pw")
    future = admin.alter_user_scram_credentials([upsert])["alice"]
    with pytest.raises(KafkaException) as refused:
        future.result(30)
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    assert not ScramCredential.objects.exists()
    assert list(topic.stream.topics.values_list("name", flat=True)) == ["orders"]


def test_an_outsiders_admin_token_still_reaches_nothing(kafka, topic, outsider):
    refused = produce(scoped(kafka, outsider, "admin"), b"x")
    assert refused is not None
