"""kcat (librdkafka's command line, from Debian) produces and consumes through the listener
with every codec, keys and headers; so does kafkajs (from npm, with its codec plugins), whose
consumer always joins a group."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from replication.stores import store_for
from tests.broker.conftest import orders_topic

pytestmark = pytest.mark.slow
NAME = "/mapr/c1/apps:orders"


@pytest.fixture
def topic(owner):
    return orders_topic(owner, 2)


def kcat(endpoint, *args: str, stdin: str | None = None) -> str:  # type: ignore[no-untyped-def]
    done = subprocess.run(
        ["kcat", "-b", endpoint.bootstrap, "-X", "security.protocol=SASL_PLAINTEXT",
         "-X", "sasl.mechanisms=PLAIN", "-X", f"sasl.username={endpoint.username}",
         "-X", f"sasl.password={endpoint.password}", *args],
        input=stdin, capture_output=True, text=True, timeout=120, check=True)
    return done.stdout


def stored(topic) -> list:
    store = store_for(topic.stream.cluster)
    return [m for p in (0, 1) for m in store.read(topic.stream.uuid, "orders", p, 0)]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_kcat_produces_and_consumes_with_every_codec_keys_and_headers(kafka, topic, codec):
    lines = "".join(f"k{i % 3}\t{codec}-{i}\n" for i in range(50))
    kcat(kafka, "-P", "-t", NAME, "-z", codec, "-K", "\t", "-H", "source=kcat", stdin=lines)
    out = kcat(kafka, "-C", "-t", NAME, "-o", "beginning", "-e", "-J")
    got = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert sorted((m["key"], m["payload"]) for m in got) == sorted(
        (f"k{i % 3}", f"{codec}-{i}") for i in range(50))
    assert all(m["headers"] == ["source", "kcat"] for m in got)
    assert len(stored(topic)) == 50


def kafkajs(kafka, script: str, *args: str) -> dict:  # type: ignore[no-untyped-def]
    answer = kafka.kafkajs(script, *args)
    assert "error" not in answer, answer
    return answer


CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.mark.parametrize("codec", CODECS)
def test_kafkajs_produces_with_every_codec_keys_and_headers(kafka, topic, codec):
    assert "acks" in kafkajs(kafka, "produce.js", NAME, "40", codec)
    messages = stored(topic)
    assert sorted(m.value for m in messages) == sorted(
        f"js-{codec}-{i}".encode() for i in range(40))
    assert {m.headers for m in messages} == {(("h", m.value.split(b"-")[-1]),) for m in messages}
    assert {m.key for m in messages} == {b"k0", b"k1", b"k2", b"k3"}


def test_kafkajs_consumes_every_codec_in_a_group_and_commits(kafka, topic):
    for codec in CODECS:
        kafkajs(kafka, "produce.js", NAME, "20", codec)
    got = kafkajs(kafka, "consume.js", NAME, "js-group", "100")["messages"]
    assert sorted(m["value"] for m in got) == sorted(
        f"js-{codec}-{i}" for codec in CODECS for i in range(20))
    assert all(m["headers"] == {"h": m["value"].split("-")[-1]} for m in got)
    assert all(m["key"] == f"k{int(m['value'].split('-')[-1]) % 4}" for m in got)
    # the key decides the partition (murmur2, as the Java client): both partitions are read
    assert {m["partition"] for m in got} == {0, 1}
    ends = {p: 1 + max(m["offset"] for m in got if m["partition"] == p) for p in (0, 1)}
    # kafkajs commits as it goes and on disconnect: the group's cursors end past what it read
    committed = store_for(topic.stream.cluster).cursors(topic.stream.uuid)
    assert {(t, p): offset for group, t, p, offset in committed if group == "js-group"} == {
        ("orders", p): end for p, end in ends.items()}


def test_kcat_producing_to_a_plain_name_without_a_default_stream_fails_at_once(kafka):
    """A newcomer's first `kcat -P -t orders` with no default stream set waited with its
    message queued (the topic might yet appear); now it fails at once, and the listener's log
    says which setting is missing."""
    started = time.monotonic()
    done = subprocess.run(
        ["kcat", "-P", "-t", "orders", "-b", kafka.bootstrap,
         "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=PLAIN",
         "-X", f"sasl.username={kafka.username}", "-X", f"sasl.password={kafka.password}"],
        input="hello\n", capture_output=True, text=True, timeout=120)
    assert time.monotonic() - started < 20, done.stderr
    assert "Invalid topic" in done.stderr
    assert "no default stream is set" in kafka.listeners.log()
