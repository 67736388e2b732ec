"""Consecutive Produce requests of one connection served together (issue 30, speed): a client
with several requests in flight (librdkafka keeps up to 5) has those the listener received
while it served the previous one appended in one store transaction, each still answered in
order with its own offsets; a refusal of one batch answers that request only, a refusal of
the whole transaction (the failover fence) answers each, and retried batches are written
once."""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from collections.abc import Iterator

import psycopg
import pytest

from replication.engine.recordbatch import encode_batch
from replication.engine.store import Record
from replication.stores import store_url
from tests.broker.conftest import orders_topic
from tests.broker.test_idempotence import (
    _frame,
    _produce_answer,
    _produce_v3,
    _recv,
    _sasl,
    stored_values,
)

pytestmark = pytest.mark.slow


@pytest.fixture
def topic(owner):
    return orders_topic(owner, 1)


def _batch(tag: bytes, n: int = 3, **producer: int) -> bytes:
    records = [Record(tag + b"%d" % i, timestamp_ms=1000) for i in range(n)]
    return encode_batch(records, **producer)


def _answers(sock: socket.socket, count: int) -> list[tuple[int, int, int]]:
    """(correlation id, error code, base offset) of the next `count` answers, as they came."""
    out = []
    for _ in range(count):
        reply = _recv(sock, struct.unpack(">i", _recv(sock, 4))[0])
        out.append((struct.unpack_from(">i", reply)[0], *_produce_answer(reply)))
    return out


@contextlib.contextmanager
def _held(topic) -> Iterator[None]:  # type: ignore[no-untyped-def]
    """The topic's partitions locked in the store until the block ends: the first request
    waits for them while the others arrive behind it, so they are served together."""
    with psycopg.connect(store_url(topic.stream.cluster)) as lock:
        lock.execute("SELECT 1 FROM partitions WHERE stream = %s FOR UPDATE",
                     (topic.stream.uuid,))
        yield
        time.sleep(1)  # the listener has read every frame sent
        lock.rollback()


def _send_held(kafka, topic, batches: list[bytes]) -> list[tuple[int, int, int]]:
    with socket.create_connection(kafka.bootstrap.split(":")) as sock:  # type: ignore[arg-type]
        _sasl(sock, kafka.username, kafka.password)
        with _held(topic):
            sock.sendall(b"".join(_frame(0, 3, 100 + i, _produce_v3(b))
                                  for i, b in enumerate(batches)))
        return _answers(sock, len(batches))


def _transactions(topic) -> list[int]:  # type: ignore[no-untyped-def]
    """How many rows each store transaction wrote to the topic's table, in offset order."""
    with psycopg.connect(store_url(topic.stream.cluster)) as conn:
        table = conn.execute("SELECT coalesce(to_regclass('batches'), "
                             "to_regclass('messages'))::text").fetchone()[0]
        order = "last_offset" if table == "batches" else '"offset"'
        rows = conn.execute(f"SELECT xmin::text FROM {table} WHERE pid IN (SELECT id FROM "
                            f"partitions WHERE stream = %s) ORDER BY {order}",
                            (topic.stream.uuid,)).fetchall()
    runs: list[int] = []
    for i, (xmin,) in enumerate(rows):
        if i and xmin == rows[i - 1][0]:
            runs[-1] += 1
        else:
            runs.append(1)
    return runs


def test_pipelined_requests_share_a_transaction_and_are_answered_in_order(kafka, topic):
    answers = _send_held(kafka, topic, [_batch(b"r%d-" % i) for i in range(5)])
    assert answers == [(100 + i, 0, 3 * i) for i in range(5)]
    # The first (maybe alone) waited for the partition; those behind it went in one
    # transaction.
    assert len(_transactions(topic)) <= 2
    assert sorted(stored_values(topic)) == sorted(b"r%d-%d" % (i, j) for i in range(5)
                                                  for j in range(3))


def test_a_bad_batch_answers_its_request_only(kafka, topic):
    bad = bytearray(_batch(b"bad"))
    bad[-2] ^= 0x55
    answers = _send_held(kafka, topic, [_batch(b"a"), _batch(b"b"), bytes(bad), _batch(b"c")])
    assert answers == [(100, 0, 0), (101, 0, 3), (102, 2, -1), (103, 0, 6)]  # CORRUPT_MESSAGE
    assert sum(stored_values(topic).values()) == 9


def test_a_retried_batch_among_pipelined_requests_is_written_once(kafka, topic):
    first = _batch(b"i", producer_id=5151, producer_epoch=0, base_sequence=0)
    then = _batch(b"j", producer_id=5151, producer_epoch=0, base_sequence=3)
    answers = _send_held(kafka, topic, [first, first, then, then])
    assert [a[1:] for a in answers] == [(0, 0), (0, 0), (0, 3), (0, 3)]
    assert sum(stored_values(topic).values()) == 6


def test_the_fence_refuses_every_request_of_the_shared_transaction(kafka, topic):
    from replication.models import Stream

    stopped = Stream.objects.filter(pk=topic.stream.pk)
    stopped.update(producers_stopped="a planned failover to /mapr/c2/apps is under way")
    answers = _send_held(kafka, topic, [_batch(b"f%d-" % i) for i in range(4)])
    assert answers == [(100 + i, 6, -1) for i in range(4)]  # NOT_LEADER_OR_FOLLOWER: retriable
    assert sum(stored_values(topic).values()) == 0


def _produce_acks(batch: bytes, acks: int) -> bytes:
    body = _produce_v3(batch)  # a null transactional id, then acks
    return body[:2] + struct.pack(">h", acks) + body[4:]


def test_requests_that_cannot_share_a_transaction_are_served_one_by_one_in_order(kafka, topic):
    """acks differing (each commits as its own asks), or acks=0 (no answer): one by one."""
    with socket.create_connection(kafka.bootstrap.split(":")) as sock:  # type: ignore[arg-type]
        _sasl(sock, kafka.username, kafka.password)
        frames = [_frame(0, 3, 200, _produce_acks(_batch(b"x"), 1)),
                  _frame(0, 3, 201, _produce_acks(_batch(b"y"), -1)),
                  _frame(0, 3, 202, _produce_acks(_batch(b"z"), 0)),
                  _frame(0, 3, 203, _produce_acks(_batch(b"w"), 1))]
        with _held(topic):
            sock.sendall(b"".join(frames))
        answers = _answers(sock, 3)  # acks=0 gets none
    assert answers == [(200, 0, 0), (201, 0, 3), (203, 0, 9)]
    assert len(_transactions(topic)) == 4
