"""The data path on the embedded default (SQLite stores, no Redis): an idempotent librdkafka
producer and a consumer through `manage.py runembedded`'s listener, plain names."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.workers.conftest import ROOT
from tests.workers.kafka.conftest import free_port
from tests.workers.kafka.test_embedded import MINT_TOKEN, manage

pytestmark = pytest.mark.slow


def test_embedded_listener_produces_idempotently_and_consumes_on_sqlite(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(STREAMGATE_DATA_DIR=str(tmp_path), STREAMGATE_ADMIN_USER="admin",
               STREAMGATE_ADMIN_PASSWORD="embedded-test-password-1")
    manage(env, "migrate", "--no-input", "-v", "0")
    manage(env, "ensureoperator")
    manage(env, "demoscene")
    token = manage(env, "shell", "-c", MINT_TOKEN).strip().splitlines()[-1]
    kafka_port = free_port()
    log_path = tmp_path / "embedded.log"
    log = log_path.open("ab")
    server = subprocess.Popen(
        [sys.executable, "manage.py", "runembedded", "--port", str(free_port()),
         "--kafka", f"127.0.0.1:{kafka_port}"], cwd=ROOT, env=env, stdout=log,
        stderr=subprocess.STDOUT)
    try:
        config = {"bootstrap.servers": f"127.0.0.1:{kafka_port}",
                  "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                  "sasl.username": "admin", "sasl.password": token}
        deadline = time.monotonic() + 90
        while "kafka listener ready" not in log_path.read_text():
            assert server.poll() is None and time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.2)
        reports: list = []
        producer = Producer({**config, "enable.idempotence": True, "linger.ms": 5,
                             "compression.codec": "lz4"})
        for i in range(500):
            producer.produce("orders", b"e%d" % i, key=b"k%d" % (i % 9),
                             headers=[("n", b"%d" % i)],
                             on_delivery=lambda e, m: reports.append((e, m)))
        assert producer.flush(60) == 0
        assert all(e is None for e, _ in reports)
        partitions = {m.partition() for _, m in reports}
        consumer = Consumer({**config, "group.id": "embedded", "enable.auto.commit": False})
        consumer.assign([TopicPartition("orders", p, 0) for p in partitions])
        got: list = []
        try:
            while len(got) < 500:
                batch = consumer.consume(500, timeout=20)
                assert batch, f"{len(got)} of 500 arrived"
                got += [m for m in batch if m.error() is None]
        finally:
            consumer.close()
        assert sorted(m.value() for m in got) == sorted(b"e%d" % i for i in range(500))
        assert {(m.value(), m.offset()) for m in got} == {
            (m.value(), m.offset()) for _, m in reports}
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()
