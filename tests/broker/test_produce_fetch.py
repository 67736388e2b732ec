"""Produce and Fetch through the listener with real clients: every codec, keys and headers,
offsets as stored, ListOffsets, OFFSET_OUT_OF_RANGE reset, size limit, ACEs."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from replication.stores import store_for
from tests.broker.conftest import orders_topic

pytestmark = pytest.mark.slow
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.fixture
def topic(owner):
    return orders_topic(owner, 3)


NAME = "/mapr/c1/apps:orders"


def produce(config: dict, messages: list[tuple], **extra: object) -> list:
    """Produce (value, key, headers, partition) tuples; the delivery reports' (err, msg)."""
    reports: list = []
    producer = Producer({**config, "linger.ms": 5, **extra})
    for value, key, headers, partition in messages:
        where = {} if partition is None else {"partition": partition}
        producer.produce(NAME, value, key, headers=headers, **where,
                         on_delivery=lambda err, msg: reports.append((err, msg)))
    assert producer.flush(30) == 0
    return reports


def consume(config: dict, count: int, *, partitions: list[int] | None = None,
            offset: int = 0, **extra: object) -> list:
    consumer = Consumer({**config, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, **extra})
    consumer.assign([TopicPartition(NAME, p, offset) for p in partitions or [0, 1, 2]])
    got = []
    try:
        while len(got) < count:
            batch = consumer.consume(count - len(got), timeout=20)
            assert batch, f"only {len(got)} of {count} messages arrived"
            for msg in batch:
                assert msg.error() is None, msg.error()
                got.append(msg)
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_produces_and_consumes_with_every_codec_keys_and_headers(kafka, topic, codec):
    sent = [(f"v{i}".encode() * 20, f"k{i % 7}".encode(), [("h", f"{i}".encode())], None)
            for i in range(300)]
    reports = produce(kafka.confluent(), sent, **{"compression.codec": codec})
    assert all(err is None for err, _ in reports)
    got = consume(kafka.confluent(), 300)
    assert sorted(m.value() for m in got) == sorted(v for v, *_ in sent)
    by_value = {m.value(): m for m in got}
    for value, key, headers, _ in sent[:20]:
        assert by_value[value].key() == key
        assert by_value[value].headers() == [(h, v) for h, v in headers]
    # Offsets and partitions as the store holds them; keys placed by murmur2 as Java does.
    store = store_for(topic.stream.cluster)
    for _, msg in reports[:10]:
        (stored,) = store.read(topic.stream.uuid, "orders", msg.partition(), msg.offset(),
                               limit=1)
        assert stored.value == msg.value()
    assert {m.partition() for m in got if m.key() == b"k3"} == {
        r.partition() for _, r in reports if r.key() == b"k3"}


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_a_null_value_and_an_empty_one_come_back_as_produced(kafka, topic, codec):
    """librdkafka's 0070 and 0073 in miniature: null and empty values, keys and header
    values, each kept apart through produce, the store and fetch."""
    sent = [(None, None, None, 0), (b"", None, None, 0), (None, b"", [("n", None)], 0),
            (b"", b"k", [("e", b""), ("n", None)], 0), (b"v", None, None, 0)]
    reports = produce(kafka.confluent(), sent, **{"compression.codec": codec})
    assert [err for err, _ in reports] == [None] * len(sent)
    got = consume(kafka.confluent(), len(sent), partitions=[0])
    assert [(m.value(), m.key(), m.headers()) for m in got] == [
        (v, k, h) for v, k, h, _ in sent]
    stored = store_for(topic.stream.cluster).read(topic.stream.uuid, "orders", 0, 0)
    assert [(m.value, m.key, list(m.headers) or None) for m in stored] == [
        (v, k, h) for v, k, h, _ in sent]


def test_list_offsets_earliest_latest_and_by_time(kafka, topic):
    produce(kafka.confluent(), [(b"x", None, None, 1)] * 5)
    consumer = Consumer({**kafka.confluent(), "group.id": "lo"})
    try:
        assert consumer.get_watermark_offsets(TopicPartition(NAME, 1), timeout=20) == (0, 5)
        found = consumer.offsets_for_times([TopicPartition(NAME, 1, 0)], timeout=20)
        assert found[0].offset == 0
        later = consumer.offsets_for_times([TopicPartition(NAME, 1, 2**42)], timeout=20)
        assert later[0].offset == -1
    finally:
        consumer.close()


def test_offset_out_of_range_resets_by_auto_offset_reset(kafka, topic):
    produce(kafka.confluent(), [(b"m%d" % i, None, None, 0) for i in range(4)])
    got = consume(kafka.confluent(), 4, partitions=[0], offset=100,
                  **{"auto.offset.reset": "earliest"})
    assert [m.offset() for m in got] == [0, 1, 2, 3]


