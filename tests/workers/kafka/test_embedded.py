"""`make run`'s Kafka listener: a thread of `manage.py runembedded` on the embedded default
(SQLite, no Redis), where the demo tenant's plain names work with nothing MapR-specific."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from confluent_kafka import Producer

from tests.workers.conftest import ROOT
from tests.workers.kafka.conftest import free_port

pytestmark = pytest.mark.slow
MINT_TOKEN = ("from knox.models import AuthToken; from django.contrib.auth import get_user_model;"
              "print(AuthToken.objects.create(get_user_model().objects.get(username='admin'))[1])")


def manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_embedded_listener_serves_the_demo_tenants_plain_names_on_sqlite(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(STREAMGATE_DATA_DIR=str(tmp_path), STREAMGATE_ADMIN_USER="admin",
               STREAMGATE_ADMIN_PASSWORD="embedded-test-password-1")
    manage(env, "migrate", "--no-input", "-v", "0")
    manage(env, "ensureoperator")
    manage(env, "demoscene")
    token = manage(env, "shell", "-c", MINT_TOKEN).strip().splitlines()[-1]
    kafka_port = free_port()
    log = (tmp_path / "embedded.log").open("ab")
    server = subprocess.Popen(
        [sys.executable, "manage.py", "runembedded", "--port", str(free_port()),
         "--kafka", f"127.0.0.1:{kafka_port}"], cwd=ROOT, env=env, stdout=log,
        stderr=subprocess.STDOUT)
    try:
        config = {"bootstrap.servers": f"127.0.0.1:{kafka_port}",
                  "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                  "sasl.username": "admin", "sasl.password": token}
        deadline = time.monotonic() + 90
        while "kafka listener ready" not in (tmp_path / "embedded.log").read_text():
            assert server.poll() is None and time.monotonic() < deadline, (
                tmp_path / "embedded.log").read_text()
            time.sleep(0.2)
        metadata = Producer(config).list_topics("orders", timeout=30)
        assert metadata.topics["orders"].error is None  # auto-created in the default stream
        listed = Producer(config).list_topics(timeout=30).topics
        assert "orders" in listed and "/mapr/sanfrancisco/activity:clicks" in listed
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()
