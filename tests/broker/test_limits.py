"""What a live listener takes from a client before and after sign-in (broker/limits.py,
server.py, apis/sasl.py, records.py): small frames and a deadline before sign-in, a deadline
per frame, connections per address, failed sign-ins answered then closed and throttled per
address, compressed batches decoded within the batch limit whatever they expand to (a
hypothesis fuzz of every codec at up to 10,000:1, the listener's peak RSS bounded); each
refusal counted in /metrics."""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import cramjam
import lz4.frame
import pytest
import zstandard
from crc32c import crc32c
from django.conf import settings as django_settings
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from broker.errors import (
    MESSAGE_TOO_LARGE,
    RECORD_LIST_TOO_LARGE,
    SASL_AUTHENTICATION_FAILED,
)
from replication.engine.recordbatch import CODECS, RECORD_COST
from tests.broker.conftest import KafkaEndpoint, orders_topic, sasl_token
from tests.broker.wire import Wire

pytestmark = pytest.mark.slow
TIGHT = {"STREAMGATE_KAFKA_AUTH_SECONDS": "2", "STREAMGATE_KAFKA_FRAME_SECONDS": "1",
         "STREAMGATE_KAFKA_IDLE_SECONDS": "30", "STREAMGATE_KAFKA_CONNECTIONS_PER_IP": "4",
         "STREAMGATE_KAFKA_SASL_FAILURE_LIMIT": "3"}


@pytest.fixture
def tight(kafka_listeners, owner) -> KafkaEndpoint:
    bootstrap = kafka_listeners.start("tight", env=TIGHT)
    return KafkaEndpoint(bootstrap, "alice", sasl_token(owner), kafka_listeners)


def versions(wire: Wire) -> bool:
    return bool(wire.call(18, 3, client_software_name="t", client_software_version="1").api_keys)


def closed_within(wire: Wire, seconds: float) -> float:
    """How long the listener took to close `wire` (fails past `seconds`)."""
    started = time.monotonic()
    wire.sock.settimeout(seconds)
    assert wire.closed()
    return time.monotonic() - started


def rss_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0])


def test_a_frame_over_512_kib_before_sign_in_is_refused_unread(kafka):
    pid = kafka.listeners.processes["k1"][0].pid
    before = rss_kib(pid)
    for _ in range(3):  # three 95 MiB frames announced, 8 MiB of each sent, no sign-in
        wire = Wire(kafka.bootstrap)
        wire.send_raw(struct.pack(">i", 95 << 20))
        with contextlib.suppress(OSError):  # closed already
            wire.send_raw(bytes(8 << 20))
        closed_within(wire, 5)
    assert rss_kib(pid) - before < 16 << 10
    assert "sasl.server.max.receive.size" in kafka.listeners.log()
    signed_in = Wire(kafka.bootstrap)  # after sign-in, socket.request.max.bytes applies
    assert signed_in.authenticate(kafka.username, kafka.password).error_code == 0
    signed_in.send_raw(struct.pack(">ihhih", (1 << 20) + 10, 18, 99, 1, -1) + bytes(1 << 20))
    assert struct.unpack_from(">i", signed_in.read_frame())[0] == 1


def test_a_client_that_does_not_sign_in_in_time_is_closed(tight):
    wire = Wire(tight.bootstrap)
    assert versions(wire)
    assert 1.5 < closed_within(wire, 6) < 5  # the sign-in deadline, not the 30 s idle time
    assert "STREAMGATE_KAFKA_AUTH_SECONDS" in tight.listeners.log("tight")


