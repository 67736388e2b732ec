"""stream replica failover: a replica takes over from its source (issue 16)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser

from portal.rest.commands.registry import Row, command, stream_at
from portal.rest.options import Bool, StreamPath
from replication import reports, services


@command(
    "stream/replica/failover",
    StreamPath("path", "the replica that takes over", required=True),
    StreamPath("source", "the source it takes over from (needed only when it has several)"),
    Bool("force", "switch at once, even with the source unreachable, without draining; what "
         "the replica lacks is recorded and raised as an alarm (default false: stop the "
         "source's producers, drain, then switch)", default=False),
    summary="Make a replica the origin of the topics it carried (needs adminperm on the "
            "replica, and on the source unless -force true).",
)
def replica_failover(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    source = stream_at(user, opts, "source") if opts["source"] else None
    failover = services.replica_failover(replica=stream_at(user, opts), source=source,
                                         force=opts["force"], actor=user)
    return [reports.failover_row(failover)]
