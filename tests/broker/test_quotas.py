"""Tenant quotas on the Kafka listener (produce and fetch bytes, requests), as Kafka enforces
them (KIP-219): a request over the tenant's quota is served, answered with throttle_time_ms,
and the connection reads nothing more for that long; another tenant's connection is not held
back."""

from __future__ import annotations

import itertools
import select
import socket
import struct
import time

import psycopg
import pytest

from replication.engine.recordbatch import encode_batch
from replication.engine.store import Record
from replication.services.messages import messages_produce
from replication.services.quotas import tenant_quota_set
from replication.stores import store_url
from tests.broker.conftest import orders_topic
from tests.broker.test_idempotence import (
    _call,
    _frame,
    _produce_v3,
    _recv,
    _sasl,
    stored_values,
)

pytestmark = pytest.mark.slow
METADATA_V4_ALL = struct.pack(">i?", -1, False)  # every topic, no auto-creation


@pytest.fixture
def topic(owner):
    return orders_topic(owner, 1)


def _connected(endpoint) -> socket.socket:  # type: ignore[no-untyped-def]
    sock = socket.create_connection(endpoint.bootstrap.split(":"))  # type: ignore[arg-type]
    _sasl(sock, endpoint.username, endpoint.password)
    return sock


def _produce_throttle(reply: bytes) -> int:
    return struct.unpack(">i", reply[-4:])[0]  # Produce v3 ends with throttle_time_ms


def test_a_tenant_over_its_produce_quota_is_throttled_and_its_next_request_waits(
        kafka, topic, owner, operator):
    tenant_quota_set(actor=operator, tenant=owner.memberships.get().tenant.name,
                     produce=50_000)
    records = [Record(b"p" * 1000, timestamp_ms=1000) for _ in range(150)]  # 150 KB: 3 s' worth
    with _connected(kafka) as sock:
        first = _call(sock, _frame(0, 3, 10, _produce_v3(encode_batch(records))))
        throttle = _produce_throttle(first)
        assert struct.unpack_from(">h", first, 8 + 2 + len(b"/mapr/c1/apps:orders") + 8)[0] == 0
        assert 1500 <= throttle <= 2100, throttle  # about 2 s beyond the one-second burst
        began = time.monotonic()
        _call(sock, _frame(3, 4, 11, METADATA_V4_ALL))  # read only once the throttle passed
        assert time.monotonic() - began >= throttle / 1000 - 0.2
    assert sum(stored_values(topic).values()) == 150  # throttled, not refused


def test_a_throttled_connections_pipelined_produce_requests_are_served_one_at_a_time(
        kafka, topic, owner, operator):
    """A client's Produce requests in flight together (librdkafka's up to 5) are served
    together on a connection no quota holds back; once throttled, a connection's are served
    one at a time, muted after each, so its answers come a throttle apart and the tenant is
    admitted at its quota, not several quotas' worth in one lump."""
    tenant_quota_set(actor=operator, tenant=owner.memberships.get().tenant.name,
                     produce=50_000)
    batch = encode_batch([Record(b"p" * 1000, timestamp_ms=1000) for _ in range(60)])
    with _connected(kafka) as sock:
        assert _produce_throttle(_call(sock, _frame(0, 3, 10, _produce_v3(batch)))) > 0
        sock.sendall(b"".join(_frame(0, 3, 11 + i, _produce_v3(batch)) for i in range(3)))
        answered = []
        for _ in range(3):
            _recv(sock, struct.unpack(">i", _recv(sock, 4))[0])
            answered.append(time.monotonic())
    # Each 60 KB is 1.2 s of the quota: served together, the three answers came at once.
    gaps = [later - earlier for earlier, later in itertools.pairwise(answered)]
    assert min(gaps) >= 0.9, gaps
    assert sum(stored_values(topic).values()) == 240


def test_a_throttled_tenant_appends_one_request_at_a_time_across_its_connections(
        kafka, owner, operator):
    """Two throttled connections of one tenant: while the first one's append waits for its
    partition (locked here), the second one's, into the other partition, waits for it too
    (the tenant's lane), rather than taking a second pool thread and store connection."""
    topic = orders_topic(owner, 2)
    tenant_quota_set(actor=operator, tenant=owner.memberships.get().tenant.name,
                     produce=50_000)
    batch = encode_batch([Record(b"p" * 1000, timestamp_ms=1000) for _ in range(60)])
    with _connected(kafka) as first, _connected(kafka) as second:
        for sock in (first, second):  # 1.2 s of the quota each: both throttled
            assert _produce_throttle(_call(sock, _frame(0, 3, 10, _produce_v3(batch)))) > 0
        with psycopg.connect(store_url(topic.stream.cluster)) as lock:
            lock.execute("SELECT 1 FROM partitions WHERE stream = %s AND partition = 0 "
                         "FOR UPDATE", (topic.stream.uuid,))
            first.sendall(_frame(0, 3, 11, _produce_v3(batch, partition=0)))
            second.sendall(_frame(0, 3, 11, _produce_v3(batch, partition=1)))
            time.sleep(4)  # both throttles (about 0.2 and 1.4 s) passed: both requests read
            assert select.select([first, second], [], [], 0)[0] == []
            lock.rollback()
        for sock in (first, second):
            reply = _recv(sock, struct.unpack(">i", _recv(sock, 4))[0])
            assert struct.unpack_from(">h", reply, 8 + 2 + len(b"/mapr/c1/apps:orders") + 8)[0] == 0
    assert sum(stored_values(topic).values()) == 240


def test_a_tenant_over_its_fetch_quota_is_throttled_and_still_reads_everything(
        kafka, topic, owner, operator):
    from confluent_kafka import Consumer

    tenant_quota_set(actor=operator, tenant=owner.memberships.get().tenant.name, fetch=50_000)
    messages_produce(actor=owner, stream=topic.stream, topic="orders",
                     records=[Record(b"f" * 1000) for _ in range(150)])  # 150 KB: 3 s' worth
    throttles: list[float] = []
    consumer = Consumer(kafka.confluent(**{
        "group.id": "quota", "auto.offset.reset": "earliest",
        "throttle_cb": lambda event: throttles.append(event.throttle_time)}))
    consumer.subscribe(["/mapr/c1/apps:orders"])
    got, deadline = 0, time.monotonic() + 60
    try:
        while got < 150 and time.monotonic() < deadline:
            got += sum(1 for m in consumer.consume(150, timeout=1) if not m.error())
        consumer.poll(0.5)  # serves the last throttle callbacks
    finally:
        consumer.close()
    assert got == 150  # throttled, not refused
    assert throttles and max(throttles) >= 0.5, throttles  # throttle_time_ms (here in seconds)


def test_a_tenants_request_quota_throttles_its_connections_and_not_another_tenants(
        kafka, topic, owner, outsider, operator):
    tenant_quota_set(actor=operator, tenant=owner.memberships.get().tenant.name, requests=5)
    with _connected(kafka) as sock:
        throttles = [struct.unpack_from(">i", _call(sock, _frame(3, 4, 20 + i,
                                                                 METADATA_V4_ALL)), 4)[0]
                     for i in range(12)]
    assert throttles[:4] == [0, 0, 0, 0] and max(throttles) >= 150, throttles
    with _connected(kafka.as_user(outsider)) as sock:
        theirs = [struct.unpack_from(">i", _call(sock, _frame(3, 4, 40 + i,
                                                              METADATA_V4_ALL)), 4)[0]
                  for i in range(12)]
    assert theirs == [0] * 12
