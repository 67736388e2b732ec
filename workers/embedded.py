"""Embedded mode's stand-in for Celery beat and workers: one daemon thread runs each entry of
the beat schedule at its interval. Tasks run eagerly (CELERY_TASK_ALWAYS_EAGER), so they go
through the same task functions as in production, only without a broker in between."""

from __future__ import annotations

import threading
import time

import structlog
from celery import Celery

from replication.transport import transport
from workers.replication.gateway import Heartbeat
from workers.replication.loop import start_replicator_thread

log = structlog.get_logger(__name__)


def _run_due(app: Celery, due: dict[str, float]) -> None:
    now = time.monotonic()
    for name, entry in app.conf.beat_schedule.items():
        if now < due.get(name, 0):
            continue
        due[name] = now + float(entry["schedule"])
        try:
            app.tasks[entry["task"]].apply()
        except Exception:  # a failing task must not stop the schedule, as with beat
            log.exception("embedded_task_failed", task=entry["task"])


def start_scheduler(app: Celery, *, tick: float = 1.0) -> threading.Thread:
    # Task modules are found lazily; the first tick must not run before they are registered.
    app.loader.import_default_modules()
    due: dict[str, float] = {}

    def loop() -> None:
        while True:
            _run_due(app, due)
            time.sleep(tick)

    thread = threading.Thread(target=loop, name="embedded-beat", daemon=True)
    thread.start()
    return thread


def start_replication() -> None:
    """`make run` starts the configured gateways in-process: each enabled gateway is live
    (heartbeating) in this process, where batches apply eagerly, and the replicator runs as a
    thread beside them."""
    signals = transport()
    Heartbeat(None, signals).start()
    start_replicator_thread(signals)
