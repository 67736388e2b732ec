"""SASL sessions have a lifetime (KIP-368): SaslAuthenticate tells it, clients re-authenticate
on the open connection, and a connection whose session ran out is closed on its next request."""

from __future__ import annotations

import logging
import time
import uuid
from datetime import timedelta

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from knox.models import AuthToken

from tests.broker.conftest import KafkaEndpoint, orders_topic, sasl_token
from tests.broker.wire import Wire

pytestmark = pytest.mark.slow
NAME = "/mapr/c1/apps:orders"
LIFETIME = 2.0  # seconds: STREAMGATE_KAFKA_SESSION_LIFETIME of the listeners here


@pytest.fixture
def short_lived(kafka_listeners, owner) -> KafkaEndpoint:
    bootstrap = kafka_listeners.start(
        "k1", env={"STREAMGATE_KAFKA_SESSION_LIFETIME": str(LIFETIME)})
    return KafkaEndpoint(bootstrap, owner.get_username(), sasl_token(owner), kafka_listeners)


def signed_in(endpoint: KafkaEndpoint, password: str | None = None) -> tuple[Wire, int]:
    """A raw connection signed in as alice, and the session lifetime (ms) it was given."""
    wire = Wire(endpoint.bootstrap)
    answer = wire.authenticate(endpoint.username, password or endpoint.password)
    assert answer.error_code == 0
    return wire, int(answer.session_lifetime.total_seconds() * 1000)


def test_sasl_authenticate_tells_the_session_lifetime(short_lived):
    wire, lifetime_ms = signed_in(short_lived)
    assert lifetime_ms == LIFETIME * 1000
    wire.close()


def test_the_session_lifetime_is_capped_by_the_tokens_expiry(kafka, owner):
    _, token = AuthToken.objects.create(owner, expiry=timedelta(seconds=60))
    wire, lifetime_ms = signed_in(kafka, token)
    assert 50_000 < lifetime_ms <= 60_000
    wire.close()


def test_a_client_that_does_not_reauthenticate_is_closed_after_its_session_expires(
        short_lived):
    wire, _ = signed_in(short_lived)
    assert wire.call(3, 1, topics=None).brokers
    time.sleep(LIFETIME + 0.5)
    wire.send(3, 1, topics=None)
    assert wire.closed()
    assert "after the SASL session expired" in short_lived.listeners.log()


def test_reauthenticating_on_the_open_connection_extends_the_session(short_lived):
    wire, _ = signed_in(short_lived)
    for _ in range(3):
        time.sleep(LIFETIME * 0.6)
        assert wire.call(17, 1, mechanism="PLAIN").error_code == 0
        again = wire.call(36, 2, auth_bytes=f"\0alice\0{short_lived.password}".encode())
        assert again.error_code == 0 and again.session_lifetime.total_seconds() == LIFETIME
    assert wire.call(3, 1, topics=None).brokers  # 3.6 s in: past the first session's end
    wire.close()


@pytest.mark.parametrize("auth", ["as_bob", "malformed"])
def test_a_failed_reauthentication_signs_the_connection_out(short_lived, member, auth):
    """Re-authenticating as another user, or with a garbled message, fails; the connection is
    then no longer signed in, and its next request closes it."""
    wire, _ = signed_in(short_lived)
    wire.call(17, 1, mechanism="PLAIN")
    message = f"\0bob\0{sasl_token(member)}" if auth == "as_bob" else "no separators"
    assert wire.call(36, 2, auth_bytes=message.encode()).error_code != 0
    wire.send(3, 1, topics=None)
    assert wire.closed()


def test_confluent_keeps_consuming_across_several_session_lifetimes(short_lived, owner):
    """librdkafka re-authenticates before each session ends (its debug log says so) and its
    consumer never misses a message nor gets cut off."""
    orders_topic(owner, 1)
    got, lines = consume_across_lifetimes(short_lived)
    assert got == [f"m{i}".encode() for i in range(8)]
    assert sum("Auth in state REAUTH" in line for line in lines) >= 3, lines
    assert "after the SASL session expired" not in short_lived.listeners.log()


def consume_across_lifetimes(endpoint) -> tuple[list[bytes], list[str]]:  # type: ignore[no-untyped-def]
    """Produce and consume 8 messages about 0.9 s apart through `endpoint` (more than three
    2 s session lifetimes); the values consumed and librdkafka's security debug lines."""
    lines: list[str] = []
    logger = logging.getLogger(f"rdkafka-{uuid.uuid4().hex[:6]}")
    logger.addHandler(_Collect(lines))
    logger.setLevel(logging.DEBUG)
    consumer = Consumer({**endpoint.confluent(), "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 200,
                         "debug": "security", "logger": logger})
    consumer.assign([TopicPartition(NAME, 0, 0)])
    producer = Producer(endpoint.confluent())
    got: list[bytes] = []
    try:
        for i in range(8):
            producer.produce(NAME, f"m{i}".encode(), partition=0)
            assert producer.flush(10) == 0
            got += _poll_for(consumer, 0.9)
    finally:
        consumer.close()
    return got, lines


def _poll_for(consumer: Consumer, seconds: float) -> list[bytes]:
    values, deadline = [], time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        msg = consumer.poll(left)
        if msg is not None:
            assert msg.error() is None, msg.error()
            values.append(msg.value())
    return values


class _Collect(logging.Handler):
    def __init__(self, lines: list[str]) -> None:
        super().__init__()
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())
