"""SASL_SSL: with a certificate and key configured the listener speaks TLS only."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer

pytestmark = pytest.mark.slow


def self_signed(directory: Path) -> tuple[Path, Path]:
    cert, key = directory / "listener.pem", directory / "listener.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    return cert, key


def test_tls_listener_serves_sasl_ssl_and_refuses_plaintext(kafka_listeners, owner, tmp_path):
    from tests.broker.conftest import KafkaEndpoint, sasl_token

    cert, key = self_signed(tmp_path)
    bootstrap = kafka_listeners.start("tls", env={"STREAMGATE_KAFKA_TLS_CERT": str(cert),
                                                  "STREAMGATE_KAFKA_TLS_KEY": str(key)})
    endpoint = KafkaEndpoint(bootstrap, "alice", sasl_token(owner), kafka_listeners)
    secure = endpoint.confluent(**{"security.protocol": "SASL_SSL",
                                   "ssl.ca.location": str(cert)})
    assert Producer(secure).list_topics(timeout=20).brokers
    with pytest.raises(KafkaException):
        Producer(endpoint.confluent()).list_topics(timeout=3)
    assert "tls=True" in kafka_listeners.log("tls") or '"tls": true' in kafka_listeners.log(
        "tls")
