"""Celery tasks of the operations app."""

from __future__ import annotations

from celery import shared_task

from accounts.models import Tenant
from operations.alarms import alarms_evaluate
from operations.usage import usage_rollup


@shared_task(name="operations.tasks.evaluate_alarms_task", ignore_result=True)
def evaluate_alarms_task() -> dict[str, int]:
    """Beat's entry (~10 s): raise and clear alarms. Idempotent, so overlapping runs are fine."""
    return alarms_evaluate()


@shared_task(name="operations.tasks.rollup_tenant_usage_task", ignore_result=True)
def rollup_tenant_usage_task(tenant_id: int) -> int:
    """Add the growth of one tenant's traffic counters to today's usage rows (operations/
    usage.py). Idempotent: a second run adds only what was counted in between."""
    tenant = Tenant.objects.filter(pk=tenant_id).first()
    return 0 if tenant is None else usage_rollup(tenant=tenant)


@shared_task(name="operations.tasks.rollup_usage_task", ignore_result=True)
def rollup_usage_task() -> int:
    """Beat's entry (every few minutes): one rollup task per tenant with streams, so a large
    tenant delays no other."""
    ids = list(Tenant.objects.filter(streams__isnull=False).distinct().values_list(
        "pk", flat=True))
    for tenant_id in ids:
        rollup_tenant_usage_task.delay(tenant_id)
    return len(ids)
