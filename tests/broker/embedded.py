"""`manage.py runembedded` (SQLite stores, no Redis, the Kafka listener a thread beside the
portal) on a fresh data directory with the demo scene, for the embedded tests."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import requests

from tests.broker.conftest import free_port
from tests.workers.conftest import ROOT

MINT_TOKEN = ("from knox.models import AuthToken; from django.contrib.auth import get_user_model;"
              "print(AuthToken.objects.create(get_user_model().objects.get(username='admin'))[1])")


def manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def wait_log(path: Path, text: str, server: subprocess.Popen) -> None:
    deadline = time.monotonic() + 90
    while text not in path.read_text():
        assert server.poll() is None and time.monotonic() < deadline, path.read_text()
        time.sleep(0.2)


def wait_portal(port: int, server: subprocess.Popen) -> None:
    """Until the portal answers (it may listen a moment after the Kafka listener is ready)."""
    deadline = time.monotonic() + 90
    while True:
        try:
            if requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200:
                return
        except requests.ConnectionError:
            pass
        assert server.poll() is None and time.monotonic() < deadline, "the portal never answered"
        time.sleep(0.2)


class Embedded(NamedTuple):
    web: int  # the portal's port
    token: str  # the operator `admin`'s API token, its SASL/PLAIN password too
    config: dict[str, str]  # librdkafka settings reaching the listener as `admin`


@contextlib.contextmanager
def embedded_site(tmp_path: Path) -> Iterator[Embedded]:
    """Migrate, seed the demo scene and an operator, then run the site until the block ends;
    the block starts once the Kafka listener is ready."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(STREAMGATE_DATA_DIR=str(tmp_path), STREAMGATE_ADMIN_USER="admin",
               STREAMGATE_ADMIN_PASSWORD="embedded-test-password-1")
    manage(env, "migrate", "--no-input", "-v", "0")
    manage(env, "ensureoperator")
    manage(env, "demoscene")
    token = manage(env, "shell", "-c", MINT_TOKEN).strip().splitlines()[-1]
    web, kafka_port = free_port(), free_port()
    log_path = tmp_path / "embedded.log"
    with log_path.open("ab") as log:
        server = subprocess.Popen(
            [sys.executable, "manage.py", "runembedded", "--port", str(web),
             "--kafka", f"127.0.0.1:{kafka_port}"], cwd=ROOT, env=env, stdout=log,
            stderr=subprocess.STDOUT)
        try:
            wait_log(log_path, "kafka listener ready", server)
            wait_portal(web, server)
            yield Embedded(web, token, {
                "bootstrap.servers": f"127.0.0.1:{kafka_port}",
                "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                "sasl.username": "admin", "sasl.password": token})
        finally:
            server.terminate()
            server.wait(timeout=30)
