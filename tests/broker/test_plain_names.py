"""Plain Kafka names with every client the issue names (confluent-kafka, kafka-python, aiokafka,
kcat, kafkajs): each creates, produces and consumes `events` in its tenant's default stream,
and another tenant's `events` is another topic."""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from collections.abc import Callable

import pytest

from replication.models import Topic
from replication.services.defaultstreams import default_stream_set
from replication.stores import store_for
from tests.factories import ClusterFactory

pytestmark = pytest.mark.slow
TOPIC = "events"


def _confluent(endpoint, values: list[str]) -> list[str]:  # type: ignore[no-untyped-def]
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(endpoint.confluent())
    [created] = admin.create_topics([NewTopic(TOPIC, 2)]).values()
    created.result(20)
    producer = Producer(endpoint.confluent(**{"linger.ms": 5}))
    for value in values:
        producer.produce(TOPIC, value.encode(), key=value.encode())
    assert producer.flush(30) == 0
    consumer = Consumer(endpoint.confluent(**{
        "group.id": f"g-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest"}))
    consumer.subscribe([TOPIC])
    got: list[str] = []
    try:
        while len(got) < len(values):
            batch = consumer.consume(len(values) - len(got), timeout=20)
            assert batch, f"only {len(got)} of {len(values)} arrived"
            got += [msg.value().decode() for msg in batch if msg.error() is None]
    finally:
        consumer.close()
    return got


def _kafka_python(endpoint, values: list[str]) -> list[str]:  # type: ignore[no-untyped-def]
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(**endpoint.kafka_python())
    admin.create_topics([NewTopic(TOPIC, 2, 1)])
    admin.close()
    producer = KafkaProducer(**endpoint.kafka_python(acks="all"))
    for value in values:
        producer.send(TOPIC, value=value.encode(), key=value.encode())
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(TOPIC, **endpoint.kafka_python(
        group_id=f"g-{uuid.uuid4().hex[:6]}", auto_offset_reset="earliest",
        consumer_timeout_ms=20000))
    # values first: zip stops on them without waiting out the consumer for one more message
    got = [msg.value.decode() for _, msg in zip(values, consumer, strict=False)]
    consumer.close()
    return got


def _aiokafka(endpoint, values: list[str]) -> list[str]:  # type: ignore[no-untyped-def]
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    async def run() -> list[str]:
        admin = AIOKafkaAdminClient(**endpoint.kafka_python())
        await admin.start()
        await admin.create_topics([NewTopic(TOPIC, 2, 1)])
        await admin.close()
        producer = AIOKafkaProducer(**endpoint.kafka_python(acks="all"))
        await producer.start()
        for value in values:
            await producer.send_and_wait(TOPIC, value=value.encode(), key=value.encode())
        await producer.stop()
        consumer = AIOKafkaConsumer(TOPIC, **endpoint.kafka_python(
            group_id=f"g-{uuid.uuid4().hex[:6]}", auto_offset_reset="earliest"))
        await consumer.start()
        got: list[str] = []
        try:
            while len(got) < len(values):
                batches = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 20)
                got += [m.value.decode() for records in batches.values() for m in records]
        finally:
            await consumer.stop()
        return got

    return asyncio.run(run())


def _kcat(endpoint, values: list[str]) -> list[str]:  # type: ignore[no-untyped-def]
    # kcat has no create: its produce auto-creates, as the default stream allows
    sasl = ["-b", endpoint.bootstrap, "-X", "security.protocol=SASL_PLAINTEXT",
            "-X", "sasl.mechanisms=PLAIN", "-X", f"sasl.username={endpoint.username}",
            "-X", f"sasl.password={endpoint.password}", "-t", TOPIC]
    subprocess.run(["kcat", *sasl, "-P"], input="".join(f"{v}\n" for v in values), text=True,
                   capture_output=True, timeout=60, check=True)
    done = subprocess.run(["kcat", *sasl, "-C", "-o", "beginning", "-e", "-f", "%s\\n"],
                          text=True, capture_output=True, timeout=60, check=True)
    return done.stdout.split()


def _kafkajs(endpoint, values: list[str]) -> list[str]:  # type: ignore[no-untyped-def]
    def node(script: str, *args: str) -> dict:
        answer = endpoint.kafkajs(script, *args)
        assert "error" not in answer, answer
        return answer

    node("admin.js", TOPIC)
    prefix = values[0].rsplit("-", 1)[0]  # produce.js sends <prefix>-<i>, as the values are
    node("produce.js", TOPIC, str(len(values)), "none", prefix)
    got = node("consume.js", TOPIC, f"g-{uuid.uuid4().hex[:6]}", str(len(values)))
    return [m["value"] for m in got["messages"]]


CLIENTS: dict[str, Callable] = {"confluent-kafka": _confluent, "kafka-python": _kafka_python,
                                "aiokafka": _aiokafka, "kcat": _kcat, "kafkajs": _kafkajs}


@pytest.mark.parametrize("client", list(CLIENTS))
def test_client_creates_produces_and_consumes_plain_names_in_its_tenants_default_stream(
        kafka, owner, outsider, client):
    ClusterFactory(name="c1")
    default_stream_set(actor=owner, cluster="c1", path="/mapr/c1/kafka")
    default_stream_set(actor=outsider, cluster="c1", path="/mapr/c1/globex-kafka")
    run = CLIENTS[client]
    theirs = run(kafka.as_user(outsider), [f"theirs-{i}" for i in range(5)])
    mine = [f"mine-{i}" for i in range(10)]
    got = run(kafka, mine)
    assert sorted(got) == sorted(mine)  # alice reads hers only, all of them
    assert len(theirs) == 5 and not set(theirs) & set(got)
    stored = {}
    for topic in Topic.objects.filter(name=TOPIC).select_related("stream__cluster"):
        store = store_for(topic.stream.cluster)
        stored[topic.stream.path] = sum(
            len(store.read(topic.stream.uuid, TOPIC, p, 0)) for p in range(topic.partitions))
    assert stored == {"/mapr/c1/kafka": 10, "/mapr/c1/globex-kafka": 5}
