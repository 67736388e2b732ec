"""kafka-python and aiokafka produce and consume through the listener with every codec,
keys and headers (topics named by their Kafka-legal spelling, which both clients accept)."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTopicPartition

from replication.names import kafka_legal_name
from tests.broker.conftest import orders_topic

pytestmark = pytest.mark.slow
CODECS = [None, "gzip", "snappy", "lz4", "zstd"]


@pytest.fixture
def topic(owner):
    return orders_topic(owner, 2)


def _sent(codec: str | None) -> list[tuple[bytes, bytes, list]]:
    return [(b"%s-%d" % ((codec or "none").encode(), i) * 10, b"key%d" % (i % 5),
             [("h", b"%d" % i)]) for i in range(120)]


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_produces_and_consumes_with_every_codec(kafka, topic, codec):
    name = kafka_legal_name(topic.stream.path, "orders")
    producer = KafkaProducer(**kafka.kafka_python(compression_type=codec, acks="all",
                                                  linger_ms=5))
    sent = _sent(codec)
    futures = [producer.send(name, value=v, key=k, headers=h) for v, k, h in sent]
    producer.flush(30)
    offsets = [f.get(timeout=30) for f in futures]
    producer.close()
    assert all(md.offset >= 0 for md in offsets)
    consumer = KafkaConsumer(**kafka.kafka_python(consumer_timeout_ms=20000,
                                                  enable_auto_commit=False))
    consumer.assign([KTopicPartition(name, p) for p in (0, 1)])
    consumer.seek_to_beginning()
    got = []
    for msg in consumer:
        got.append(msg)
        if len(got) == len(sent):
            break
    consumer.close()
    assert sorted((m.value, m.key, list(m.headers)) for m in got) == sorted(
        (v, k, h) for v, k, h in sent)


@pytest.mark.parametrize("codec", CODECS)
def test_aiokafka_produces_and_consumes_with_every_codec(kafka, topic, codec):
    name = kafka_legal_name(topic.stream.path, "orders")
    sent = _sent(codec)
    sasl = {"bootstrap_servers": kafka.bootstrap, "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN", "sasl_plain_username": kafka.username,
            "sasl_plain_password": kafka.password}

    async def run() -> list:
        producer = AIOKafkaProducer(**sasl, compression_type=codec, acks="all", linger_ms=5)
        await producer.start()
        try:
            futures = [await producer.send(name, value=v, key=k, headers=h) for v, k, h in sent]
            await asyncio.gather(*futures)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(**sasl, enable_auto_commit=False,
                                    auto_offset_reset="earliest")
        await consumer.start()
        got: list = []
        try:
            consumer.assign([TopicPartition(name, p) for p in (0, 1)])
            await consumer.seek_to_beginning()
            while len(got) < len(sent):
                batches = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 20)
                for records in batches.values():
                    got += records
        finally:
            await consumer.stop()
        return got

    got = asyncio.run(run())
    assert sorted((m.value, m.key, list(m.headers)) for m in got) == sorted(
        (v, k, h) for v, k, h in sent)
