"""Celery tasks of the operations app."""

from __future__ import annotations

from celery import shared_task

from operations.alarms import alarms_evaluate


@shared_task(name="operations.tasks.evaluate_alarms_task", ignore_result=True)
def evaluate_alarms_task() -> dict[str, int]:
    """Beat's entry (~10 s): raise and clear alarms. Idempotent, so overlapping runs are fine."""
    return alarms_evaluate()
