"""Plan limits: how many streams, partitions and stored bytes a tenant may have (accounts'
Plan, assigned per tenant by an operator). A tenant without a plan has no limits.

The checks sit in the domain services every interface goes through (stream creation, topic
creation and growth, the one produce append), so a limit holds on the API, /rest, the CLI,
the pages and the Kafka listener alike. What replication brings into a tenant's streams
(topics propagated to a replica, messages a gateway applies) is counted but never refused:
refusing it would break a replica's promise to mirror its source (DESIGN.md invariant 7).

Counting streams and partitions is one indexed query at creation time, under a lock of the
tenant's row, so two concurrent creations cannot both take the last place. Stored bytes are
read from the message stores' per-partition counters and held per tenant for
STORED_SECONDS, so a produce costs no store query most of the time; a tenant may overshoot
its limit by what it produces within that window.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from django.db.models import Sum

from accounts.models import Plan, Tenant
from replication.errors import Hint, PlanLimitExceeded
from replication.models import Cluster, Stream, Topic
from replication.stores import store_for

STORED_SECONDS = 5.0
_lock = threading.Lock()
_stored: dict[int, tuple[float, int]] = {}  # tenant id -> (read at, stored bytes)
_plans: dict[int, tuple[float, Plan | None]] = {}  # tenant id -> (read at, its plan)


@dataclass(frozen=True, slots=True)
class Use:
    """One limit of a tenant's plan and how much of it is used (the usage page's bars)."""

    label: str
    used: int
    limit: int | None

    @property
    def percent(self) -> int:
        if not self.limit:
            return 100 if self.limit == 0 else 0
        return min(100, self.used * 100 // self.limit)


def _refusal(plan: Plan, allows: str, fix: str) -> PlanLimitExceeded:
    return PlanLimitExceeded(
        f"plan '{plan.name}' allows {allows}", field="plan",
        hint=Hint("plan.usage", f"{fix} or ask your operator for a larger plan"))


def _limiting_plan(tenant_id: int, limit: str) -> Plan | None:
    """The tenant's plan when it sets `limit`, the tenant's row then locked until the
    transaction ends (serialises creations that count against it); None when nothing limits,
    and nothing locked."""
    plan = Plan.objects.filter(tenants__pk=tenant_id).first()
    if plan is None or getattr(plan, limit) is None:
        return None
    Tenant.objects.select_for_update().filter(pk=tenant_id).values_list("pk").first()
    return Plan.objects.filter(tenants__pk=tenant_id).first()  # as of the lock


def stream_count(tenant_id: int) -> int:
    return Stream.objects.filter(tenant_id=tenant_id).count()


def partition_count(tenant_id: int) -> int:
    total = Topic.objects.filter(stream__tenant_id=tenant_id).aggregate(n=Sum("partitions"))
    return total["n"] or 0


def streams_require_room(tenant_id: int) -> None:
    """PlanLimitExceeded when the tenant has as many streams as its plan allows (inside the
    creating transaction)."""
    plan = _limiting_plan(tenant_id, "max_streams")
    if plan is None or plan.max_streams is None:
        return
    if stream_count(tenant_id) >= plan.max_streams:
        raise _refusal(plan, f"{plan.max_streams} streams", "delete one")


def partitions_require_room(tenant_id: int, adding: int) -> None:
    """PlanLimitExceeded when `adding` more partitions would take the tenant past its plan."""
    if adding <= 0:
        return
    plan = _limiting_plan(tenant_id, "max_partitions")
    if plan is None or plan.max_partitions is None:
        return
    used = partition_count(tenant_id)
    if used + adding > plan.max_partitions:
        raise _refusal(plan, f"{plan.max_partitions} partitions over all your topics "
                             f"({used} used, {adding} asked for)",
                       "delete a topic, ask for fewer partitions")


def stored_bytes(tenant_id: int) -> int:
    """Bytes stored in the tenant's streams (keys, values, headers), from each cluster's
    per-partition counters: one query per cluster, no scan of messages."""
    # Two columns, not 1,000 whole streams with their clusters (the usage page, issue 34).
    streams = list(Stream.objects.filter(tenant_id=tenant_id).values_list("uuid", "cluster_id"))
    sizes: dict = {}
    for cluster in Cluster.objects.filter(pk__in={c for _, c in streams}):
        sizes.update(store_for(cluster).logical_sizes())
    return sum(sizes.get(uuid, 0) for uuid, _ in streams)


def cached_stored_bytes(tenant_id: int) -> int:
    """`stored_bytes`, read afresh at most every STORED_SECONDS per process."""
    now = time.monotonic()
    known = _stored.get(tenant_id)
    if known is not None and now - known[0] < STORED_SECONDS:
        return known[1]
    value = stored_bytes(tenant_id)
    with _lock:
        _stored[tenant_id] = (now, value)
    return value


def cached_plan(tenant_id: int) -> Plan | None:
    """The tenant's plan, read afresh at most every STORED_SECONDS per process (an operator's
    change reaches a produce within that)."""
    now = time.monotonic()
    known = _plans.get(tenant_id)
    if known is not None and now - known[0] < STORED_SECONDS:
        return known[1]
    plan = Plan.objects.filter(tenants__pk=tenant_id).first()
    with _lock:
        _plans[tenant_id] = (now, plan)
    return plan


def storage_require_room(tenant_id: int) -> None:
    """PlanLimitExceeded when the tenant stores as many bytes as its plan allows (a produce,
    before anything is written)."""
    plan = cached_plan(tenant_id)
    if plan is None or plan.max_stored_bytes is None:
        return
    used = cached_stored_bytes(tenant_id)
    if used >= plan.max_stored_bytes:
        raise _refusal(plan, f"{plan.max_stored_bytes} stored bytes ({used} stored)",
                       "delete messages (a topic, or a shorter -ttl)")


def forget_stored() -> None:
    """Read plans and stored bytes afresh on next use (a plan or a tenant saved)."""
    with _lock:
        _stored.clear()
        _plans.clear()


def connect_receivers() -> None:
    """ReplicationConfig.ready: a plan or tenant saved in this process is read afresh at
    once; other processes within STORED_SECONDS."""
    from django.db.models.signals import post_save

    for model in (Plan, Tenant):
        post_save.connect(lambda **_: forget_stored(), sender=model, weak=False,
                          dispatch_uid=f"plans-{model.__name__}-saved")


def plan_use(tenant: Tenant) -> list[Use]:
    """Each limit of the tenant's plan with what is used of it."""
    plan = tenant.plan
    return [
        Use("Streams", stream_count(tenant.pk), plan and plan.max_streams),
        Use("Partitions", partition_count(tenant.pk), plan and plan.max_partitions),
        Use("Stored bytes", stored_bytes(tenant.pk), plan and plan.max_stored_bytes),
    ]
