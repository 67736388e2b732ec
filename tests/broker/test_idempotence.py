"""Idempotent produce through the listener: a librdkafka producer with enable.idempotence=true
keeps producing while the listener is killed -9 and restarted on the same port; every
acknowledged message is stored exactly once (invariant 10), and retried batches are not
written twice. Plus InitProducerId ids unique across restarts, and a hand-built retry."""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from collections import Counter
from collections.abc import Callable

import psycopg
import pytest
from confluent_kafka import Producer

from replication.engine.recordbatch import encode_batch
from replication.engine.store import Record
from replication.stores import close_stores, store_for, store_url
from tests.broker.conftest import orders_topic

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


def _produce_through(kafka, fault: Callable[[Producer, list[bytes]], None], *, per_round: int,
                     timeout_ms: int) -> tuple[int, list[bytes], list]:
    """Three rounds of an idempotent librdkafka producer's messages, `fault` run between them
    with batches in flight; (sent, acknowledged values, delivery errors) once flushed."""
    acked: list[bytes] = []
    failed: list = []

    def report(err, msg) -> None:  # type: ignore[no-untyped-def]
        (failed if err else acked).append(err or msg.value())

    producer = Producer(kafka.confluent(**{
        "enable.idempotence": True, "acks": "all", "linger.ms": 5,
        "message.timeout.ms": timeout_ms, "retry.backoff.ms": 100,
        "reconnect.backoff.max.ms": 500}))
    sent = 0
    for round_ in range(3):
        for _ in range(per_round):
            producer.produce(NAME, b"m%07d" % sent, on_delivery=report)
            sent += 1
            if sent % 100 == 0:
                producer.poll(0)
                time.sleep(0.002)
        if round_ < 2:
            fault(producer, acked)
    assert producer.flush(timeout_ms / 1000) == 0
    return sent, acked, failed


def _assert_each_acked_once(topic, sent: int, acked: list[bytes], failed: list) -> None:
    assert not failed, failed[:3]
    counts = stored_values(topic)
    assert len(acked) == sent
    assert all(counts[value] == 1 for value in acked), [v for v in acked if counts[v] != 1][:5]
    assert sum(counts.values()) == sent  # nothing written twice, acknowledged or not


def test_idempotent_producer_survives_a_listener_kill_9_with_every_ack_stored_once(
    kafka, topic
):
    port = int(kafka.bootstrap.rsplit(":", 1)[1])

    def kill_9(producer: Producer, acked: list[bytes]) -> None:  # batches in flight as it dies
        kafka.listeners.stop("k1", kill=True)
        time.sleep(0.5)
        kafka.listeners.start("k1", port=port)

    _assert_each_acked_once(topic, *_produce_through(kafka, kill_9, per_round=3000,
                                                     timeout_ms=120000))


def _cut_store_connections(topic) -> int:
    """Terminate every connection to the topic's store database but this process's: the
    listener's pooled connections die as in a store restart (the next append on each fails
    with a psycopg OperationalError), without touching the shared server."""
    url = store_url(topic.stream.cluster)
    database = url.rsplit("/", 1)[1]
    with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        return len(conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s "
            "AND pid <> pg_backend_pid()", (database,)).fetchall())


def test_idempotent_producer_through_store_connection_failures_stores_every_ack_once(
    kafka, topic
):
    """A store error is answered with a retriable code (KAFKA_STORAGE_ERROR, as a broker whose
    log directory failed): librdkafka retries the batch with its sequence, the store writes it
    once. Answered as UNKNOWN_SERVER_ERROR, librdkafka failed the batch and bumped its epoch,
    renumbering every batch not yet acknowledged, and the chaos soak found acknowledged
    messages stored twice (invariant 10)."""
    cut = []

    def cut_store(producer: Producer, acked: list[bytes]) -> None:
        while len(acked) < 750 * (len(cut) + 1):  # the listener is appending by now
            producer.poll(0.01)
        cut.append(_cut_store_connections(topic))

    outcome = _produce_through(kafka, cut_store, per_round=1500, timeout_ms=60000)
    close_stores()  # this process's store connections were cut too
    assert sum(cut), "no store connection was cut: the test injected no fault"
    _assert_each_acked_once(topic, *outcome)
    # The store's errors reached the client, and as a code it retries.
    assert "produce_kafka_storage_error" in kafka.listeners.log("k1")


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


