"""tenant quota set|list: a tenant's quotas (replication/quotas.py), per listener or portal
process as Kafka's hold per broker.

    streamgate tenant quota set -tenant acme -producebytes 10485760 -requests 500   (operators)
    streamgate tenant quota list

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
from replication.services.quotas import MAX_RATE, MAX_RATES, tenant_quota_set, tenant_quotas


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
