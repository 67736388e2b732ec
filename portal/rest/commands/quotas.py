"""tenant quota set|list: a tenant's quotas (replication/quotas.py), per listener or portal
process as Kafka's hold per broker; tenant plan set|list: a tenant's plan (docs/plans.md).

    streamgate tenant quota set -tenant acme -producebytes 10485760 -requests 500   (operators)
    streamgate tenant quota list
    streamgate tenant plan set -tenant acme -plan free     (operators; -plan '' for none)
    streamgate tenant plan list

0 removes the tenant's own limit (its plan's then holds, if any: docs/plans.md); a quota left
out keeps its value. The list shows the quotas that hold: the tenant's own, else its plan's.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser

from accounts.models import Tenant
from portal.rest.commands.registry import Row, command
from portal.rest.options import Int, Str
from replication.quotas import FETCH, PRODUCE, REQUESTS, effective_quota
from replication.services.quotas import (
    MAX_RATE,
    MAX_RATES,
    tenant_plan_set,
    tenant_quota_set,
    tenant_quotas,
)


def quota_row(tenant: Tenant) -> Row:
    """The quotas that hold for a tenant (its own, else its plan's), 0 where there is no
    limit."""
    return {"tenant": tenant.name,
            "producebytes": effective_quota(tenant, PRODUCE) or 0,
            "fetchbytes": effective_quota(tenant, FETCH) or 0,
            "requests": effective_quota(tenant, REQUESTS) or 0}


def _rate(name: str, what: str, most: int = MAX_RATE) -> Int:
    return Int(name, f"{what} a second, on each listener and portal process (0: no limit)",
               min=0, max=most)


@command("tenant/quota/set", Str("tenant", "the tenant whose quotas to set", required=True),
         _rate("producebytes", "bytes produced into the tenant's streams"),
         _rate("fetchbytes", "bytes fetched from the tenant's streams"),
         _rate("requests", "requests its members send", MAX_RATES[REQUESTS]),
         summary="Set a tenant's produce, fetch and request quotas (operators only).",
         changes=True)
def quota_set(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    tenant = tenant_quota_set(actor=user, tenant=opts["tenant"], produce=opts["producebytes"],
                              fetch=opts["fetchbytes"], requests=opts["requests"])
    return [quota_row(tenant)]


@command("tenant/quota/list",
         summary="List the quotas of your tenants (an operator: every tenant's).",
         changes=False)
def quota_list(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    return [quota_row(tenant) for tenant in tenant_quotas(actor=user)]


def plan_row(tenant: Tenant) -> Row:
    """A tenant's plan and its limits, 0 where there is no limit ("" and 0s: no plan)."""
    plan = tenant.plan
    return {"tenant": tenant.name, "plan": plan.name if plan else "",
            "maxstreams": (plan and plan.max_streams) or 0,
            "maxpartitions": (plan and plan.max_partitions) or 0,
            "maxstoredbytes": (plan and plan.max_stored_bytes) or 0}


@command("tenant/plan/set", Str("tenant", "the tenant whose plan to set", required=True),
         Str("plan", "the plan's name, as the admin's Plans page defines it ('' for none)",
             required=True),
         summary="Give a tenant a plan: its limits and default quotas (operators only).",
         changes=True)
def plan_set(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    return [plan_row(tenant_plan_set(actor=user, tenant=opts["tenant"], plan=opts["plan"]))]


@command("tenant/plan/list",
         summary="List the plans of your tenants and their limits (an operator: every tenant's).",
         changes=False)
def plan_list(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    return [plan_row(tenant) for tenant in tenant_quotas(actor=user)]
