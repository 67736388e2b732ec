"""stream replica add|edit|list|remove|pause|resume|autosetup and stream upstream
add|list|remove: the two halves of MapR's two-way replication agreement."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib.auth.models import AbstractBaseUser

from portal.rest import rows
from portal.rest.commands.registry import ANY_PERM, Row, command, given, stream_at
from portal.rest.options import Bool, Choice, Option, Str, StreamPath
from replication import services
from replication.lag_history import lag_record
from replication.models import Compression, Job, ReplicaLink

LINK = ("throttle", "synchronous", "networkcompression", "networkencryption")
SOURCE = StreamPath("path", "the source stream", required=True)
REPLICA = StreamPath("replica", "the replica stream", required=True)
LINK_OPTIONS = (
    Bool("throttle", "limit this replica's replication rate (settings "
         "STREAMGATE_THROTTLE_MESSAGES_PER_S and _BYTES_PER_S; default false)"),
    Bool("synchronous", "acknowledge a produce only once this replica applied it; drops to "
         "asynchronous by itself while it cannot keep up (settings STREAMGATE_SYNC_TIMEOUT_MS "
         "and _LATENCY_MS) and returns when caught up (default false)"),
    Choice("networkcompression", "on-wire compression: only off, as gateways read the source "
           "store over PostgreSQL's protocol, which does not compress (default off)",
           choices=tuple(Compression.values)),
    Bool("networkencryption", "require TLS on the connections to both clusters' stores: "
         "accepted only when their store URLs set sslmode=require or verify-* (default false)"),
)
REPLICA_PATH = StreamPath("path", "the replica stream", required=True)
UPSTREAM = StreamPath("upstream", "the source stream", required=True)


def _pair_commands(own: Option, other: Option, names: tuple[str, str],
                   commands: dict[str, tuple[Callable[..., object], str]]) -> None:
    """Register commands that run a service on the stream at -`own` and the one at -`other`
    (both looked up through the tenant choke point), passed as `names`, and answer nothing."""
    first, second = names
    for path, (service, summary) in commands.items():

        def handler(user: AbstractBaseUser, opts: dict[str, Any],
                    service: Callable[..., object] = service) -> None:
            service(actor=user, **{first: stream_at(user, opts, own.name),
                                   second: stream_at(user, opts, other.name)})

        command(path, own, other, summary=summary, changes=True)(handler)


_pair_commands(SOURCE, REPLICA, ("source", "replica"), {
    "stream/replica/remove": (services.replica_remove,
                              "Unregister a replica (needs adminperm on the source)."),
    "stream/replica/pause": (services.replica_pause,
                             "Pause replication to a replica (needs adminperm on the source)."),
    "stream/replica/resume": (services.replica_resume, "Resume replication where it left off "
                              "(needs adminperm on the source)."),
})
_pair_commands(REPLICA_PATH, UPSTREAM, ("replica", "source"), {
    "stream/upstream/add": (services.upstream_add,
                            "Accept data from a source stream (needs adminperm on the replica)."),
    "stream/upstream/remove": (services.upstream_remove, "Stop accepting data from a source "
                               "(needs adminperm on the replica)."),
})


@command("stream/replica/add", SOURCE, REPLICA,
         Bool("paused", "register the replica paused (default false)", default=False),
         *LINK_OPTIONS,
         summary="Register a replica of a stream (needs adminperm on the source).", changes=True)
def replica_add(user: AbstractBaseUser, opts: dict[str, Any]) -> None:
    services.replica_add(actor=user, source=stream_at(user, opts),
                         replica=stream_at(user, opts, "replica"), paused=opts["paused"],
                         **given(opts, *LINK))


@command("stream/replica/edit", SOURCE, REPLICA,
         StreamPath("newreplica", "not supported: streams are never renamed"), *LINK_OPTIONS,
         summary="Change a replica's settings (needs adminperm on the source).", changes=True)
def replica_edit(user: AbstractBaseUser, opts: dict[str, Any]) -> None:
    services.replica_edit(actor=user, source=stream_at(user, opts),
                          replica=stream_at(user, opts, "replica"),
                          newreplica=opts["newreplica"], **given(opts, *LINK))


@command(
    "stream/replica/list",
    SOURCE,
    Bool("refreshnow", "also record these figures now as the replicas' latest statistics, "
         "which the overview, stream pages and lag charts show (otherwise the recorder's, at "
         "most 5 s old); the listing itself is always computed live (default false)",
         default=False),
    summary="List a stream's replicas and their state.",
    # -refreshnow only records sooner the figures the recorder records every 5 s anyway.
    changes=False,
)
def replica_list(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    stream = stream_at(user, opts)
    stream.require(user, *ANY_PERM, action="list replicas")
    if opts["refreshnow"]:
        lag_record(links=ReplicaLink.objects.agreed().filter(source=stream)
                   .select_related("source", "replica__cluster"))
    return rows.replica_rows(stream)


@command(
    "stream/replica/autosetup",
    SOURCE,
    StreamPath("replica", "the replica to create (or to use, with -useexistingreplica true)",
               required=True),
    Bool("multimaster", "replicate in both directions (default false)", default=False),
    Str("tenant", "the tenant that owns the new replica, if you are in several"),
    Bool("useexistingreplica", "use the existing stream -replica: it must be empty or a copy "
         "of the source (same topics, no more partitions, a prefix of each); default false",
         default=False),
    *LINK_OPTIONS,
    summary="Create a replica, copy the data and start replicating; answers with the copy's "
            "job (the command line follows it to its end).",
    changes=True,
)
def replica_autosetup(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    # The replica does not exist yet, so it is passed as a path, not looked up.
    link = services.replica_autosetup(
        actor=user, source=stream_at(user, opts), replica=opts["replica"],
        multimaster=opts["multimaster"], tenant=opts["tenant"],
        useexistingreplica=opts["useexistingreplica"], **given(opts, *LINK))
    job = Job.objects.filter(link=link).select_related("requested_by").latest("pk")
    return [rows.job_row(job)]


@command("stream/upstream/list", REPLICA_PATH,
         summary="List the sources a stream accepts data from.", changes=False)
def upstream_list(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    stream = stream_at(user, opts)
    stream.require(user, *ANY_PERM, action="list upstreams")
    return rows.upstream_rows(stream)


