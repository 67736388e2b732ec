"""A revoked sign-in ends its open Kafka connections (broker/revocation.py): signing out
(the token deleted), the user deactivated, or the membership removed closes every connection
that signed in with it within BOUND seconds, a waiting fetch included, and nothing produced
afterwards reaches its consumer."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from rest_framework.test import APIClient

from replication.models import Stream
from tests.broker.conftest import orders_topic, sasl_token
from tests.broker.wire import Wire

pytestmark = pytest.mark.slow
NAME = "/mapr/c1/apps:orders"
# One check interval (KAFKA_REVOCATION_CHECK_SECONDS, 2 s by default), the check itself and
# the close, with room for a busy test machine.
BOUND = 5.0


@pytest.fixture
def topic(owner, member):
    """alice's orders topic, which bob (in acme too) may consume."""
    made = orders_topic(owner, 1)
    Stream.objects.filter(pk=made.stream_id).update(consumeperm="u:alice | u:bob")
    return made


def produce(config: dict, value: bytes) -> None:
    producer = Producer(config)
    producer.produce(NAME, value, partition=0)
    assert producer.flush(30) == 0


def waiting_fetch(bootstrap: str, username: str, token: str, offset: int) -> Wire:
    """A connection signed in with `token`, its Fetch at `offset` waiting up to 30 s."""
    wire = Wire(bootstrap, timeout=30)
    assert wire.authenticate(username, token).error_code == 0
    wire.send(1, 11, replica_id=-1, max_wait=30_000, min_bytes=1, max_bytes=1 << 20,
              session_epoch=-1, topics=[{"topic": NAME, "partitions": [
                  {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}]}])
    return wire


def seconds_until_closed(wire: Wire) -> float:
    """How long until the listener closes `wire`; fails when it answers the fetch instead."""
    start = time.monotonic()
    assert wire.sock.recv(1) == b"", "the listener answered the fetch of a revoked sign-in"
    return time.monotonic() - start


def revoke(how: str, user, token: str) -> None:  # type: ignore[no-untyped-def]
    if how == "logout":
        client = APIClient(HTTP_AUTHORIZATION=f"Token {token}")
        assert client.post("/api/v1/auth/logout/").status_code == 204
    elif how == "deactivated":
        user.is_active = False
        user.save()
    else:
        user.memberships.get().delete()


@pytest.mark.parametrize("how", ["logout", "deactivated", "membership_removed"])
def test_a_revoked_sign_in_closes_its_kafka_connections_and_gets_nothing_after(
        kafka, owner, member, topic, how):
    bobs = kafka.as_user(member)
    produce(kafka.confluent(), b"before")
    consumer = Consumer({**bobs.confluent(), "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 500})
    consumer.assign([TopicPartition(NAME, 0, 0)])
    try:
        first = consumer.poll(20)
        assert first is not None and first.value() == b"before"
        wire = waiting_fetch(kafka.bootstrap, bobs.username, bobs.password, offset=1)
        time.sleep(0.5)  # the fetch is waiting
        revoke(how, member, bobs.password)
        assert seconds_until_closed(wire) < BOUND
        produce(kafka.confluent(), b"after")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            assert msg is None or msg.error() is not None, "a revoked consumer got a message"
    finally:
        consumer.close()
    assert "kafka_session_revoked" in kafka.listeners.log()


def test_signing_out_closes_that_tokens_connections_only(kafka, owner, topic):
    """The user's connections signed in with another token of theirs keep going."""
    other = sasl_token(owner)
    ended = waiting_fetch(kafka.bootstrap, kafka.username, kafka.password, offset=0)
    kept = waiting_fetch(kafka.bootstrap, kafka.username, other, offset=0)
    revoke("logout", owner, kafka.password)
    assert seconds_until_closed(ended) < BOUND
    produce({**kafka.confluent(), "sasl.password": other}, b"still here")
    assert b"still here" in kept.read_frame()
