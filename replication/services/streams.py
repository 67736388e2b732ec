from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import Q

from accounts.models import Membership, Role, Tenant, TokenScope
from replication import ace
from replication.errors import AlreadyExists, Hint, InvalidInput, NotFound, PermissionDenied
from replication.models import (
    PERMISSIONS,
    Cluster,
    Compression,
    DefaultStream,
    Stream,
    TimestampType,
)
from replication.paths import parse_stream_path
from replication.plans import streams_require_room
from replication.scopes import scope_require
from replication.stores import store_for

MAX_PARTITIONS = 4096
COMPACTION = ("compact", "mincompactionlag", "deleteretention", "mincleanabledirtyratio")
METADATA = ("defaultpartitions", "ttl", "compression", "autocreate", "defaulttimestamptype",
            *COMPACTION)
CREATING_ROLES = (Role.ADMIN, Role.MEMBER)


def clean_metadata(values: dict[str, Any]) -> dict[str, Any]:
    """Validate stream metadata and ACEs; unknown keys are a programming error."""
    unknown = set(values) - set(METADATA) - set(PERMISSIONS)
    if unknown:
        raise TypeError(f"unexpected stream attributes: {sorted(unknown)}")
    cleaned = dict(values)
    if "defaultpartitions" in values:
        cleaned["defaultpartitions"] = clean_partitions(values["defaultpartitions"],
                                                        field="defaultpartitions")
    ttl = values.get("ttl", 0)
    if not isinstance(ttl, int) or isinstance(ttl, bool) or not 0 <= ttl < 2**63:
        raise InvalidInput("-ttl must be a whole number of seconds, 0 or more (0 keeps "
                           "messages forever)", field="ttl")
    _choice(values, "compression", Compression.values)
    _choice(values, "defaulttimestamptype", TimestampType.values)
    _clean_compaction(values)
    for perm in PERMISSIONS:
        if perm in values:
            cleaned[perm] = clean_ace(values[perm], field=perm)
    return cleaned


def _clean_compaction(values: dict[str, Any]) -> None:
    if "compact" in values and not isinstance(values["compact"], bool):
        raise InvalidInput("-compact must be true or false", field="compact")
    for key in ("mincompactionlag", "deleteretention"):
        value = values.get(key, 0)
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**63:
            raise InvalidInput(f"-{key} must be a whole number of milliseconds, 0 or more",
                               field=key)
    ratio = values.get("mincleanabledirtyratio", 0.5)
    if (not isinstance(ratio, int | float) or isinstance(ratio, bool)
            or not 0 <= ratio <= 1):
        raise InvalidInput("-mincleanabledirtyratio must be a number from 0 to 1 (the share "
                           "of a partition not yet compacted before compaction runs)",
                           field="mincleanabledirtyratio")


def compaction_possible(cluster: Cluster) -> None:
    """A compacted stream needs its cluster's store in the batch layout (compaction rewrites
    stored record batches): InvalidInput naming the conversion otherwise."""
    if not store_for(cluster).KEEPS_BATCHES:
        raise InvalidInput(f"-compact true needs cluster {cluster.name}'s message store in the "
                           "batch layout: an operator converts it with `manage.py "
                           "convertstores` (docs/operations.md), then compaction can be set",
                           field="compact")


def clean_partitions(value: Any, *, field: str = "partitions") -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_PARTITIONS:
        raise InvalidInput(f"-{field} must be a whole number from 1 to {MAX_PARTITIONS}",
                           field=field)
    return value


def clean_ace(text: Any, *, field: str) -> str:
    if not isinstance(text, str):
        raise InvalidInput(f"-{field} must be an access control expression", field=field)
    try:
        return str(ace.parse(text))
    except ace.AceError as err:
        raise InvalidInput(f"-{field}: {err}", field=field) from err


def _choice(values: dict[str, Any], key: str, allowed: list[str]) -> None:
    if key in values and values[key] not in allowed:
        raise InvalidInput(
            f"-{key} {values[key]!r} is not one of {', '.join(allowed)}", field=key
        )


def waiting_for_approval(tenant: Tenant) -> PermissionDenied:
    return PermissionDenied(f"tenant {tenant.name} is waiting for an operator's approval: "
                            "streams can be created in it once an operator approves it",
                            field="tenant")


def creating_tenant(actor: AbstractBaseUser, tenant: str | None) -> Tenant:
    memberships = Membership.objects.filter(user=actor, role__in=CREATING_ROLES)
    if tenant:
        found = memberships.filter(tenant__name=tenant).select_related("tenant").first()
        if found is None:
            raise NotFound(f"tenant {tenant!r} is not one where you may create streams",
                           field="tenant")
        if not found.tenant.approved:
            raise waiting_for_approval(found.tenant)
        return found.tenant
    every = [m.tenant for m in memberships.select_related("tenant")]
    tenants = [t for t in every if t.approved]
    if len(tenants) == 1:
        return tenants[0]
    if not tenants and every:
        raise waiting_for_approval(every[0])
    if not tenants:
        raise PermissionDenied(
            f"{actor.get_username()} may not create streams: ask a tenant administrator "
            "for the member or admin role"
        )
    names = ", ".join(t.name for t in tenants)
    raise InvalidInput(f"you belong to several tenants ({names}): choose one with -tenant",
                       field="tenant")


