"""replicator list: the replicators of the deployment, as `cluster gateway get` shows gateways.

They belong to no tenant: any signed-in user may list them and their health; how many links
each holds (every tenant's) only an operator sees."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser

from portal.rest.commands.registry import Row, command
from replication.transport import transport
from replication.transport.leases import replicator_rows


@command("replicator/list",
         summary="List the replicators: alive, last heartbeat and, for operators, links held "
         "(those heard of in the last hour).", changes=False)
def replicator_list(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    rows = replicator_rows(transport().leases)
    if user.is_staff:
        return rows
    return [{k: v for k, v in row.items() if k != "linksHeld"} for row in rows]
