"""Tenant quotas: bytes a second produced into and fetched from a tenant's streams, and requests
a second its members send (the Tenant's fields, set by operators; where one is empty, the
tenant's plan's: accounts' Plan, docs/plans.md). Each process meters its own
traffic, as a Kafka broker enforces its quotas per broker: a tenant at its quota on one
listener is slowed there and nowhere else, and no shared counter sits on the hot path.

The meter is the generic cell rate algorithm: a tenant's use moves a "theoretical arrival time"
forward by amount / rate; it is over its quota while that time is more than BURST_SECONDS
ahead of now, and the excess is how long it must wait. Interfaces answer that in their idiom:
the HTTP ones refuse with 429 and Retry-After (`quota_require`, QuotaExceeded) before doing the
work; the Kafka listener does the work, then answers with throttle_time_ms and reads nothing
more from the connection for that long, as Kafka does (KIP-219).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models.functions import Coalesce

from accounts.models import Plan, Tenant
from replication.errors import QuotaExceeded

PRODUCE, FETCH, REQUESTS = "produce", "fetch", "requests"
FIELDS = {PRODUCE: "produce_bytes_rate", FETCH: "fetch_bytes_rate", REQUESTS: "request_rate"}
UNITS = {PRODUCE: "bytes a second produced", FETCH: "bytes a second fetched",
         REQUESTS: "requests a second"}
BURST_SECONDS = 1.0  # a second's worth of use goes through at once
LIMITS_SECONDS = 5.0  # how long a process trusts the quotas it read (an operator's change)


@dataclass(slots=True)
class _Limits:
    read_at: float
    rates: dict[str, int | None]


_lock = threading.Lock()
_arrival: dict[tuple[int, str], float] = {}  # (tenant id, kind) -> theoretical arrival time
_limits: dict[int, _Limits] = {}
_users: dict[int, tuple[float, dict[int, int]]] = {}  # user id -> (read at, request rates)


def _held(tenant_id: int, now: float) -> _Limits | None:
    """The tenant's quotas as this process holds them, when fresh."""
    known = _limits.get(tenant_id)
    return None if known is None or now - known.read_at > LIMITS_SECONDS else known


def _effective() -> dict[str, Coalesce]:
    """Each quota as it holds: the tenant's own where set, else its plan's (accounts' Plan)."""
    return {f"q_{kind}": Coalesce(field, f"plan__{field}") for kind, field in FIELDS.items()}


def effective_quota(tenant: Tenant, kind: str) -> int | None:
    """The `kind` quota that holds for the tenant (its own, else its plan's)."""
    own = getattr(tenant, FIELDS[kind])
    if own is not None or tenant.plan is None:
        return own
    return getattr(tenant.plan, FIELDS[kind])


def _rate(tenant_id: int, kind: str, now: float) -> int | None:
    known = _held(tenant_id, now)
    if known is None:
        row = (Tenant.objects.filter(pk=tenant_id).annotate(**_effective())
               .values(*_effective()).first() or {})
        known = _Limits(now, {k: row.get(f"q_{k}") for k in FIELDS})
        with _lock:
            _limits[tenant_id] = known
    return known.rates[kind]


def _over(tenant_id: int, kind: str, now: float) -> float:
    with _lock:
        return max(0.0, _arrival.get((tenant_id, kind), now) - now - BURST_SECONDS)


def quota_wait(tenant_id: int, kind: str) -> float:
    """Seconds until the tenant is within its `kind` quota again (0.0: it is, or has none)."""
    now = time.monotonic()
    return 0.0 if _rate(tenant_id, kind, now) is None else _over(tenant_id, kind, now)


def quotas_wait(tenant_ids: Iterable[int], kind: str) -> float:
    """The longest `quota_wait` of these tenants."""
    return max((quota_wait(t, kind) for t in tenant_ids), default=0.0)


def cached_wait(tenant_ids: Iterable[int], kind: str) -> float | None:
    """`quotas_wait` from the quotas this process holds, without I/O (the Kafka listener's
    event loop); None when one tenant's are not held or stale (then ask `quotas_wait`)."""
    now, waits = time.monotonic(), [0.0]
    for tenant_id in tenant_ids:
        known = _held(tenant_id, now)
        if known is None:
            return None
        if known.rates[kind] is not None:
            waits.append(_over(tenant_id, kind, now))
    return max(waits)


def quota_charge(tenant_id: int, kind: str, amount: float) -> float:
    """Count `amount` (bytes, or requests) against the tenant's `kind` quota; the seconds it
    is now over (0.0 when within, or without a quota)."""
    return meter_charge(tenant_id, kind, amount, _rate(tenant_id, kind, time.monotonic()))


def meter_charge(tenant_id: int, kind: str, amount: float, rate: int | None) -> float:
    """`quota_charge` with the rate known (no database read)."""
    if rate is None:
        return 0.0
    key, now = (tenant_id, kind), time.monotonic()
    with _lock:
        arrival = max(_arrival.get(key, now), now) + amount / max(rate, 1)
        _arrival[key] = arrival
    return max(0.0, arrival - now - BURST_SECONDS)


def request_rates(user_id: int) -> dict[int, int]:
    """The request quota of each tenant the user belongs to that has one (their requests count
    against each: the tightest slows them), read afresh every LIMITS_SECONDS."""
    rates = cached_request_rates(user_id)
    if rates is None:
        rates = dict(Tenant.objects.filter(memberships__user_id=user_id)
                     .annotate(rate=Coalesce("request_rate", "plan__request_rate"))
                     .filter(rate__isnull=False).values_list("pk", "rate"))
        with _lock:
            _users[user_id] = (time.monotonic(), rates)
    return rates


def cached_request_rates(user_id: int) -> dict[int, int] | None:
    """`request_rates` as this process holds them, without I/O; None when not held or stale."""
    known = _users.get(user_id)
    if known is None or time.monotonic() - known[0] > LIMITS_SECONDS:
        return None
    return known[1]


def requests_charge(rates: dict[int, int]) -> float:
    """One request counted against each of `rates`' tenants; the seconds over the tightest."""
    return max((meter_charge(t, REQUESTS, 1, rate) for t, rate in rates.items()), default=0.0)


def quota_require(tenant_id: int, kind: str) -> None:
    """QuotaExceeded when the tenant is over its `kind` quota (the HTTP interfaces, before the
    work)."""
    wait = quota_wait(tenant_id, kind)
    if wait > 0:
        tenant = Tenant.objects.select_related("plan").get(pk=tenant_id)
        raise QuotaExceeded(
            f"tenant {tenant.name} is over its quota of {effective_quota(tenant, kind)} "
            f"{UNITS[kind]}: send again in {math.ceil(wait)} s, or ask an operator for a "
            "larger quota", retry_after=math.ceil(wait))


def forget_limits() -> None:
    """Read every tenant's quotas afresh on next use (a receiver of Tenant's saves)."""
    with _lock:
        _limits.clear()
        _users.clear()


def connect_receivers() -> None:
    """ReplicationConfig.ready: a tenant or plan saved in this process (its quotas changed on
    the admin site or by `tenant_quota_set`) is read afresh at once; other processes within
    LIMITS_SECONDS."""
    from django.db.models.signals import post_save

    post_save.connect(lambda **_: forget_limits(), sender=Tenant, weak=False,
                      dispatch_uid="quotas-tenant-saved")
    post_save.connect(lambda **_: forget_limits(), sender=Plan, weak=False,
                      dispatch_uid="quotas-plan-saved")
