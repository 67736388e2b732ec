"""Idempotent produce through the listener: a librdkafka producer with enable.idempotence=true
keeps producing while the listener is killed -9 and restarted on the same port; every
acknowledged message is stored exactly once (invariant 10), and retried batches are not
written twice. Plus InitProducerId ids unique across restarts, and a hand-built retry."""

from __future__ import annotations

import socket
import struct
import time
from collections import Counter

import pytest
from confluent_kafka import Producer

from replication.engine.store import Record
from replication.stores import store_for
from tests.workers.kafka.conftest import orders_topic
from workers.kafka.records import encode_batch

pytestmark = pytest.mark.slow
NAME = "/mapr/c1/apps:orders"


@pytest.fixture
def topic(owner):
    return orders_topic(owner, 3)


def stored_values(topic) -> Counter:
    store, counts = store_for(topic.stream.cluster), Counter()
    for partition, (low, high) in store.watermarks(topic.stream.uuid, "orders").items():
        offset = low
        while offset < high:
            rows = store.read(topic.stream.uuid, "orders", partition, offset, limit=5000)
            counts.update(m.value for m in rows)
            offset = rows[-1].offset + 1
    return counts


def test_idempotent_producer_survives_a_listener_kill_9_with_every_ack_stored_once(
    kafka, topic
):
    port = int(kafka.bootstrap.rsplit(":", 1)[1])
    acked: list[bytes] = []
    failed: list = []

    def report(err, msg) -> None:  # type: ignore[no-untyped-def]
        (failed if err else acked).append(err or msg.value())

    producer = Producer(kafka.confluent(**{
        "enable.idempotence": True, "acks": "all", "linger.ms": 5, "message.timeout.ms": 120000,
        "retry.backoff.ms": 100, "reconnect.backoff.max.ms": 500}))
    sent = 0
    for round_ in range(3):
        for _ in range(3000):
            producer.produce(NAME, b"m%07d" % sent, on_delivery=report)
            sent += 1
            if sent % 100 == 0:
                producer.poll(0)
                time.sleep(0.002)
        if round_ < 2:  # mid-stream: batches in flight when the listener dies
            kafka.listeners.stop("k1", kill=True)
            time.sleep(0.5)
            kafka.listeners.start("k1", port=port)
    assert producer.flush(120) == 0
    assert not failed, failed[:3]
    counts = stored_values(topic)
    assert len(acked) == sent
    assert all(counts[value] == 1 for value in acked), [v for v in acked if counts[v] != 1][:5]
    assert sum(counts.values()) == sent  # nothing written twice, acknowledged or not


def _frame(api_key: int, version: int, correlation: int, body: bytes) -> bytes:
    client = b"test"
    head = struct.pack(">hhih", api_key, version, correlation, len(client)) + client
    return struct.pack(">i", len(head) + len(body)) + head + body


def _call(sock: socket.socket, frame: bytes) -> bytes:
    sock.sendall(frame)
    size = struct.unpack(">i", _recv(sock, 4))[0]
    return _recv(sock, size)


def _recv(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, "the listener closed the connection"
        data += chunk
    return data


def _sasl(sock: socket.socket, user: str, password: str) -> None:
    mech = b"PLAIN"
    _call(sock, _frame(17, 1, 1, struct.pack(">h", len(mech)) + mech))
    token = b"\0" + user.encode() + b"\0" + password.encode()
    reply = _call(sock, _frame(36, 1, 2, struct.pack(">i", len(token)) + token))
    assert struct.unpack_from(">h", reply, 4)[0] == 0, reply


def _produce_v3(batch: bytes, partition: int = 0) -> bytes:
    topic = NAME.encode()
    return (struct.pack(">hhi", -1, -1, 30000) + struct.pack(">ih", 1, len(topic)) + topic
            + struct.pack(">iii", 1, partition, len(batch)) + batch)


def _produce_answer(reply: bytes) -> tuple[int, int]:
    """(error code, base offset) of the only partition in a Produce v3 response."""
    pos = 4 + 4  # correlation id, topics count
    (name_len,) = struct.unpack_from(">h", reply, pos)
    pos += 2 + name_len + 4 + 4  # name, partitions count, partition index
    code, base = struct.unpack_from(">hq", reply, pos)
    return code, base


def test_a_retried_batch_is_acknowledged_with_its_offset_and_a_gap_is_refused(kafka, topic):
    with socket.create_connection(kafka.bootstrap.split(":")) as sock:  # type: ignore[arg-type]
        _sasl(sock, kafka.username, kafka.password)
        records = [Record(b"a%d" % i, timestamp_ms=1000) for i in range(3)]
        batch = encode_batch(records, producer_id=4242, producer_epoch=0, base_sequence=0)
        first = _produce_answer(_call(sock, _frame(0, 3, 10, _produce_v3(batch))))
        again = _produce_answer(_call(sock, _frame(0, 3, 11, _produce_v3(batch))))
        gap = encode_batch(records, producer_id=4242, producer_epoch=0, base_sequence=9)
        refused = _produce_answer(_call(sock, _frame(0, 3, 12, _produce_v3(gap))))
    assert first == again == (0, 0)
    assert refused[0] == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
    assert sum(stored_values(topic).values()) == 3


def test_bad_crc_is_refused_with_corrupt_message_and_writes_nothing(kafka, topic):
    with socket.create_connection(kafka.bootstrap.split(":")) as sock:  # type: ignore[arg-type]
        _sasl(sock, kafka.username, kafka.password)
        batch = bytearray(encode_batch([Record(b"hello", timestamp_ms=1)]))
        batch[-2] ^= 0x55
        code, _ = _produce_answer(_call(sock, _frame(0, 3, 20, _produce_v3(bytes(batch)))))
    assert code == 2  # CORRUPT_MESSAGE
    assert sum(stored_values(topic).values()) == 0
