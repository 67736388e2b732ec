"""Tenant quotas and plans, set by operators and read by the tenants' members (the command line,
the API, the admin site, the account page); replication/quotas.py meters and enforces the
quotas, replication/plans.py the plans' limits. Every change is a save, so audited
(operations/audit.py) whichever interface made it."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import QuerySet

from accounts.models import Plan, Tenant, TokenScope
from replication.errors import InvalidInput, NotFound, PermissionDenied
from replication.quotas import FETCH, FIELDS, PRODUCE, REQUESTS, UNITS
from replication.scopes import scope_require

MAX_RATE = 1 << 40  # a TiB a second: beyond it a quota limits nothing
MAX_RATES = {PRODUCE: MAX_RATE, FETCH: MAX_RATE, REQUESTS: (1 << 31) - 1}


def tenant_quotas(*, actor: AbstractBaseUser) -> QuerySet[Tenant]:
    """The tenants whose quotas `actor` may read: their own; an operator's, every tenant."""
    return Tenant.objects.restrict(actor).select_related("plan").order_by("name")


def _operator(actor: AbstractBaseUser, what: str) -> None:
    """Pass for an operator with the admin scope; `what`: "quotas" or "plans"."""
    scope_require(actor, TokenScope.ADMIN, action=f"setting {what}")
    if not actor.is_staff:
        raise PermissionDenied(f"only operators set {what}: ask an operator (a staff "
                               "account) for a larger one")


def _tenant_named(name: str) -> Tenant:
    found = Tenant.objects.filter(name=name).first()
    if found is None:
        raise NotFound(f"tenant {name!r} does not exist", field="tenant")
    return found


def tenant_plan_set(*, actor: AbstractBaseUser, tenant: str, plan: str) -> Tenant:
    """Give a tenant the plan named `plan` ("" for none: no limits, its own quotas only).
    Operators only; the change reaches every process within seconds (docs/plans.md)."""
    _operator(actor, "plans")
    found = _tenant_named(tenant)
    chosen = None
    if plan:
        chosen = Plan.objects.filter(name=plan).first()
        if chosen is None:
            known = ", ".join(Plan.objects.values_list("name", flat=True)) or "none yet"
            raise NotFound(f"plan {plan!r} does not exist: give one of {known} (the admin's "
                           "Plans page defines them), or an empty -plan for none",
                           field="plan")
    if found.plan_id != (chosen.pk if chosen else None):
        found.plan = chosen
        found.save(update_fields=["plan"])  # forget_limits: a receiver; audited
    return found


def tenant_quota_set(*, actor: AbstractBaseUser, tenant: str,
                     **rates: int | None) -> Tenant:
    """Set some of a tenant's quotas (`produce`, `fetch`, `requests`; a rate a second, 0 for
    none of its own (its plan's then holds, if any), None to leave it). Operators only: a
    tenant may not raise its own."""
    _operator(actor, "quotas")
    unknown = set(rates) - set(FIELDS)
    if unknown:
        raise InvalidInput(f"no quota named {sorted(unknown)[0]!r}: give "
                           f"{', '.join(FIELDS)}", field=sorted(unknown)[0])
    given = {kind: rate for kind, rate in rates.items() if rate is not None}
    if not given:
        raise InvalidInput("nothing to set: give at least one of -producebytes, -fetchbytes "
                           "or -requests (0 removes a limit)", field="tenant")
    for kind, rate in given.items():
        if not 0 <= rate <= MAX_RATES[kind]:
            raise InvalidInput(f"{kind} quota {rate}: give 0 (no limit) to {MAX_RATES[kind]} "
                               f"{UNITS[kind]}", field=kind)
    found = _tenant_named(tenant)
    for kind, rate in given.items():
        setattr(found, FIELDS[kind], rate or None)
    found.save(update_fields=[FIELDS[kind] for kind in given])  # forget_limits: a receiver
    return found
