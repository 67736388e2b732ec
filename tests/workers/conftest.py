"""A real Celery worker process, on the test database and the local Redis, with a queue of its
own so concurrent test runs never take each other's tasks."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection

from workers.celery import app

ROOT = Path(__file__).resolve().parents[2]


def test_database_url() -> str:
    params = connection.settings_dict
    return (f"postgres://{params['USER']}@{params['HOST'] or '127.0.0.1'}:"
            f"{params['PORT'] or 5432}/{params['NAME']}")


@pytest.fixture
def celery_worker(transactional_db) -> Iterator[str]:
    queue = f"sg-test-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "DATABASE_URL": test_database_url(), "CELERY_QUEUE": queue}
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "workers.celery", "worker", "-Q", queue,
         "--pool", "solo", "--without-heartbeat", "--without-gossip", "--without-mingle",
         "--loglevel", "WARNING"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    previous = app.conf.task_default_queue
    app.conf.task_default_queue = queue
    try:
        yield queue
    finally:
        app.conf.task_default_queue = previous
        worker.terminate()
        try:
            worker.wait(timeout=15)
        except subprocess.TimeoutExpired:
            worker.kill()


def wait_until(check, timeout: float = 30.0, every: float = 0.1) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(every)
