"""stream purge and cluster gateway local."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser

from portal.rest.commands.registry import Row, command, stream_at
from portal.rest.options import Bool, Choice, Str, StreamPath
from replication.errors import InvalidInput, NotSupported
from replication.services.clusters import cluster_by_name
from replication.services.purge import stream_purge


@command(
    "stream/purge",
    StreamPath("path", "the stream to purge", required=True),
    Bool("all", "streamgate's own: delete every message (kept: what a replica has not "
         "received yet); default false, MapR's purge: the messages past the ttl", default=False),
    summary="Delete a stream's messages due for deletion now, or with -all true every "
            "message; topics stay and offsets go on (needs adminperm).",
    changes=True,
)
def purge(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    return stream_purge(actor=user, stream=stream_at(user, opts), everything=opts["all"])


@command(
    "cluster/gateway/local",
    Str("cluster", "the cluster whose gateways to list: required, as the portal serves every "
        "cluster and runs on none (-dstcluster is accepted for it too)"),
    Str("dstcluster", "the same as -cluster, as the other 'cluster gateway' commands name it"),
    Choice("format", "text: the list to paste into 'cluster gateway set -gateways' "
           "(dns is not supported: gateways are found from this list, never from DNS)",
           choices=("text", "dns"), default="text"),
    summary="List the gateways configured on a cluster, as text for 'cluster gateway set'.",
    changes=False,
)
def gateway_local(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    if opts["format"] == "dns":
        raise NotSupported("-format dns: streamgate's source clusters find gateways in the "
                           "list 'cluster gateway set' keeps, never by a DNS lookup, so a DNS "
                           "record would have no effect; use -format text", field="format")
    names = [opts[name] for name in ("cluster", "dstcluster") if opts[name] is not None]
    if len(names) != 1:
        raise InvalidInput("give the cluster whose gateways to list, once: -cluster <name> "
                           "(or -dstcluster <name>)", field="cluster")
    cluster = cluster_by_name(names[0], field="cluster")
    gateways = cluster.gateways.order_by("name").values_list("name", flat=True)
    return [{"cluster": cluster.name, "gateways": " ".join(gateways)}]
