"""A Kafka producer's batches on a batch store (issue 30): stored as sent, compression and CRC
included, numbered by their base offset; consumed back with every offset, key and header."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from crc32c import crc32c

from replication.engine.recordbatch import LZ4, decode_batches
from replication.stores import store_for
from tests.batches import split_batches
from tests.factories import ClusterFactory, StreamFactory, TopicFactory

pytestmark = pytest.mark.slow
NAME = "/mapr/kbatch/apps:orders"


@pytest.fixture
def batch_topic(owner, settings):
    settings.STORE_LAYOUT = "batches"  # the cluster's new store is a batch store
    stream = StreamFactory(cluster=ClusterFactory(name="kbatch"), name="apps", created_by=owner,
                           tenant=owner.memberships.get().tenant)
    topic = TopicFactory(stream=stream, name="orders", partitions=2)
    store = store_for(stream.cluster)
    assert store.KEEPS_BATCHES
    store.ensure_topic(stream.uuid, "orders", 2)
    return topic


def test_a_producers_lz4_batches_are_stored_as_sent_and_read_back_whole(kafka, batch_topic):
    sent = [(b'{"n": %d, "page": "/home"}' % i, b"k%d" % (i % 5), [("h", b"%d" % i)])
            for i in range(500)]
    producer = Producer({**kafka.confluent(), "linger.ms": 20, "compression.codec": "lz4",
                         "enable.idempotence": True})
    for value, key, headers in sent:
        producer.produce(NAME, value, key, headers=headers)
    assert producer.flush(30) == 0
    store, stream = store_for(batch_topic.stream.cluster), batch_topic.stream.uuid
    stored = [b for p in (0, 1) for b in split_batches(store.fetch(stream, "orders", p, 0,
                                                              1 << 24).data)]
    assert sum(len(b.records) for raw in stored for b in decode_batches(raw)) == 500
    for raw in stored:  # as the producer sent them: its codec and CRC, its producer id
        assert int.from_bytes(raw[21:23], "big") & 0x07 == LZ4
        assert crc32c(raw[21:]) == int.from_bytes(raw[17:21], "big")
        assert int.from_bytes(raw[43:51], "big", signed=True) >= 0
    consumer = Consumer({**kafka.confluent(), "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(NAME, p, 0) for p in (0, 1)])
    got = []
    while len(got) < 500:
        batch = consumer.consume(500 - len(got), timeout=20)
        assert batch, f"only {len(got)} of 500 arrived"
        got += batch
    consumer.close()
    assert sorted((m.value(), m.key(), m.headers()) for m in got) == sorted(
        (v, k, h) for v, k, h in sent)
    for p in (0, 1):
        offsets = [m.offset() for m in got if m.partition() == p]
        assert offsets == list(range(len(offsets)))
