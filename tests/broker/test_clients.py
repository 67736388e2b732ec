"""Each real client (kcat, kafkajs, aiokafka; confluent-kafka and kafka-python in the other
modules) connects with SASL, sees MapR and plain names, creates topics where it may, and sees
nothing of another tenant's."""

from __future__ import annotations

import asyncio
import json
import subprocess

import pytest

from replication.models import Topic
from replication.services.defaultstreams import default_stream_set
from tests.factories import ClusterFactory, StreamFactory, TopicFactory

pytestmark = pytest.mark.slow


@pytest.fixture
def apps(owner):  # type: ignore[no-untyped-def]
    stream = StreamFactory(cluster=ClusterFactory(name="c1"), name="apps", created_by=owner,
                           tenant=owner.memberships.get().tenant)
    TopicFactory(stream=stream, name="orders", partitions=3)
    default_stream_set(actor=owner, cluster="c1", path="/mapr/c1/kafka")
    return stream


def kcat_metadata(endpoint) -> dict:  # type: ignore[no-untyped-def]
    done = subprocess.run(
        ["kcat", "-L", "-J", "-b", endpoint.bootstrap, "-X", "security.protocol=SASL_PLAINTEXT",
         "-X", "sasl.mechanisms=PLAIN", "-X", f"sasl.username={endpoint.username}",
         "-X", f"sasl.password={endpoint.password}", "-m", "20"],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_kcat_lists_brokers_and_topics_by_mapr_name(kafka, apps, outsider):
    metadata = kcat_metadata(kafka)
    topics = {t["topic"]: len(t["partitions"]) for t in metadata["topics"]}
    assert topics["/mapr/c1/apps:orders"] == 3
    assert [f"{b['name']}" for b in metadata["brokers"]] == [kafka.bootstrap]
    theirs = kcat_metadata(kafka.as_user(outsider))
    assert all("apps" not in t["topic"] for t in theirs["topics"])


def kafkajs(endpoint, *topics: str) -> dict:  # type: ignore[no-untyped-def]
    return endpoint.kafkajs("admin.js", *topics)


def test_kafkajs_creates_and_describes_mapr_and_plain_topics(kafka, apps):
    answer = kafkajs(kafka, "/mapr/c1/apps:views", "payments")
    assert answer.get("error") is None, answer
    assert {"/mapr/c1/apps:views", "payments", "/mapr/c1/apps:orders"} <= set(answer["listed"])
    described = {t["name"]: len(t["partitions"]) for t in answer["metadata"]["topics"]}
    assert described == {"/mapr/c1/apps:views": 2, "payments": 2}
    assert Topic.objects.filter(stream__path="/mapr/c1/kafka", name="payments").exists()


def test_kafkajs_outsider_cannot_create_in_another_tenants_stream(kafka, apps, outsider):
    answer = kafkajs(kafka.as_user(outsider), "/mapr/c1/apps:stolen")
    assert answer["type"] in ("UNKNOWN_TOPIC_OR_PARTITION", "KafkaJSAggregateError",
                              "KafkaJSCreateTopicError"), answer
    assert not Topic.objects.filter(name="stolen").exists()


def test_aiokafka_sees_plain_and_mapr_names_and_outsider_sees_neither(kafka, apps, outsider):
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    async def run(endpoint, create: bool) -> list[str]:  # type: ignore[no-untyped-def]
        admin = AIOKafkaAdminClient(**endpoint.kafka_python())
        await admin.start()
        try:
            if create:
                await admin.create_topics([NewTopic("invoices", 1, 1)])
            return await admin.list_topics()
        finally:
            await admin.close()

    mine = asyncio.run(run(kafka, True))
    assert {"invoices", "/mapr/c1/apps:orders"} <= set(mine)
    theirs = asyncio.run(run(kafka.as_user(outsider), False))
    assert "invoices" not in theirs and "/mapr/c1/apps:orders" not in theirs
