"""The Celery app: `celery -A workers.celery worker|beat`.

Configuration comes from Django settings under the CELERY_ prefix (CELERY_BROKER_URL ...), so
the broker follows the mode: Redis in production, in-process in embedded mode.
"""

import logging
import os
from logging.config import dictConfig
from typing import Any

from celery import Celery, Task
from celery.signals import setup_logging, task_postrun, task_prerun

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("streamgate")
app.config_from_object("django.conf:settings", namespace="CELERY")
# Periodic tasks live in the database (django_celery_beat), so operators edit schedules in the
# admin and every beat restart keeps them; compose.yaml passes the same scheduler explicitly.
app.conf.beat_scheduler = "django_celery_beat.schedulers:DatabaseScheduler"
app.conf.beat_schedule = {
    # Retention (ttl): frequent small passes keep each delete batch short.
    "expire-messages": {"task": "workers.tasks.expire_messages_task", "schedule": 60.0},
    # Log compaction of compacted topics (issue 31): a pass only rewrites what became dirty.
    "compact-streams": {"task": "workers.tasks.compact_streams_task", "schedule": 60.0,
                        "options": {"expires": 60.0}},
    # Partitions whose move died between its cut-over and its switch take writes again.
    "recover-moves": {"task": "workers.tasks.recover_moves_task", "schedule": 30.0,
                      "options": {"expires": 30.0}},
    # Bulk jobs whose worker died are run again (idempotent) once their record stops moving.
    "resume-jobs": {"task": "workers.tasks.resume_jobs_task", "schedule": 60.0},
    # Lag over time for the portal's charts; a run that waited past the next one is dropped.
    "record-lag": {"task": "workers.tasks.record_lag_task", "schedule": 5.0,
                   "options": {"expires": 5.0}},
    # Continuous verification of each agreed link, at its own interval (default hourly).
    "verify-links": {"task": "workers.tasks.verify_links_task", "schedule": 60.0,
                     "options": {"expires": 60.0}},
    # Alarms raised and cleared from the engine's state (operations/alarms.py); idempotent.
    "evaluate-alarms": {"task": "operations.tasks.evaluate_alarms_task", "schedule": 10.0,
                        "options": {"expires": 10.0}},
    # Daily usage per stream from the live counters into PostgreSQL (operations/usage.py), so
    # the usage page's history outlives a Redis restart; idempotent.
    "rollup-usage": {"task": "operations.tasks.rollup_usage_task", "schedule": 300.0,
                     "options": {"expires": 300.0}},
}
# tasks.py of every installed Django app (workers is one).
app.autodiscover_tasks()


# --- logs and audit context of every task ----------------------------------------------------

_task_context: dict[str, tuple[Any, Any]] = {}


@setup_logging.connect
def _django_logging(loglevel: int | str | None = None, **kwargs: Any) -> None:
    """Workers log through Django's LOGGING (JSON lines in production), not Celery's own
    handlers, at the level given on the command line (--loglevel)."""
    from django.conf import settings

    dictConfig(settings.LOGGING)
    if loglevel:
        logging.getLogger().setLevel(loglevel)


@task_prerun.connect
def _bind_task(task_id: str, task: Task, **kwargs: Any) -> None:
    """Every log line of the task carries its id; its changes are audited as the system's."""
    import structlog

    from operations.audit import enter_system

    tokens = structlog.contextvars.bind_contextvars(task_id=task_id, task=task.name)
    _task_context[task_id] = (tokens, enter_system())


@task_postrun.connect
def _unbind_task(task_id: str, **kwargs: Any) -> None:
    import structlog

    from operations.audit import leave

    # Reset rather than clear: an eager task inside a request keeps the request's context.
    found = _task_context.pop(task_id, None)
    if found is not None:
        structlog.contextvars.reset_contextvars(**found[0])
        leave(found[1])
