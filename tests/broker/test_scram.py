"""SASL/SCRAM-SHA-256 and -512 through the listener with real clients: a user's SCRAM password
signs in beside their API tokens (PLAIN), a wrong one is refused like a wrong token, and a
SCRAM sign-in re-authenticates (KIP-368) and is revoked like a token's."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaPythonPartition
from kafka.errors import KafkaError as KafkaPythonError

from accounts.models import ScramCredential
from replication.names import kafka_legal_name
from replication.services.credentials import scram_credential_delete, scram_credential_set
from tests.broker.conftest import KafkaEndpoint, orders_topic, sasl_token, scram_password
from tests.broker.wire import Wire

pytestmark = pytest.mark.slow
NAME = "/mapr/c1/apps:orders"
MECHANISMS = ["SCRAM-SHA-256", "SCRAM-SHA-512"]
BOUND = 5.0  # one revocation check interval (2 s), the check and the close, with room


def produce_and_consume(endpoint: KafkaEndpoint, values: list[bytes]) -> list[bytes]:
    producer = Producer(endpoint.confluent())
    for value in values:
        producer.produce(NAME, value, partition=0)
    assert producer.flush(30) == 0
    consumer = Consumer(endpoint.confluent(**{"group.id": f"g-{uuid.uuid4().hex[:6]}"}))
    consumer.assign([TopicPartition(NAME, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < len(values) and time.monotonic() < deadline:
        msg = consumer.poll(1)
        if msg is not None:
            assert msg.error() is None, msg.error()
            got.append(msg.value())
    consumer.close()
    return got


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_produces_and_consumes_with_a_scram_password(kafka, owner, mechanism):
    orders_topic(owner, 1)
    values = [f"{mechanism}-{i}".encode() for i in range(5)]
    assert produce_and_consume(kafka.scram(owner, mechanism), values) == values


def test_kafka_python_produces_and_consumes_with_scram(kafka, owner):
    name = kafka_legal_name(orders_topic(owner, 1).stream.path, "orders")
    endpoint = kafka.scram(owner, "SCRAM-SHA-512")
    producer = KafkaProducer(**endpoint.kafka_python(acks="all"))
    producer.send(name, b"from kafka-python", partition=0).get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(**endpoint.kafka_python(consumer_timeout_ms=20000,
                                                     auto_offset_reset="earliest"))
    consumer.assign([KafkaPythonPartition(name, 0)])
    assert next(iter(consumer)).value == b"from kafka-python"
    consumer.close()


def test_confluent_with_a_wrong_scram_password_is_refused(kafka, owner):
    orders_topic(owner, 1)
    scram_password(owner, "SCRAM-SHA-256")
    wrong = KafkaEndpoint(kafka.bootstrap, "alice", "not-the-password", kafka.listeners,
                          "SCRAM-SHA-256")
    seen: list[KafkaError] = []
    producer = Producer(wrong.confluent(error_cb=seen.append))
    deadline = time.monotonic() + 20
    while not seen and time.monotonic() < deadline:
        producer.poll(0.2)
    assert seen and seen[0].code() == KafkaError._AUTHENTICATION, seen
    assert "authentication failed for 'alice' with SCRAM-SHA-256" in seen[0].str()


@pytest.mark.parametrize("who", ["wrong password", "unknown user", "token as password",
                                 "other mechanism's password"])
def test_every_wrong_scram_sign_in_fails_at_the_proof_and_closes(kafka, owner, who):
    """Whether the user exists, or has a credential for the mechanism, is never told: the
    first round succeeds alike (a decoy salt), the proof fails, and the connection closes."""
    scram_password(owner, "SCRAM-SHA-512", "right")
    username, password, mechanism = {
        "wrong password": ("alice", "wrong", "SCRAM-SHA-512"),
        "unknown user": ("mallory", "right", "SCRAM-SHA-512"),
        "token as password": ("alice", sasl_token(owner), "SCRAM-SHA-512"),
        "other mechanism's password": ("alice", "right", "SCRAM-SHA-256"),
    }[who]
    wire = Wire(kafka.bootstrap)
    started = time.monotonic()
    first, final = wire.scram_authenticate(username, password, mechanism)
    assert first.error_code == 0 and final.error_code == 58  # SASL_AUTHENTICATION_FAILED
    assert time.monotonic() - started >= 0.1  # Kafka's failed-authentication delay
    assert "SCRAM password" in final.error_message
    assert wire.closed()


def test_a_scram_password_and_tokens_sign_in_side_by_side(kafka, owner):
    scram_password(owner, "SCRAM-SHA-256", "pw")
    scram = Wire(kafka.bootstrap)
    assert scram.scram_authenticate("alice", "pw")[1].error_code == 0
    plain = Wire(kafka.bootstrap)
    assert plain.authenticate("alice", sasl_token(owner)).error_code == 0
    for wire in (scram, plain):
        assert wire.call(3, 1, topics=None).brokers
        wire.close()


def test_the_handshake_offers_the_enabled_mechanisms(kafka_listeners, owner):
    every = Wire(kafka_listeners.start("k1"))
    answer = every.call(17, 1, mechanism="GSSAPI")
    assert answer.error_code == 33  # UNSUPPORTED_SASL_MECHANISM, and what is supported
    assert list(answer.mechanisms) == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
    only_plain = Wire(kafka_listeners.start(
        "k2", env={"STREAMGATE_KAFKA_SASL_MECHANISMS": "PLAIN"}))
    answer = only_plain.call(17, 1, mechanism="SCRAM-SHA-256")
    assert answer.error_code == 33 and list(answer.mechanisms) == ["PLAIN"]


def test_too_many_failed_scram_sign_ins_are_throttled_like_plain_ones(kafka_listeners, owner):
    bootstrap = kafka_listeners.start("k1", env={"STREAMGATE_KAFKA_SASL_FAILURE_LIMIT": "2"})
    scram_password(owner, "SCRAM-SHA-256", "right")
    for _ in range(2):
        assert Wire(bootstrap).scram_authenticate("alice", "wrong")[1].error_code == 58
    first, final = Wire(bootstrap).scram_authenticate("alice", "right")
    assert first.error_code == 58 and final is None
    assert "too many failed sign-ins" in first.error_message


def test_scram_over_the_bare_frames_of_handshake_v0(kafka, owner):
    """Old clients send SaslHandshake v0, then each SASL message as a bare frame."""
    from scramp import ScramClient

    scram_password(owner, "SCRAM-SHA-256", "pw")
    wire = Wire(kafka.bootstrap)
    assert wire.call(17, 0, mechanism="SCRAM-SHA-256").error_code == 0
    client = ScramClient(["SCRAM-SHA-256"], "alice", "pw")
    for send, take in ((client.get_client_first, client.set_server_first),
                       (client.get_client_final, client.set_server_final)):
        message = send().encode()
        wire.send_raw(len(message).to_bytes(4, "big") + message)
        take(wire.read_frame().decode())  # the last proves the listener knows the key
    assert wire.call(3, 1, topics=None).brokers


def test_reauthenticating_with_scram_extends_the_session(kafka_listeners, owner):
    bootstrap = kafka_listeners.start("k1", env={"STREAMGATE_KAFKA_SESSION_LIFETIME": "2"})
    scram_password(owner, "SCRAM-SHA-512", "pw")
    wire = Wire(bootstrap)
    assert wire.scram_authenticate("alice", "pw", "SCRAM-SHA-512")[1].session_lifetime \
        .total_seconds() == 2
    for _ in range(3):
        time.sleep(1.2)
        final = wire.scram_authenticate("alice", "pw", "SCRAM-SHA-512")[1]
        assert final.error_code == 0 and final.session_lifetime.total_seconds() == 2
    assert wire.call(3, 1, topics=None).brokers  # 3.6 s in: past the first session's end
    assert wire.call(17, 1, mechanism="PLAIN").error_code == 34  # ILLEGAL_SASL_STATE
    wire.close()


def test_confluent_keeps_consuming_with_scram_across_session_lifetimes(kafka_listeners,
                                                                        owner):
    from tests.broker.apis.test_sasl import consume_across_lifetimes

    orders_topic(owner, 1)
    bootstrap = kafka_listeners.start("k1", env={"STREAMGATE_KAFKA_SESSION_LIFETIME": "2"})
    endpoint = KafkaEndpoint(bootstrap, "alice", "", kafka_listeners).scram(
        owner, "SCRAM-SHA-256")
    got, lines = consume_across_lifetimes(endpoint)
    assert got == [f"m{i}".encode() for i in range(8)]
    assert sum("Auth in state REAUTH" in line for line in lines) >= 3, lines
    assert "after the SASL session expired" not in kafka_listeners.log()


@pytest.mark.parametrize("how", ["deleted", "password changed", "user deactivated"])
def test_a_revoked_scram_credential_closes_its_connections(kafka, owner, how):
    scram_password(owner, "SCRAM-SHA-256", "pw")
    wire = Wire(kafka.bootstrap, timeout=30)
    assert wire.scram_authenticate("alice", "pw")[1].error_code == 0
    other = Wire(kafka.bootstrap, timeout=30)  # signed in with a token: untouched
    assert other.authenticate("alice", sasl_token(owner)).error_code == 0
    if how == "deleted":
        scram_credential_delete(actor=owner, mechanism="SCRAM-SHA-256")
    elif how == "password changed":
        scram_credential_set(actor=owner, mechanism="SCRAM-SHA-256", password="new")
    else:
        type(owner).objects.filter(pk=owner.pk).update(is_active=False)
    started = time.monotonic()
    assert wire.sock.recv(1) == b""
    assert time.monotonic() - started < BOUND
    if how != "user deactivated":
        assert other.call(3, 1, topics=None).brokers
    assert ScramCredential.objects.filter(user=owner).count() == (0 if how == "deleted" else 1)


def test_kafka_python_with_a_wrong_scram_password_fails(kafka, owner, caplog):
    name = kafka_legal_name(orders_topic(owner, 1).stream.path, "orders")
    scram_password(owner, "SCRAM-SHA-256", "right")
    wrong = KafkaEndpoint(kafka.bootstrap, "alice", "wrong", kafka.listeners, "SCRAM-SHA-256")
    producer = KafkaProducer(**wrong.kafka_python(max_block_ms=3000))
    with pytest.raises(KafkaPythonError):
        producer.send(name, b"never stored", partition=0).get(timeout=5)
    producer.close(timeout=1)
    assert "SaslAuthenticationFailedError" in caplog.text
