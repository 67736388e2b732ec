from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from replication.errors import (
    AlreadyExists,
    Conflict,
    Hint,
    InvalidInput,
    NotFound,
    NotSupported,
    replicas_of,
)
from replication.events import publish_link_event
from replication.models import Compression, ReplicaLink, Stream
from replication.paths import parse_stream_path
from replication.services.common import check_origins, next_idx, propagate_topics, topology_lock
from replication.services.jobs import autosetup_copy
from replication.services.reuse import existing_replica
from replication.services.streams import stream_create
from replication.services.sync import link_sync_configured
from replication.services.upstreams import upstream_add
from replication.services.wakeups import stream_wake
from replication.services.wire import check_wire_options

LINK_OPTIONS = ("throttle", "synchronous", "networkcompression", "networkencryption")


def _link(source: Stream, replica: Stream) -> ReplicaLink:
    link = ReplicaLink.objects.filter(source=source, replica=replica).first()
    if link is None:
        raise NotFound(f"{replica.path} is not a replica of {source.path}", field="replica",
                       hint=replicas_of(source.path))
    return link


def _clean_options(options: dict[str, Any], *, source: Stream,
                   replica: Stream) -> dict[str, Any]:
    """The given link options, each one the link can honour (DESIGN.md invariant 8);
    `-synchronous` is honoured by replication/services/sync.py."""
    unknown = set(options) - set(LINK_OPTIONS)
    if unknown:
        raise TypeError(f"unexpected replica options: {sorted(unknown)}")
    compression = options.get("networkcompression")
    if compression is not None and compression not in Compression.values:
        raise InvalidInput(f"-networkcompression {compression!r} is not one of "
                           f"{', '.join(Compression.values)}", field="networkcompression")
    values = {k: v for k, v in options.items() if v is not None}
    check_wire_options(values, source=source, replica=replica)
    return values


@transaction.atomic
def replica_add(
    *, actor: AbstractBaseUser, source: Stream, replica: Stream, paused: bool = False,
    **options: Any,
) -> ReplicaLink:
    """The source owner's half of the two-way agreement (DESIGN.md invariant 5)."""
    source.require(actor, "adminperm", action="add a replica")
    if source.pk == replica.pk:
        raise InvalidInput(f"{source.path} cannot be a replica of itself", field="replica")
    values = _clean_options(options, source=source, replica=replica)
    topology_lock()
    Stream.objects.select_for_update().get(pk=source.pk)
    if ReplicaLink.objects.filter(source=source, replica=replica).exists():
        raise AlreadyExists(f"{replica.path} is already a replica of {source.path}",
                            field="replica")
    limit = settings.MAX_REPLICAS_PER_STREAM
    idx = next_idx(source.replica_links.values_list("idx", flat=True), limit,
                   f"{source.path} has {limit} replicas")
    if replica.source_links.count() >= settings.MAX_UPSTREAMS_PER_REPLICA:
        raise Conflict(f"{replica.path} already receives from "
                       f"{settings.MAX_UPSTREAMS_PER_REPLICA} sources, the limit")
    check_origins([source.id, replica.id], extra_edges=[(source.id, replica.id)])
    # Not the stream's compression, as MapR defaults to: the wire here never compresses.
    values.setdefault("networkcompression", Compression.OFF)
    link = ReplicaLink.objects.create(
        source=source, replica=replica, idx=idx, paused=paused, created_by=actor, **values
    )
    link_sync_configured(link=link)
    propagate_topics([source.id])
    publish_link_event("replica.added", source, replica)
    if not paused:
        stream_wake(stream=source.uuid)  # moves at once if the upstream is already agreed
    return link


@transaction.atomic
def replica_connect(*, actor: AbstractBaseUser, source: Stream, replica: Stream) -> ReplicaLink:
    """Both halves of the agreement at once, for an actor who administers both streams (the
    demo scene, the benchmarks' topologies): `source` registers `replica` and `replica`
    accepts `source` as its upstream, the manual primary-secondary steps."""
    link = replica_add(actor=actor, source=source, replica=replica)
    upstream_add(actor=actor, replica=replica, source=source)
    return link