def test_a_batch_refused_while_producers_are_stopped_is_retriable_and_written_once(
    kafka, topic
):
    """A planned failover stops a stream's producers for a while: the listener answers as for
    a partition whose leader moves (NOT_LEADER_OR_FOLLOWER, retried with the same sequence),
    not with a code librdkafka takes as permanent (it would bump the epoch and renumber)."""
    from replication.models import Stream

    stopped = Stream.objects.filter(pk=topic.stream.pk)
    stopped.update(producers_stopped="a planned failover to /mapr/c2/apps is under way")
    records = [Record(b"s%d" % i, timestamp_ms=1000) for i in range(3)]
    batch = encode_batch(records, producer_id=4343, producer_epoch=0, base_sequence=0)
    with socket.create_connection(kafka.bootstrap.split(":")) as sock:  # type: ignore[arg-type]
        _sasl(sock, kafka.username, kafka.password)
        refused = _produce_answer(_call(sock, _frame(0, 3, 30, _produce_v3(batch))))
        stored_while_stopped = sum(stored_values(topic).values())
        stopped.update(producers_stopped="")
        retried = _produce_answer(_call(sock, _frame(0, 3, 31, _produce_v3(batch))))
        again = _produce_answer(_call(sock, _frame(0, 3, 32, _produce_v3(batch))))
    assert refused == (6, -1)  # NOT_LEADER_OR_FOLLOWER: retriable
    assert stored_while_stopped == 0
    assert retried == again == (0, 0)
    assert sum(stored_values(topic).values()) == 3


def test_bad_crc_is_refused_with_corrupt_message_and_writes_nothing(kafka, topic):
    with socket.create_connection(kafka.bootstrap.split(":")) as sock:  # type: ignore[arg-type]
        _sasl(sock, kafka.username, kafka.password)
        batch = bytearray(encode_batch([Record(b"hello", timestamp_ms=1)]))
        batch[-2] ^= 0x55
        code, _ = _produce_answer(_call(sock, _frame(0, 3, 20, _produce_v3(bytes(batch)))))
    assert code == 2  # CORRUPT_MESSAGE
    assert sum(stored_values(topic).values()) == 0


@pytest.mark.parametrize("behind_bytes", [0, 6 << 20], ids=["small", "6MiB-pipelined"])
def test_requests_a_client_left_behind_are_not_written(kafka, topic, behind_bytes):
    """A client that gave up (librdkafka closes the connection on a request timeout, then
    retries the batches, maybe renumbered under a bumped epoch) is never answered, so none of
    its requests is written: neither those it had pipelined behind the one being served, nor
    that one, which waited for the store's partition locks while its client left. With
    megabytes pipelined (librdkafka keeps up to five requests of up to a megabyte in flight)
    the listener had stopped reading the socket, never saw the client close it, and wrote
    them all once the store let it: the chaos soak's run 12 found such batches stored twice,
    the late copy beside the one renumbered under the client's next epoch."""
    from replication.stores import store_url

    records = [Record(b"z%d" % i, timestamp_ms=1000) for i in range(3)]
    first = encode_batch(records, producer_id=4444, producer_epoch=0, base_sequence=0)
    frames = [_frame(0, 3, 40, _produce_v3(first))]
    value, per_batch, sequence = b"v" * (100 << 10), 8, 3
    while sum(map(len, frames)) < behind_bytes or len(frames) == 1:
        batch = [Record(value, timestamp_ms=1000) for _ in range(per_batch if behind_bytes
                                                                  else 3)]
        frames.append(_frame(0, 3, 40 + len(frames), _produce_v3(encode_batch(
            batch, producer_id=4444, producer_epoch=0, base_sequence=sequence))))
        sequence += len(batch)
    with psycopg.connect(store_url(topic.stream.cluster)) as lock:
        # The stream's partitions held in its store: the first produce waits for their locks.
        lock.execute("SELECT 1 FROM partitions WHERE stream = %s FOR UPDATE",
                     (topic.stream.uuid,))
        with socket.create_connection(kafka.bootstrap.split(":")) as sock:  # type: ignore[arg-type]
            _sasl(sock, kafka.username, kafka.password)
            sock.settimeout(5)
            with contextlib.suppress(TimeoutError):  # the listener no longer reads: give up
                sock.sendall(b"".join(frames))
            time.sleep(0.5)
        time.sleep(1)  # the listener sees the connection closed
        lock.rollback()
    time.sleep(3)  # the first one would be written by now, and those behind it
    assert sum(stored_values(topic).values()) == 0
    # The producer's next connection goes on from sequence 0: nothing was recorded.
    with socket.create_connection(kafka.bootstrap.split(":")) as sock:  # type: ignore[arg-type]
        _sasl(sock, kafka.username, kafka.password)
        assert _produce_answer(_call(sock, _frame(0, 3, 42, _produce_v3(first)))) == (0, 0)
    assert sum(stored_values(topic).values()) == 3
