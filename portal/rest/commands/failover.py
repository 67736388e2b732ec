"""stream replica failover: a replica takes over from its source (issue 16)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser

from portal.rest import rows
from portal.rest.commands.registry import Row, command, stream_at
from portal.rest.options import Bool, Int, StreamPath
from replication import services


@command(
    "stream/replica/failover",
    StreamPath("path", "the replica that takes over", required=True),
    StreamPath("source", "the source it takes over from (needed only when it has several)"),
    Bool("force", "switch at once, even with the source unreachable, without draining; what "
         "the replica lacks is recorded and raised as an alarm (default false: stop the "
         "source's producers, drain, then switch)", default=False),
    summary="Make a replica the origin of the topics it carried (needs adminperm on the "
            "replica, and on the source unless -force true).",
    changes=True,
)
def replica_failover(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    source = stream_at(user, opts, "source") if opts["source"] else None
    failover = services.replica_failover(replica=stream_at(user, opts), source=source,
                                         force=opts["force"], actor=user)
    return [rows.failover_row(failover)]


@command(
    "stream/replica/failback",
    StreamPath("path", "the old source: the stream a failover left", required=True),
    StreamPath("replica", "the stream that took over from it", required=True),
    Bool("dryrun", "report per partition the common prefix, the messages to keep aside and to "
         "copy, and the estimated time, changing nothing (default false)", default=False),
    Bool("reverse", "leave the old source a replica of the stream that took over, rather than "
         "switching back (default false)", default=False),
    summary="Bring the old source back after a failover: its divergent messages kept in "
            "<topic>.diverged, cut back, caught up, then switched back (needs adminperm on "
            "both).",
    changes=True,
)
def replica_failback(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    report = services.replica_failback(source=stream_at(user, opts),
                                       replica=stream_at(user, opts, "replica"),
                                       dryrun=opts["dryrun"], reverse=opts["reverse"],
                                       actor=user)
    return rows.failback_rows(report)


@command(
    "stream/replica/verify",
    StreamPath("path", "the source stream", required=True),
    StreamPath("replica", "the replica to verify", required=True),
    Int("interval", "seconds between the periodic verifications of this replica from now on "
        "(0 turns them off; default: left as it is, hourly for a new replica)", min=0,
        max=31_536_000),
    summary="Verify a replica against its source now, from where the last verification "
            "stopped (needs adminperm on the source or the replica).",
    changes=True,
)
def replica_verify(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    source, replica = stream_at(user, opts), stream_at(user, opts, "replica")
    result = services.replica_verify(actor=user, source=source, replica=replica,
                                     interval=opts["interval"])
    return [result]


@command(
    "stream/replica/repair",
    StreamPath("path", "the source stream", required=True),
    StreamPath("replica", "the replica to repair", required=True),
    summary="Repair a replica verification found diverged: the link's diffstreams -repair "
            "(each differing partition recopied from its first difference), then a "
            "verification; a job, followed to its end (needs adminperm on the replica).",
    changes=True,
)
def replica_repair(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    job = services.replica_repair(actor=user, source=stream_at(user, opts),
                                  replica=stream_at(user, opts, "replica"))
    return [rows.job_row(job)]