@transaction.atomic
def replica_edit(
    *, actor: AbstractBaseUser, source: Stream, replica: Stream, newreplica: str | None = None,
    **options: Any,
) -> ReplicaLink:
    source.require(actor, "adminperm", action="edit replicas")
    link = _link(source, replica)
    if newreplica is not None:
        raise NotSupported(
            "-newreplica follows a renamed replica, and streamgate streams are never renamed: "
            "remove this replica and add the other stream instead", field="newreplica"
        )
    values = _clean_options(options, source=source, replica=replica)
    if not values:
        raise InvalidInput("nothing to change: give -throttle, -synchronous, "
                           "-networkcompression or -networkencryption")
    for key, value in values.items():
        setattr(link, key, value)
    link.save(update_fields=list(values))  # not `mode`, which producers and gateways switch
    link_sync_configured(link=link)
    stream_wake(stream=source.uuid)  # the replicator re-plans the link with its new options
    return link


def _set_paused(actor: AbstractBaseUser, source: Stream, replica: Stream, paused: bool,
                action: str) -> ReplicaLink:
    source.require(actor, "adminperm", action=action)
    link = _link(source, replica)
    link.paused = paused
    link.save(update_fields=["paused"])
    publish_link_event("replica.paused" if paused else "replica.resumed", source, replica)
    return link


@transaction.atomic
def replica_pause(*, actor: AbstractBaseUser, source: Stream, replica: Stream) -> ReplicaLink:
    return _set_paused(actor, source, replica, True, "pause replicas")


@transaction.atomic
def replica_resume(*, actor: AbstractBaseUser, source: Stream, replica: Stream) -> ReplicaLink:
    link = _set_paused(actor, source, replica, False, "resume replicas")
    stream_wake(stream=source.uuid)  # data moves now, not at the replicator's next check
    return link


@transaction.atomic
def replica_remove(*, actor: AbstractBaseUser, source: Stream, replica: Stream) -> None:
    source.require(actor, "adminperm", action="remove replicas")
    publish_link_event("replica.removed", source, replica)
    _link(source, replica).delete()


@transaction.atomic
def replica_autosetup(
    *, actor: AbstractBaseUser, source: Stream, replica: str, multimaster: bool = False,
    tenant: str | None = None, useexistingreplica: bool = False, **options: Any,
) -> ReplicaLink:
    """MapR's seven autosetup steps, in one transaction: all of them or none. With
    `useexistingreplica`, step 1 checks the existing stream instead of creating it."""
    source.require(actor, "adminperm", action="set up replicas")
    path = str(parse_stream_path(replica, field="replica"))
    if useexistingreplica:
        if tenant is not None:
            raise InvalidInput("-tenant names the owner of the replica autosetup creates; "
                               "with -useexistingreplica true it exists: leave -tenant out",
                               field="tenant")
        created = existing_replica(actor=actor, source=source, path=path)
    elif Stream.objects.restrict(actor).filter(path=path).exists():
        # Another tenant's stream there is not named: stream_create refuses it as unavailable.
        raise AlreadyExists(
            f"replica {path} already exists", field="replica", hint=Hint(
                "replica.add", "autosetup creates the replica itself; have it use this one "
                "(useexistingreplica), or add the replica by the manual steps",
                {"path": source.path, "replica": path},
                cli="autosetup creates the replica itself; give -useexistingreplica true to "
                    "use this one, or use {command} for the manual steps"))
    else:
        created = stream_create(actor=actor, path=path, tenant=tenant, copymetafrom=source.path)
    link = replica_add(actor=actor, source=source, replica=created, paused=True, **options)
    upstream_add(actor=actor, replica=created, source=source)
    if multimaster:
        replica_add(actor=actor, source=created, replica=source, **options)
        upstream_add(actor=actor, replica=source, source=created)
    link.paused = False
    link.save(update_fields=["paused"])
    # Step 4, the copy, runs as a Spark job once this commits; the link replicates when the
    # job ends (replica list shows COPY_IN_PROGRESS and its percentage meanwhile).
    autosetup_copy(actor=actor, link=link)
    return link