def test_a_frame_trickled_a_byte_at_a_time_is_cut_at_the_frame_deadline(tight):
    wire = Wire(tight.bootstrap)
    assert wire.authenticate(tight.username, tight.password).error_code == 0
    wire.send_raw(struct.pack(">i", 100))
    started = time.monotonic()
    with pytest.raises(OSError):
        while time.monotonic() - started < 8:  # a byte every 0.3 s, never idle for long
            wire.send_raw(b"x")
            time.sleep(0.3)
            wire.sock.settimeout(0.01)
            try:
                if wire.sock.recv(1) == b"":
                    raise ConnectionResetError("closed by the listener")
            except TimeoutError:
                pass
    assert time.monotonic() - started < 4
    assert "STREAMGATE_KAFKA_FRAME_SECONDS" in tight.listeners.log("tight")


def test_connections_past_the_per_address_limit_are_closed_at_once(tight):
    held = [Wire(tight.bootstrap) for _ in range(4)]
    assert all(versions(wire) for wire in held)
    extra = Wire(tight.bootstrap)
    assert closed_within(extra, 2) < 1
    held.pop().close()
    time.sleep(0.2)
    again = Wire(tight.bootstrap)
    assert versions(again)
    assert "STREAMGATE_KAFKA_CONNECTIONS_PER_IP" in tight.listeners.log("tight")


def test_a_failed_sign_in_is_answered_then_the_connection_closed(tight):
    wire = Wire(tight.bootstrap)
    answer = wire.authenticate("alice", "wrong")
    assert answer.error_code == SASL_AUTHENTICATION_FAILED and "API tokens" in answer.error_message
    assert closed_within(wire, 2) < 1


def test_failed_sign_ins_past_the_limit_refuse_even_the_right_token(tight):
    started = time.monotonic()
    for _ in range(3):
        wire = Wire(tight.bootstrap)
        assert wire.authenticate("alice", "wrong").error_code == SASL_AUTHENTICATION_FAILED
        wire.close()
    assert time.monotonic() - started > 0.3  # Kafka's 100 ms delay before each failure answer
    wire = Wire(tight.bootstrap)
    answer = wire.authenticate(tight.username, tight.password)
    assert answer.error_code == SASL_AUTHENTICATION_FAILED
    assert "too many failed sign-ins from 127.0.0.1" in answer.error_message


def test_refusals_are_counted_in_metrics(tight, client, operator, settings):
    for _ in range(2):
        Wire(tight.bootstrap).authenticate("alice", "wrong")
    wire = Wire(tight.bootstrap)
    wire.send_raw(struct.pack(">i", 1 << 20))
    closed_within(wire, 2)
    held = [Wire(tight.bootstrap) for _ in range(5)]
    closed_within(held[-1], 2)
    # The listener counts in the shared cache under its namespace: read that one.
    cache = {**settings.CACHES["default"],
             "KEY_PREFIX": f"{tight.listeners.env['STREAMGATE_NAMESPACE']}cache"}
    settings.CACHES = {"default": cache}
    client.force_login(operator)
    deadline = time.monotonic() + 5
    while True:
        text = client.get("/metrics").content.decode()
        found = {reason: _sample(text, reason) for reason in
                 ("sasl_failed", "frame_before_sign_in", "connections_per_address")}
        if found == {"sasl_failed": 2, "frame_before_sign_in": 1,
                     "connections_per_address": 1} or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert found == {"sasl_failed": 2, "frame_before_sign_in": 1, "connections_per_address": 1}
    assert _sample(text, "sign_in_timeout") == 0


def _sample(text: str, reason: str) -> float:
    line = f'streamgate_kafka_refused_total{{reason="{reason}"}} '
    return float(text.split(line)[1].split()[0])


def test_a_silent_unauthenticated_crowd_is_dropped(tight):
    host, port = tight.bootstrap.rsplit(":", 1)
    crowd = [socket.create_connection((host, int(port))) for _ in range(3)]
    time.sleep(3)  # past the sign-in deadline
    for sock in crowd:
        sock.settimeout(2)
        assert sock.recv(1) == b""


# --- compressed batches ------------------------------------------------------------------------

