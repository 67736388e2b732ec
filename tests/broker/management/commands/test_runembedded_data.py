"""The data path on the embedded default (SQLite stores, no Redis): an idempotent librdkafka
producer and a consumer through `manage.py runembedded`'s listener, plain names."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.broker.embedded import embedded_site

pytestmark = pytest.mark.slow


def test_embedded_listener_produces_idempotently_and_consumes_on_sqlite(tmp_path):
    with embedded_site(tmp_path) as site:
        config = site.config
        reports: list = []
        producer = Producer({**config, "enable.idempotence": True, "linger.ms": 5,
                             "compression.codec": "lz4"})
        for i in range(500):
            producer.produce("orders", b"e%d" % i, key=b"k%d" % (i % 9),
                             headers=[("n", b"%d" % i)],
                             on_delivery=lambda e, m: reports.append((e, m)))
        assert producer.flush(60) == 0
        assert all(e is None for e, _ in reports)
        partitions = {m.partition() for _, m in reports}
        consumer = Consumer({**config, "group.id": "embedded", "enable.auto.commit": False})
        consumer.assign([TopicPartition("orders", p, 0) for p in partitions])
        got: list = []
        try:
            while len(got) < 500:
                batch = consumer.consume(500, timeout=20)
                assert batch, f"{len(got)} of 500 arrived"
                got += [m for m in batch if m.error() is None]
        finally:
            consumer.close()
        assert sorted(m.value() for m in got) == sorted(b"e%d" % i for i in range(500))
        assert {(m.value(), m.offset()) for m in got} == {
            (m.value(), m.offset()) for _, m in reports}