def test_message_over_the_maximum_size_is_refused(kafka, topic, settings):
    big = b"x" * (2 * 1024 * 1024)
    reports = produce(kafka.confluent(), [(big, None, None, 0)],
                      **{"message.max.bytes": 4 * 1024 * 1024, "compression.codec": "none"})
    (err, _), = reports
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert store_for(topic.stream.cluster).watermarks(topic.stream.uuid, "orders")[0] == (0, 0)


def test_member_without_produceperm_is_refused(kafka, topic, member):
    reports = produce(kafka.as_user(member).confluent(), [(b"x", None, None, 0)],
                      **{"message.timeout.ms": 5000})
    (err, _), = reports
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_outsider_cannot_produce_or_fetch(kafka, topic, outsider):
    produce(kafka.confluent(), [(b"secret", None, None, 0)])
    reports = produce(kafka.as_user(outsider).confluent(), [(b"x", None, None, 0)],
                      **{"message.timeout.ms": 3000})
    assert reports[0][0] is not None
    consumer = Consumer({**kafka.as_user(outsider).confluent(), "group.id": "o"})
    consumer.assign([TopicPartition(NAME, 0, 0)])
    try:
        msg = consumer.poll(5)
        assert msg is None or msg.error() is not None
    finally:
        consumer.close()
    assert store_for(topic.stream.cluster).watermarks(topic.stream.uuid, "orders")[0] == (0, 1)


def test_member_without_consumeperm_cannot_fetch_or_list_offsets(kafka, topic, member):
    produce(kafka.confluent(), [(b"private", None, None, 0)])
    seen: list = []
    consumer = Consumer({**kafka.as_user(member).confluent(), "group.id": "m",
                         "error_cb": seen.append})
    consumer.assign([TopicPartition(NAME, 0, 0)])
    try:
        msg = consumer.poll(5)
        assert msg is None or msg.error() is not None
        with pytest.raises(KafkaException, match=r"(?i)authoriz|unknown partition"):
            consumer.get_watermark_offsets(TopicPartition(NAME, 0), timeout=10)
    finally:
        consumer.close()


def test_a_waiting_fetch_returns_as_soon_as_a_produce_arrives(kafka, topic):
    import threading
    import time

    consumer = Consumer({**kafka.confluent(), "group.id": "lp", "fetch.wait.max.ms": 5000,
                         "fetch.min.bytes": 1})
    consumer.assign([TopicPartition(NAME, 2, 0)])
    consumer.poll(1)  # connected, and its first long poll is waiting at the listener
    sent_at: list[float] = []

    def later() -> None:
        time.sleep(1.5)
        sent_at.append(time.monotonic())
        produce(kafka.confluent(), [(b"wake", None, None, 2)])

    thread = threading.Thread(target=later)
    thread.start()
    try:
        msg = consumer.poll(15)
        arrived = time.monotonic()
    finally:
        thread.join()
        consumer.close()
    assert msg is not None and msg.value() == b"wake"
    # Well before the fetch's 5 s max wait would have ended (the produce's own round trips
    # and librdkafka's start-up take part of it).
    assert arrived - sent_at[0] < 3.0


def test_one_fetch_serves_many_partitions_and_keeps_to_max_bytes(kafka, topic):
    import datetime

    from replication.engine.recordbatch import decode_batches
    from tests.broker.wire import Wire

    config = kafka.confluent()
    for _ in range(30):  # a batch a message: the limits bite between batches in both layouts
        produce(config, [(b"v" * 1000, None, None, p) for p in (0, 1, 2)])
    wire = Wire(kafka.bootstrap)
    wire.authenticate(kafka.username, kafka.password)

    def fetch(max_bytes: int, partition_max_bytes: int) -> dict[int, tuple[int, int]]:
        """(records, bytes) per partition of one Fetch over partitions 0-2."""
        response = wire.call(
            1, 12, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1,
            max_bytes=max_bytes, isolation_level=0, session_id=0, session_epoch=-1,
            forgotten_topics_data=[], rack_id="", topics=[{"topic": NAME, "partitions": [
                {"partition": p, "current_leader_epoch": -1, "fetch_offset": 0,
                 "last_fetched_epoch": -1, "log_start_offset": -1,
                 "partition_max_bytes": partition_max_bytes} for p in (0, 1, 2)]}])
        return {p.partition_index: (sum(len(b.records) for b in decode_batches(p.records)),
                                    len(p.records or b""))
                for t in response.responses for p in t.partitions}

    assert {p: n for p, (n, _) in fetch(10_000_000, 1_000_000).items()} == {0: 30, 1: 30, 2: 30}
    per_partition = fetch(10_000_000, 5_000)
    assert all(0 < n < 30 and size <= 5_000 + 1_100 for n, size in per_partition.values())
    limited = fetch(8_000, 1_000_000)  # the request's limit spans partitions
    assert 0 < sum(size for _, size in limited.values()) <= 8_000 + 1_100
    assert sum(n for n, _ in limited.values()) < 90
    wire.close()