MEMORY_BOUND_KIB = 64 << 10  # the listener's peak RSS stays within its baseline plus this
TOPIC = "/mapr/c1/apps:orders"
COMPRESSED = [CODECS[name] for name in ("gzip", "snappy", "lz4", "zstd")]


def _zigzag(value: int) -> bytes:
    n, out = (value << 1) ^ (value >> 63), bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _head(delta: int, size: int) -> bytes:
    """A record's attributes, timestamp and offset deltas, no key, and its value's length."""
    return b"\0" + _zigzag(0) + _zigzag(delta) + _zigzag(-1) + _zigzag(size)


def decoded_size(values: list[tuple[int, int]]) -> int:
    """The bytes of the records section _records makes of `values`."""
    sizes = [len(_head(delta, n + z)) + n + z + 1 for delta, (n, z) in enumerate(values)]
    return sum(len(_zigzag(size)) + size for size in sizes)


def _records(values: list[tuple[int, int]]) -> Iterator[bytes]:
    """The records section of a batch whose values are (random bytes, zeros) long, in pieces of
    at most a MiB, never whole (a GiB of them is sent from a test that holds a few KB)."""
    for delta, (noise, zeros) in enumerate(values):
        head = _head(delta, noise + zeros)
        yield _zigzag(len(head) + noise + zeros + 1) + head + os.urandom(noise)
        while zeros:
            yield bytes(min(zeros, 1 << 20))
            zeros -= min(zeros, 1 << 20)
        yield b"\0"  # no headers


def _packed(codec: int, pieces: Iterator[bytes]) -> bytes:
    """`pieces` compressed as a stream, the way the clients frame each codec."""
    if codec == CODECS["snappy"]:  # xerial blocks, as the Java client sends
        blocks = (bytes(cramjam.snappy.compress_raw(p)) for p in pieces)
        return b"\x82SNAPPY\0" + struct.pack(">ii", 1, 1) + b"".join(
            struct.pack(">i", len(b)) + b for b in blocks)
    if codec == CODECS["gzip"]:
        stream = zlib.compressobj(wbits=31)
        return b"".join([*map(stream.compress, pieces), stream.flush()])
    if codec == CODECS["lz4"]:
        frame = lz4.frame.LZ4FrameCompressor()
        return b"".join([frame.begin(), *map(frame.compress, pieces), frame.flush()])
    stream = zstandard.ZstdCompressor().compressobj()
    return b"".join([*map(stream.compress, pieces), stream.flush()])


def compressed_batch(codec: int, values: list[tuple[int, int]]) -> bytes:
    body = _packed(codec, _records(values))
    tail = struct.pack(">hiqqqhii", codec, len(values) - 1, 1000, 1000, -1, -1, -1,
                       len(values)) + body
    return struct.pack(">qiibI", 0, len(tail) + 9, 0, 2, crc32c(tail)) + tail


def produce_raw(wire: Wire, *batches: bytes) -> list[tuple[int, str | None]]:
    """A Produce v8 of `batches` to partitions 0, 1, ...: each partition's (error code,
    message)."""
    answer = wire.call(0, 8, transactional_id=None, acks=-1, timeout_ms=30_000, topic_data=[
        {"name": TOPIC, "partition_data": [{"index": i, "records": batch}
                                           for i, batch in enumerate(batches)]}])
    return [(p.error_code, p.error_message) for p in answer.responses[0].partition_responses]


def peak_since_reset_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmHWM:")[1].split()[0])


