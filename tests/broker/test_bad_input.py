"""Bad input: each gets what a Kafka broker answers (or a closed connection), is logged once,
and no other client notices."""

from __future__ import annotations

import struct
import time

import pytest

from broker.errors import SASL_AUTHENTICATION_FAILED, UNSUPPORTED_VERSION
from tests.broker.conftest import KafkaEndpoint, sasl_token
from tests.broker.wire import Wire

pytestmark = pytest.mark.slow


@pytest.fixture
def quick(kafka_listeners, owner) -> KafkaEndpoint:
    """A listener that closes idle connections after a second."""
    bootstrap = kafka_listeners.start("quick", env={"STREAMGATE_KAFKA_IDLE_SECONDS": "1",
                                                    "STREAMGATE_KAFKA_MAX_REQUEST_BYTES": "65536"})
    return KafkaEndpoint(bootstrap, "alice", sasl_token(owner), kafka_listeners)


def healthy(endpoint: KafkaEndpoint) -> bool:
    wire = Wire(endpoint.bootstrap)
    try:
        return wire.authenticate(endpoint.username, endpoint.password).error_code == 0
    finally:
        wire.close()


def test_unknown_api_versions_version_gets_unsupported_version_in_v0_shape(quick):
    wire = Wire(quick.bootstrap)
    wire.send_raw(struct.pack(">ihhih", 10, 18, 99, 7, -1))  # ApiVersions v99, no body
    frame = wire.read_frame()
    correlation, error, count = struct.unpack_from(">ihi", frame)
    assert (correlation, error) == (7, UNSUPPORTED_VERSION)
    keys = {struct.unpack_from(">hhh", frame, 10 + 6 * i)[0] for i in range(count)}
    assert {18, 17, 36, 3} <= keys
    wire.close()


def test_garbage_frame_closes_only_its_connection_and_is_logged_once(quick):
    bystander = Wire(quick.bootstrap)
    bystander.authenticate(quick.username, quick.password)
    wire = Wire(quick.bootstrap)
    wire.send_raw(struct.pack(">i", 6) + b"\x7f\x7f\x00\x01\x02\x03")
    assert wire.closed()
    assert bystander.call(18, 3, client_software_name="t", client_software_version="1").api_keys
    assert quick.listeners.log("quick").count("connection_closed") == 1


def test_frame_over_the_size_limit_is_closed_before_it_is_read(quick):
    wire = Wire(quick.bootstrap)
    wire.send_raw(struct.pack(">i", 10_000_000))
    assert wire.closed()
    assert "socket.request.max.bytes" in quick.listeners.log("quick")
    assert healthy(quick)


def test_request_before_authentication_closes_the_connection(quick):
    wire = Wire(quick.bootstrap)
    wire.send(3, 12, topics=None, allow_auto_topic_creation=False)
    assert wire.closed()
    assert "before SASL authentication" in quick.listeners.log("quick")


def test_wrong_token_gets_sasl_authentication_failed(quick):
    wire = Wire(quick.bootstrap)
    answer = wire.authenticate("alice", "wrong")
    assert answer.error_code == SASL_AUTHENTICATION_FAILED and "API tokens" in answer.error_message
    assert healthy(quick)


@pytest.mark.parametrize("sent", [b"", struct.pack(">i", 100) + b"half a frame"])
def test_a_silent_or_stalled_client_is_cut_off_after_the_idle_time(quick, sent):
    wire = Wire(quick.bootstrap)
    wire.send_raw(sent)
    started = time.monotonic()
    assert wire.closed()
    assert 0.5 < time.monotonic() - started < 8
    assert "connection_idle_closed" in quick.listeners.log("quick")
    assert healthy(quick)
