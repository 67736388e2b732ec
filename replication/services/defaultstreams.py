"""Default streams: where plain Kafka topic names live, per tenant and cluster, with a per-user
override; and opening one (creating it, with the tenant's ACEs, on first use)."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction

from accounts.models import Membership, Role, Tenant, TokenScope
from replication.errors import Hint, InvalidInput, NotFound, PermissionDenied, StreamgateError
from replication.models import PERMISSIONS, Cluster, DefaultStream, Stream
from replication.paths import parse_stream_path
from replication.plans import streams_require_room
from replication.scopes import scope_require
from replication.services.streams import CREATING_ROLES, check_path_free

# A default stream is the tenant's, not its creator's: every member who may create streams
# uses it; its administrators are the tenant's administrators.
TENANT_ACE = "r:admin | r:member"
ADMIN_ACE = "r:admin"


def _tenant_of(actor: AbstractBaseUser, tenant: str | None, *, personal: bool) -> Tenant:
    roles = list(Role) if personal else list(CREATING_ROLES)
    memberships = Membership.objects.filter(user=actor, role__in=roles).select_related("tenant")
    if tenant:
        memberships = memberships.filter(tenant__name=tenant)
    found = [m.tenant for m in memberships]
    if len(found) == 1:
        return found[0]
    if not found:
        what = f"tenant {tenant!r}" if tenant else "any tenant"
        raise PermissionDenied(f"{actor.get_username()} may not set default streams in {what}: "
                               "it needs the member or admin role there")
    raise InvalidInput("you belong to several tenants: choose one with -tenant", field="tenant")


def _check_path(tenant: Tenant, cluster: Cluster, path: str) -> str:
    where = parse_stream_path(path)
    if where.cluster != cluster.name:
        raise InvalidInput(f"-path {path} is on cluster {where.cluster}, not {cluster.name}: "
                           f"give a path under /mapr/{cluster.name}/", field="path")
    # An existing stream of the tenant's own will do; anything else must be creatable on first
    # use, and another tenant's stream or default stream is refused as unavailable.
    if not Stream.objects.filter(path=str(where), tenant=tenant).exists():
        check_path_free(str(where), tenant)
    return str(where)


def _cluster(name: str) -> Cluster:
    cluster = Cluster.objects.filter(name=name).first()
    if cluster is None:
        raise NotFound(f"cluster {name} does not exist", field="cluster",
                       hint=Hint("cluster.list", "list clusters"))
    return cluster


@transaction.atomic
def default_stream_set(*, actor: AbstractBaseUser, cluster: str, path: str,
                       tenant: str | None = None, personal: bool = False) -> DefaultStream:
    """Set the default stream of the actor's tenant on `cluster` (the actor's own override
    with `personal`)."""
    scope_require(actor, TokenScope.ADMIN, action="setting a default stream")
    owner, where = _tenant_of(actor, tenant, personal=personal), _cluster(cluster)
    setting, _ = DefaultStream.objects.update_or_create(
        tenant=owner, cluster=where, user=actor if personal else None,
        defaults={"path": _check_path(owner, where, path), "set_by": actor})
    return setting


@transaction.atomic
def default_stream_remove(*, actor: AbstractBaseUser, cluster: str, tenant: str | None = None,
                          personal: bool = False) -> None:
    owner, where = _tenant_of(actor, tenant, personal=personal), _cluster(cluster)
    deleted, _ = DefaultStream.objects.filter(
        tenant=owner, cluster=where, user=actor if personal else None).delete()
    if not deleted:
        raise NotFound(f"no default stream is set for {'you' if personal else owner} on "
                       f"{cluster}", field="cluster")


@dataclass(frozen=True)
class DefaultChoice:
    """The default stream path for plain names, or why there is none (`missing`)."""

    path: str | None
    missing: str = ""


def default_stream_for(*, actor: AbstractBaseUser, cluster: str | None) -> DefaultChoice:
    """The user's own override on the cluster, else their tenant's setting there."""
    settings = DefaultStream.objects.filter(tenant__memberships__user=actor).filter(
        user__isnull=True) | DefaultStream.objects.filter(user=actor)
    if cluster is not None:
        settings = settings.filter(cluster__name=cluster)
    rows = list(settings.select_related("cluster").distinct())
    own = [r for r in rows if r.user_id == actor.pk]
    chosen = own or rows
    where = f"on cluster {cluster}" if cluster else "on any cluster"
    if len({r.path for r in chosen}) == 1:
        return DefaultChoice(chosen[0].path)
    if not chosen:
        return DefaultChoice(None, f"no default stream is set for {actor.get_username()} "
                                   f"{where}: set a default stream for plain topic names, or "
                                   "start the listener with one")
    return DefaultChoice(None, f"several default streams apply to {actor.get_username()} "
                               f"{where}: start the listener for one cluster, or set your "
                               "own default stream")


def default_stream_open(*, actor: AbstractBaseUser, path: str) -> Stream | None:
    """The default stream at `path`, created with the tenant's ACEs if it does not exist yet
    (None: it exists but is another tenant's, or its cluster is gone)."""
    stream = Stream.objects.restrict(actor).select_related("cluster", "tenant").filter(
        path=path).first()
    if stream is not None or Stream.objects.filter(path=path).exists():
        return stream
    settings = DefaultStream.objects.filter(path=path, tenant__memberships__user=actor)
    setting = settings.select_related("tenant").first()
    tenant = setting.tenant if setting else _only_tenant(actor)
    if tenant is None:
        return None
    return _create(actor, tenant, path)


def _only_tenant(actor: AbstractBaseUser) -> Tenant | None:
    tenants = list(Tenant.objects.filter(memberships__user=actor).distinct()[:2])
    return tenants[0] if len(tenants) == 1 else None


def _create(actor: AbstractBaseUser, tenant: Tenant, path: str) -> Stream | None:
    where = parse_stream_path(path)
    cluster = Cluster.objects.filter(name=where.cluster).first()
    if cluster is None or not tenant.approved:  # a signed-up tenant waiting: no streams yet
        return None
    try:
        check_path_free(str(where), tenant)
    except StreamgateError:
        return None
    acl = {perm: TENANT_ACE for perm in PERMISSIONS} | {"adminperm": ADMIN_ACE}
    try:
        with transaction.atomic():
            streams_require_room(tenant.pk)  # refused with the plan's words, not a None
            return Stream.objects.create(path=str(where), cluster=cluster, name=where.name,
                                         tenant=tenant, created_by=actor, **acl)
    except IntegrityError:  # another connection created it first
        return Stream.objects.restrict(actor).filter(path=path).first()
