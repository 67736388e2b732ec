"""Random frames against a running listener, before and after SASL: it never crashes, never
fails unexpectedly (no `connection_failed` in its log), and never writes a message."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replication.stores import store_for
from tests.broker.wire import Wire
from tests.factories import ClusterFactory, StreamFactory, TopicFactory

pytestmark = pytest.mark.slow
# Every API key a listener may register (this branch's and the data and group families').
API_KEYS = [0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 22, 32, 36, 37]


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


structured = st.builds(
    lambda key, version, correlation, body: framed(
        struct.pack(">hhih", key, version, correlation, -1) + body),
    st.sampled_from(API_KEYS), st.integers(-1, 16), st.integers(-(2**31), 2**31 - 1),
    st.binary(max_size=256))
frames = st.one_of(structured, st.binary(max_size=300).map(framed), st.binary(max_size=64))


@pytest.fixture
def target(kafka, owner):  # type: ignore[no-untyped-def]
    stream = StreamFactory(cluster=ClusterFactory(name="c1"), name="apps", created_by=owner,
                           tenant=owner.memberships.get().tenant)
    TopicFactory(stream=stream, name="orders", partitions=2)
    store_for(stream.cluster).ensure_topic(stream.uuid, "orders", 2)
    return kafka, stream


def _drain(wire: Wire) -> None:
    wire.sock.settimeout(0.2)
    try:
        while wire.sock.recv(65536):
            pass
    except (TimeoutError, ConnectionError):
        pass


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(sent=st.lists(frames, min_size=1, max_size=4), authenticated=st.booleans())
def test_random_frames_never_crash_the_listener_nor_write(target, sent, authenticated):
    kafka, stream = target
    wire = Wire(kafka.bootstrap)
    try:
        if authenticated:
            assert wire.authenticate(kafka.username, kafka.password).error_code == 0
        for frame in sent:
            try:
                wire.send_raw(frame)
            except ConnectionError:
                break  # the listener closed it, as it should for garbage
        _drain(wire)
    finally:
        wire.close()
    process, _ = kafka.listeners.processes["k1"]
    assert process.poll() is None, kafka.listeners.log()
    assert "connection_failed" not in kafka.listeners.log(), kafka.listeners.log()[-3000:]
    ends = store_for(stream.cluster).watermarks(stream.uuid, "orders")
    assert all(high == 0 for _, high in ends.values()), ends
