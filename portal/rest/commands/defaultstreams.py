"""tenant defaultstream set|list|remove: where plain Kafka topic names live on a cluster.

    streamgate tenant defaultstream set -cluster sanfrancisco -path /mapr/sanfrancisco/kafka
    streamgate tenant defaultstream set -cluster sanfrancisco -path /mapr/sanfrancisco/mine \\
        -scope user
`-scope tenant` (the default) sets it for the tenant (member or admin role); `-scope user`
sets the caller's own override. The stream is created on first use with the tenant's ACEs.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser

from portal.rest.commands.registry import Row, command
from portal.rest.options import Choice, Str, StreamPath
from replication.models import DefaultStream
from replication.services.defaultstreams import default_stream_remove, default_stream_set

CLUSTER = Str("cluster", "the cluster whose plain Kafka names it serves", required=True)
TENANT = Str("tenant", "the tenant (needed only by members of several)")
SCOPE = Choice("scope", "tenant (default) or user (your own override)",
               choices=("tenant", "user"))


def default_stream_row(setting: DefaultStream) -> Row:
    return {"tenant": setting.tenant.name, "cluster": setting.cluster.name,
            "scope": "user" if setting.user_id else "tenant",
            "user": setting.user.get_username() if setting.user_id else "",
            "path": setting.path}


@command("tenant/defaultstream/set", CLUSTER,
         StreamPath("path", "the default stream, e.g. /mapr/sanfrancisco/kafka", required=True),
         TENANT, SCOPE,
         summary="Set the stream plain Kafka topic names resolve to on a cluster.", changes=True)
def defaultstream_set(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    setting = default_stream_set(actor=user, cluster=opts["cluster"], path=opts["path"],
                                 tenant=opts["tenant"], personal=opts["scope"] == "user")
    return [default_stream_row(setting)]


@command("tenant/defaultstream/remove", CLUSTER, TENANT, SCOPE,
         summary="Remove a default stream setting (the stream itself stays).", changes=True)
def defaultstream_remove(user: AbstractBaseUser, opts: dict[str, Any]) -> None:
    default_stream_remove(actor=user, cluster=opts["cluster"], tenant=opts["tenant"],
                          personal=opts["scope"] == "user")


@command("tenant/defaultstream/list", summary="List the default streams that apply to you.",
         changes=False)
def defaultstream_list(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    settings = DefaultStream.objects.restrict(user).select_related("tenant", "cluster", "user")
    if not user.is_staff:
        settings = settings.filter(user__isnull=True) | settings.filter(user=user)
    return [default_stream_row(s) for s in settings]
