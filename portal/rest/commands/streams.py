"""stream create|edit|delete|info|list."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser

from portal.rest import rows
from portal.rest.commands.registry import ANY_PERM, Row, command, given, stream_at
from portal.rest.options import Ace, Bool, Choice, Int, Ratio, Refused, Str, StreamPath
from replication import services
from replication.models import PERMISSIONS, Compression, Stream, TimestampType
from replication.services.clusters import cluster_by_name

METADATA = ("ttl", "autocreate", "defaultpartitions", "compression", "defaulttimestamptype",
            "compact", "mincompactionlag", "deleteretention", "mincleanabledirtyratio",
            *PERMISSIONS)
NO_PID_EXPIRY = ("idempotent producers' state is kept with each partition for as long as the "
                 "partition: there is no producer id expiry to set")

METADATA_OPTIONS = (
    Int("ttl", "seconds a message is kept; 0 keeps it forever (default 604800)"),
    Bool("autocreate", "create topics on first produce (default true)"),
    Int("defaultpartitions", "partitions of new topics (default 1)"),
    Choice("compression", "compression of stored messages (default lz4)",
           choices=tuple(Compression.values)),
    Choice("defaulttimestamptype", "timestamp type of new topics (default createtime)",
           choices=tuple(TimestampType.values)),
    Bool("compact", "log compaction: keep the latest message per key (default false); "
         "needs the cluster's store in the batch layout"),
    Int("mincompactionlag", "ms a message stays uncompacted (default 0)", min=0),
    Int("deleteretention", "ms a tombstone (null value) is kept once compaction reaches it "
        "(default 86400000)", min=0),
    Ratio("mincleanabledirtyratio", "share of a partition not yet compacted before a "
          "compaction pass runs (default 0.5)"),
    *(Ace(perm, f"who holds {perm} (default u:<you>)") for perm in PERMISSIONS),
)
UNSUPPORTED_OPTIONS = (
    Refused("ischangelog", accepts_false=True,
            reason="change-data-capture (changelog) streams are not supported"),
    Refused("pidexpirysecs", reason=NO_PID_EXPIRY),
)
PATH = StreamPath("path", "the stream, e.g. /mapr/sanfrancisco/activity", required=True)


@command(
    "stream/create",
    PATH,
    *METADATA_OPTIONS,
    StreamPath("copymetafrom", "copy metadata and ACEs from this stream"),
    Str("tenant", "the tenant that owns the stream, if you are in several"),
    *UNSUPPORTED_OPTIONS,
    summary="Create a stream.",
    changes=True,
)
def stream_create(user: AbstractBaseUser, opts: dict[str, Any]) -> None:
    services.stream_create(
        actor=user, path=opts["path"], tenant=opts["tenant"],
        copymetafrom=opts["copymetafrom"], **given(opts, *METADATA),
    )


@command("stream/edit", PATH, *METADATA_OPTIONS, *UNSUPPORTED_OPTIONS,
         summary="Change a stream's metadata or ACEs (needs adminperm).", changes=True)
def stream_edit(user: AbstractBaseUser, opts: dict[str, Any]) -> None:
    services.stream_edit(actor=user, stream=stream_at(user, opts), **given(opts, *METADATA))


@command("stream/delete", PATH, summary="Delete a stream and its topics (needs adminperm).",
         changes=True)
def stream_delete(user: AbstractBaseUser, opts: dict[str, Any]) -> None:
    services.stream_delete(actor=user, stream=stream_at(user, opts))


@command("stream/info", PATH,
         summary="Show a stream's metadata; ACEs only to holders of adminperm.", changes=False)
def stream_info(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    stream = stream_at(user, opts)
    stream.require(user, *ANY_PERM, action="see the stream's information")
    return [rows.stream_info(stream, stream.allows(user, "adminperm"))]


@command("stream/list", Str("cluster", "only streams of this cluster"),
         summary="List the streams you can see (streamgate's own command).", changes=False)
def stream_list(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    streams = Stream.objects.restrict(user)
    if opts["cluster"]:
        streams = streams.filter(cluster=cluster_by_name(opts["cluster"], field="cluster"))
    return rows.stream_rows(streams)
