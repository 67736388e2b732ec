"""replicator list: the replicators of the deployment, as `cluster gateway get` shows gateways.

They belong to no tenant and carry no tenant's data: any signed-in user may list them."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser

from portal.rest.commands.registry import Row, command
from replication.transport import transport
from replication.transport.leases import replicator_rows


@command("replicator/list",
         summary="List the replicators: alive, links held, last heartbeat (those heard of in "
         "the last hour).", changes=False)
def replicator_list(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    return replicator_rows(transport().leases)