def unavailable(path: str, *, field: str = "path") -> NotFound:
    """Another tenant's namespace reads like a missing object: a 404 naming nothing of it."""
    return NotFound(f"stream path {path} is not available: choose another path", field=field)


def check_path_free(path: str, tenant: Tenant, *, field: str = "path") -> None:
    """A new stream of `tenant` at `path` must neither be, contain nor lie inside another
    stream, nor any tenant's default stream but its own (it would squat the name that
    tenant's plain Kafka topic names create on first use)."""
    parents = [path[: i] for i in range(len(path)) if path[i] == "/"]
    overlapping = Q(path=path) | Q(path__in=parents) | Q(path__startswith=path + "/")
    if (Stream.objects.filter(overlapping).exclude(tenant=tenant).exists()
            or DefaultStream.objects.filter(overlapping).exclude(tenant=tenant).exists()):
        raise unavailable(path, field=field)
    if Stream.objects.filter(path=path).exists():
        raise AlreadyExists(f"stream {path} already exists: choose another path", field=field)
    clash = Stream.objects.filter(overlapping).values_list("path", flat=True).first()
    if clash:
        raise InvalidInput(
            f"stream path {path} would nest with stream {clash}: a stream cannot contain "
            "another stream; choose a sibling path", field=field
        )


@transaction.atomic
def stream_create(
    *,
    actor: AbstractBaseUser,
    path: str,
    tenant: str | None = None,
    copymetafrom: str | None = None,
    **metadata: Any,
) -> Stream:
    scope_require(actor, TokenScope.ADMIN, action="creating a stream")
    where = parse_stream_path(path)
    cluster = Cluster.objects.filter(name=where.cluster).first()
    if cluster is None:
        raise NotFound(f"cluster {where.cluster} does not exist", field="path",
                       hint=Hint("cluster.list", "list clusters"))
    owner = creating_tenant(actor, tenant)
    check_path_free(str(where), owner)
    streams_require_room(owner.pk)
    try:
        creator = ace.default_for(actor.get_username())
    except ace.AceError as err:
        raise InvalidInput(f"your user name cannot be written in an ACE ({err.reason}): ask an "
                           "operator for a user name of letters, digits, '_', '-', '.', '@'",
                           field="path") from err
    values: dict[str, Any] = dict.fromkeys(PERMISSIONS, creator)
    if copymetafrom:
        template = Stream.objects.restrict(actor).by_path(copymetafrom, field="copymetafrom")
        template.require(actor, "adminperm", action="copy metadata")
        values.update({k: getattr(template, k) for k in (*METADATA, *PERMISSIONS)})
    values.update(clean_metadata(metadata))
    if values.get("compact"):
        compaction_possible(cluster)
    return Stream.objects.create(
        path=str(where), cluster=cluster, name=where.name, tenant=owner, created_by=actor,
        **values,
    )


@transaction.atomic
def stream_edit(*, actor: AbstractBaseUser, stream: Stream, **changes: Any) -> Stream:
    stream.require(actor, "adminperm", action="edit the stream")
    if not changes:
        raise InvalidInput("nothing to change: give at least one attribute, e.g. -ttl 3600")
    for key, value in clean_metadata(changes).items():
        setattr(stream, key, value)
    if changes.get("compact"):
        compaction_possible(stream.cluster)
    stream.save()
    return stream


@transaction.atomic
def stream_ace_change(*, actor: AbstractBaseUser, stream: Stream, perm: str, term: str,
                      grant: bool) -> bool:
    """Grant `term` (u:<user>, g:<group>, r:<role> or p) `perm` on the stream, as one more
    alternative of its ACE, or revoke it (that alternative removed): Kafka's CreateAcls and
    DeleteAcls. Under the stream row's lock, so concurrent changes all count; adminperm, as
    every edit. Whether the ACE changed."""
    if perm not in PERMISSIONS:
        raise InvalidInput(f"{perm!r} is no permission: use one of {', '.join(PERMISSIONS)}",
                           field="perm")
    locked = Stream.objects.select_related("cluster", "tenant").select_for_update().get(
        pk=stream.pk)
    locked.require(actor, "adminperm", action="edit the stream")
    current = getattr(locked, perm)
    try:
        changed = (ace.with_term if grant else ace.without_term)(current, term)
    except ace.AceError as error:
        raise InvalidInput(f"{term!r}: {error.reason}", field="principal") from error
    if changed == str(ace.parse(current)):
        return False
    stream_edit(actor=actor, stream=locked, **{perm: changed})
    return True


@transaction.atomic
def stream_delete(*, actor: AbstractBaseUser, stream: Stream) -> None:
    stream.require(actor, "adminperm", action="delete the stream")
    cluster, uuid = stream.cluster, stream.uuid
    stream.delete()
    # The messages go once the deletion is committed; a rollback keeps them.
    transaction.on_commit(lambda: store_for(cluster).drop_stream(uuid))