def reset_peak(pid: int) -> int:
    """Reset the process's peak RSS (VmHWM) to its RSS now, which it returns."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    return rss_kib(pid)


@pytest.fixture
def bombable(kafka, owner):  # type: ignore[no-untyped-def]
    """A signed-in connection to a listener with orders (4 partitions), warmed up: every codec
    has decoded and stored a batch once. Also whether the store keeps batches as sent (a
    batch store applies max.message.bytes to a batch's bytes, as Kafka does)."""
    from replication.services.messages import keeps_batches

    keeps = keeps_batches(orders_topic(owner, 4).stream)
    wire = Wire(kafka.bootstrap, timeout=60)
    assert wire.authenticate(kafka.username, kafka.password).error_code == 0
    for codec in COMPRESSED:
        assert produce_raw(wire, compressed_batch(codec, [(1000, 900_000)] * 4)) == [(0, None)]
    pid = kafka.listeners.processes["k1"][0].pid
    yield kafka, wire, pid, reset_peak(pid), keeps
    wire.close()


def test_compression_bombs_at_once_are_refused_and_the_listener_stays_small(bombable):
    kafka, wire, pid, baseline, _keeps = bombable
    gib = compressed_batch(CODECS["zstd"], [(0, 1 << 30)])  # 1 GiB of zeros, about 33 KB
    assert len(gib) < 64 << 10
    others = [Wire(kafka.bootstrap, timeout=60) for _ in range(2)]
    for other in others:
        assert other.authenticate(kafka.username, kafka.password).error_code == 0
        other.send(0, 8, transactional_id=None, acks=-1, timeout_ms=30_000, topic_data=[
            {"name": TOPIC, "partition_data": [{"index": i, "records": gib} for i in range(4)]}])
    answers = produce_raw(wire, gib, gib, gib, gib)
    for other in others:
        assert [p.error_code for p in other.response(0, 8).responses[0].partition_responses] == [
            RECORD_LIST_TOO_LARGE] * 4
    assert {code for code, _ in answers} == {RECORD_LIST_TOO_LARGE}
    assert "STREAMGATE_KAFKA_MAX_BATCH_BYTES" in answers[0][1]
    assert peak_since_reset_kib(pid) - baseline < MEMORY_BOUND_KIB


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(codec=st.sampled_from(COMPRESSED), count=st.integers(1, 4),
       # 2^10 to 2^28 bytes, drawn mostly large (hypothesis favours small numbers): bombs
       exponent=st.integers(0, 18).map(lambda k: 28 - k), spread=st.floats(1, 2),
       ratio_exponent=st.floats(0, 4))
def test_compressed_batches_of_any_ratio_keep_the_listener_within_its_memory_bound(
        bombable, codec, count, exponent, spread, ratio_exponent):
    """Records of noise and zeros, 1 KiB to 256 MiB decompressed (64 MiB for snappy), at 1:1
    to 10,000:1 (at most 2 MiB of noise, so frames stay under about 3 MB: a frame costs a few
    times its size to read and parse, compressed or not): each batch within the limits is
    stored, each past them refused, and the listener's peak RSS stays within its baseline
    (after a warm-up) plus MEMORY_BOUND_KIB."""
    _, wire, pid, baseline, keeps_batches = bombable
    if codec == CODECS["snappy"]:  # at most 21:1: past 64 MiB its frames alone cost the bound
        exponent = min(exponent, 25)
    size = int(2**exponent * spread) // count
    noise = min(int(size / 10**ratio_exponent), 2 << 20)  # at most 2 MiB sent uncompressed
    values = [(noise, size - noise)] * count
    batch = compressed_batch(codec, values)
    ((code, message),) = produce_raw(wire, batch)
    event(f"codec {codec}: error code {code}")
    # The maximum message size: of a record's key, value and headers on a row store; of the
    # batch as sent (compressed) on a store that keeps batches, as Kafka's max.message.bytes.
    message_size = len(batch) if keeps_batches else size
    if decoded_size(values) + count * RECORD_COST > django_settings.KAFKA_MAX_BATCH_BYTES:
        assert code == RECORD_LIST_TOO_LARGE, message
    elif message_size > django_settings.MAX_MESSAGE_BYTES:
        assert code == MESSAGE_TOO_LARGE, message
    else:
        assert code == 0, message
    assert peak_since_reset_kib(pid) - baseline < MEMORY_BOUND_KIB
