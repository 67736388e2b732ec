from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from replication.errors import AlreadyExists, Conflict, InvalidInput, NotFound, NotSupported
from replication.events import publish_link_event
from replication.models import Compression, ReplicaLink, ReplicaState, Stream
from replication.paths import parse_stream_path
from replication.services.common import check_origins, next_idx, propagate_topics, topology_lock
from replication.services.engine import stream_wake
from replication.services.streams import stream_create
from replication.services.upstreams import upstream_add

LINK_OPTIONS = ("throttle", "synchronous", "networkcompression", "networkencryption")


def _link(source: Stream, replica: Stream) -> ReplicaLink:
    link = ReplicaLink.objects.filter(source=source, replica=replica).first()
    if link is None:
        raise NotFound(f"{replica.path} is not a replica of {source.path}: see "
                       f"'streamgate stream replica list -path {source.path}'", field="replica")
    return link


def _clean_options(options: dict[str, Any]) -> dict[str, Any]:
    unknown = set(options) - set(LINK_OPTIONS)
    if unknown:
        raise TypeError(f"unexpected replica options: {sorted(unknown)}")
    if options.get("synchronous"):
        raise NotSupported(
            "-synchronous true is not supported: streamgate replicates asynchronously, so a "
            "producer is acknowledged once the source stream stores its messages, not once the "
            "replicas do; leave -synchronous false", field="synchronous")
    compression = options.get("networkcompression")
    if compression is not None and compression not in Compression.values:
        raise InvalidInput(f"-networkcompression {compression!r} is not one of "
                           f"{', '.join(Compression.values)}", field="networkcompression")
    return {k: v for k, v in options.items() if v is not None}


@transaction.atomic
def replica_add(
    *, actor: AbstractBaseUser, source: Stream, replica: Stream, paused: bool = False,
    **options: Any,
) -> ReplicaLink:
    """The source owner's half of the two-way agreement (DESIGN.md invariant 5)."""
    source.require(actor, "adminperm", action="add a replica")
    if source.pk == replica.pk:
        raise InvalidInput(f"{source.path} cannot be a replica of itself", field="replica")
    values = _clean_options(options)
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
    values.setdefault("networkcompression", source.compression)
    link = ReplicaLink.objects.create(
        source=source, replica=replica, idx=idx, paused=paused, created_by=actor, **values
    )
    propagate_topics([source.id])
    publish_link_event("replica.added", source, replica)
    if not paused:
        stream_wake(stream=source.uuid)  # moves at once if the upstream is already agreed
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
    values = _clean_options(options)
    if not values:
        raise InvalidInput("nothing to change: give -throttle, -synchronous, "
                           "-networkcompression or -networkencryption")
    for key, value in values.items():
        setattr(link, key, value)
    link.save()
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
    tenant: str | None = None, **options: Any,
) -> ReplicaLink:
    """MapR's seven autosetup steps, in one transaction: all of them or none."""
    source.require(actor, "adminperm", action="set up replicas")
    path = str(parse_stream_path(replica, field="replica"))
    if Stream.objects.filter(path=path).exists():
        raise AlreadyExists(f"replica {path} already exists: autosetup creates the replica "
                            "itself; use 'stream replica add' for an existing stream",
                            field="replica")
    created = stream_create(actor=actor, path=path, tenant=tenant, copymetafrom=source.path)
    link = replica_add(actor=actor, source=source, replica=created, paused=True, **options)
    upstream_add(actor=actor, replica=created, source=source)
    copy_stream_for_setup(source=source, replica=created)
    if multimaster:
        replica_add(actor=actor, source=created, replica=source, **options)
        upstream_add(actor=actor, replica=source, source=created)
    link.paused = False
    link.state = ReplicaState.REPLICATING
    link.save(update_fields=["paused", "state"])
    return link


def copy_stream_for_setup(*, source: Stream, replica: Stream) -> None:
    """Autosetup step 4. The bulk copy runs as a Spark job, which is not built yet."""
    raise NotSupported(
        "autosetup's copy step (copying the source's messages into the replica) needs the "
        "copystream job, which this version does not have yet; set the replica up by hand "
        "instead: stream create -copymetafrom, replica add -paused true, upstream add, "
        "replica resume"
    )
