"""Structured JSON logs: each request's lines carry its request id (also returned as
X-Request-ID), each Celery task's lines its task id; JSON in production, readable lines on a
developer's console."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from operations.tasks import evaluate_alarms_task
from portal.logging import json_formatter
from tests.workers import conftest as workers_conftest

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def lines() -> Iterator[io.StringIO]:
    """What the production formatter writes, from every logger, for the test's duration."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(json_formatter())
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield stream
    finally:
        root.removeHandler(handler)


def records(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]


def test_a_requests_log_line_carries_its_request_id(api, owner, lines):
    response = api(owner).get("/api/v1/streams/", HTTP_X_REQUEST_ID="abc-123")
    assert response["X-Request-ID"] == "abc-123"
    line = next(r for r in records(lines) if r["event"] == "request")
    assert (line["request_id"], line["path"], line["status"], line["user"]) == (
        "abc-123", "/api/v1/streams/", 200, "alice")
    assert line["level"] == "info" and "timestamp" in line


def test_an_outsiders_refused_request_is_logged_with_its_id_and_no_data(api, outsider,
                                                                       activity, lines):
    response = api(outsider).get(f"/api/v1/streams/{activity.uuid}/",
                                 HTTP_X_REQUEST_ID="out-1")
    assert response.status_code == 404 and response["X-Request-ID"] == "out-1"
    line = next(r for r in records(lines) if r["event"] == "request")
    assert (line["request_id"], line["status"], line["user"]) == ("out-1", 404, "mallory")
    assert activity.path not in json.dumps(records(lines))


def test_a_request_without_an_id_gets_one_and_a_bad_one_is_replaced(client, lines):
    generated = client.get("/healthz")["X-Request-ID"]
    replaced = client.get("/healthz", HTTP_X_REQUEST_ID="bad id\nwith newline")["X-Request-ID"]
    assert len(generated) == 32 and len(replaced) == 32 and generated != replaced
    assert [r["request_id"] for r in records(lines) if r["event"] == "request"] == [
        generated, replaced]


def test_a_request_id_with_a_trailing_newline_is_replaced(client):
    assert client.get("/healthz", HTTP_X_REQUEST_ID="abc-123\n")["X-Request-ID"] != "abc-123\n"


def test_standard_library_lines_inside_a_request_carry_the_request_id_too(lines):
    with structlog.contextvars.bound_contextvars(request_id="r-1"):
        logging.getLogger("django.request").warning("Not Found: /x")
    line = records(lines)[-1]
    assert (line["event"], line["request_id"], line["logger"]) == ("Not Found: /x", "r-1",
                                                                   "django.request")


def test_a_tasks_log_line_carries_its_task_id(link, live_gateway, lines):
    result = evaluate_alarms_task.apply()
    line = next(r for r in records(lines) if r["event"] == "alarm_raised")
    assert line["task_id"] == result.id
    assert line["task"] == "operations.tasks.evaluate_alarms_task"
    # And the id is unbound once the task is over.
    logging.getLogger("after").warning("later")
    assert "task_id" not in records(lines)[-1]


def _log_settings(**env: str) -> dict:
    code = ("import django, json; django.setup(); from django.conf import settings; "
            "print(json.dumps([settings.LOG_JSON, "
            "settings.LOGGING['handlers']['console']['formatter']]))")
    clean = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "STREAMGATE_LOG_JSON")}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, env={**clean, "DJANGO_SETTINGS_MODULE": "portal.settings",
                                          **env}, check=True, timeout=60)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_production_logs_json_and_debug_or_the_switch_gives_readable_lines():
    assert _log_settings() == [True, "json"]
    assert _log_settings(DEBUG="true") == [False, "console"]
    assert _log_settings(STREAMGATE_LOG_JSON="false") == [False, "console"]
    assert _log_settings(DEBUG="true", STREAMGATE_LOG_JSON="true") == [True, "json"]


@pytest.mark.django_db(transaction=True)
def test_a_real_workers_json_line_carries_the_task_id(link, live_gateway, tmp_path):
    """A Celery worker process, on the test database and Redis, with a queue of its own."""
    queue = f"sg-test-{uuid.uuid4().hex[:8]}"
    log_file = tmp_path / "worker.log"
    env = {**os.environ, "DATABASE_URL": workers_conftest.test_database_url(),
           "CELERY_QUEUE": queue, "STREAMGATE_LOG_JSON": "true"}
    with log_file.open("w") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "workers.celery", "worker", "-Q", queue,
             "--pool", "solo", "--without-heartbeat", "--without-gossip", "--without-mingle",
             "--loglevel", "INFO"], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        result = evaluate_alarms_task.apply_async(queue=queue)

        def line() -> dict | None:
            for text in log_file.read_text().splitlines():
                if text.startswith("{") and '"alarm_raised"' in text:
                    return json.loads(text)
            return None

        workers_conftest.wait_until(lambda: line() is not None, timeout=60)
        assert line()["task_id"] == result.id
    finally:
        worker.terminate()
        worker.wait(timeout=15)
