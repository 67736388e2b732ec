"""Record batches as real clients send them: a relay between the client and the listener (which
advertises the relay's address) keeps every Produce request; each captured batch decodes
with replication/engine/recordbatch.py to exactly the messages sent, in every codec, and its
CRC checks."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from kio.index import load_request_schema
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2

from broker.codec import reader
from replication.engine.recordbatch import CODECS, decode_batches
from tests.broker.conftest import orders_topic

pytestmark = pytest.mark.slow
NAME = "/mapr/c1/apps:orders"


class Relay:
    """Forwards connections to `target`, keeping each client request frame's payload."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.frames: list[bytes] = []
        self.target: tuple[str, int] | None = None
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)  # type: ignore[arg-type]
            threading.Thread(target=self._requests, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client), daemon=True).start()

    def _requests(self, src: socket.socket, dst: socket.socket) -> None:
        with src, dst:
            while (head := _exactly(src, 4)) is not None:
                payload = _exactly(src, struct.unpack(">i", head)[0])
                if payload is None:
                    return
                self.frames.append(payload)
                dst.sendall(head + payload)

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass

    def produce_requests(self) -> Iterator:
        for payload in self.frames:
            api_key, version = struct.unpack_from(">hh", payload)
            if api_key != 0:
                continue
            cls = load_request_schema(0, version)
            header_cls = RequestHeaderV2 if cls.__flexible__ else RequestHeaderV1
            _, size = reader(header_cls)(payload, 0)
            yield reader(cls)(payload, size)[0]


def _exactly(sock: socket.socket, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        try:
            chunk = sock.recv(n - len(data))
        except OSError:
            return None
        if not chunk:
            return None
        data += chunk
    return data


@pytest.fixture
def topic(owner):
    return orders_topic(owner, 2)


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_librdkafka_batches_decode_to_what_was_sent(kafka_listeners, owner, topic, codec):
    from tests.broker.conftest import sasl_token

    relay = Relay()
    bootstrap = kafka_listeners.start("k1", "--advertise", f"127.0.0.1:{relay.port}")
    relay.target = ("127.0.0.1", int(bootstrap.rsplit(":", 1)[1]))
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{relay.port}",
                         "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                         "sasl.username": owner.get_username(), "sasl.password": sasl_token(owner),
                         "compression.codec": codec, "linger.ms": 20})
    sent = [(b"%s value %d " % (codec.encode(), i) * 8, b"key%d" % (i % 4)) for i in range(200)]
    for value, key in sent:
        producer.produce(NAME, value, key, headers=[("origin", b"librdkafka")])
    assert producer.flush(30) == 0
    decoded, codecs = [], set()
    for request in relay.produce_requests():
        for data in request.topic_data:
            for part in data.partition_data:
                for batch in decode_batches(part.records, part.index):
                    codecs.add(batch.codec)
                    decoded += batch.records
    assert sorted((r.value, r.key) for r in decoded) == sorted(sent)
    assert all(r.headers == (("origin", b"librdkafka"),) for r in decoded)
    assert codecs == {expected_codec(codec)}


def expected_codec(codec: str) -> int:
    """librdkafka takes a broker to know LZ4 only when it advertises FindCoordinator (its
    feature map's proxy for Kafka 0.8.2+), and sends uncompressed batches otherwise."""
    import broker.apis  # noqa: F401  (registers every handler)
    from broker.dispatch import registry

    if codec == "lz4" and 10 not in registry:
        return CODECS["none"]
    return CODECS[codec]
