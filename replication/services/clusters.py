from __future__ import annotations

import re

import psycopg
from django.contrib.auth.models import AbstractBaseUser
from django.db import connection, transaction

from accounts.models import TokenScope
from replication.engine.copies import StoreGroup as ServerGroup
from replication.engine.copies import pg_group, single
from replication.engine.store import StoreError
from replication.errors import AlreadyExists, Hint, InvalidInput, NotFound, PermissionDenied
from replication.models import Cluster, Gateway, StoreGroup
from replication.paths import validate_cluster_name
from replication.scopes import scope_require
from replication.stores import store_for

GATEWAY_ADDRESS = re.compile(r"(?P<host>[A-Za-z0-9][A-Za-z0-9.-]{0,252})(?::(?P<port>\d{1,5}))?")
MAX_GATEWAYS = 64


def _operator_only(actor: AbstractBaseUser, action: str) -> None:
    scope_require(actor, TokenScope.ADMIN, action=f"the operator action '{action}'")
    if not actor.is_staff:
        raise PermissionDenied(f"only cluster operators may {action}: ask an operator "
                               "(a staff account) to do it")


def cluster_by_name(name: str, *, field: str = "dstcluster") -> Cluster:
    cluster = Cluster.objects.filter(name=name).first()
    if cluster is None:
        raise NotFound(f"cluster {name!r} does not exist", field=field,
                       hint=Hint("cluster.list", "see the list of clusters", cli="see {command}"))
    return cluster


MAX_COPIES = 9


def cluster_create(*, actor: AbstractBaseUser, name: str, store_url: str = "",
                   required_copies: int = 1) -> Cluster:
    _operator_only(actor, "create clusters")
    validate_cluster_name(name)
    if not 1 <= required_copies <= MAX_COPIES:
        raise InvalidInput(f"-requiredcopies {required_copies}: give 1 to {MAX_COPIES}",
                           field="requiredcopies")
    if Cluster.objects.filter(name=name).exists():
        raise AlreadyExists(f"cluster {name} already exists", field="name")
    try:
        # Each cluster has its own message store: created now, before the cluster's row
        # exists, so no transaction waits on the store's server meanwhile (invariant 14).
        group = store_for(Cluster(name=name, store_url=store_url)).group()
    except (StoreError, OSError, psycopg.Error) as err:
        raise InvalidInput(f"cannot create the message store of cluster {name} at "
                           f"{store_url or 'the default location'}: {err}; fix -storeurl",
                           field="storeurl") from err
    _require_copies(name, group, required_copies)
    cluster = Cluster.objects.create(name=name, store_url=store_url,
                                     required_copies=required_copies)
    # Its first store group, at the store just made (issue 33: more may be added).
    StoreGroup.objects.create(cluster=cluster, name="s1", url=store_url)
    return cluster


def _require_copies(name: str, group: ServerGroup, required: int) -> None:
    """Refuse a requirement the store's group cannot meet: fewer members than copies, or
    fewer synchronous ones (a commit acknowledged on one server when two were asked for is
    the loss invariant 11 forbids)."""
    if len(group.members) < required:
        raise InvalidInput(
            f"cluster {name} would require {required} copies of every acknowledged message but "
            f"its message store's group has {len(group.members)} member(s): run the store as a "
            "replicated group (Patroni with synchronous_mode: docs/scaling.md) and give its "
            "multi-host URL as -storeurl, or lower -requiredcopies", field="requiredcopies")
    if group.copies < required:
        raise InvalidInput(
            f"cluster {name} would require {required} copies but a commit on its message store "
            f"waits for {group.copies}: turn on synchronous replication (Patroni's "
            "synchronous_mode) or lower -requiredcopies", field="requiredcopies")


def cluster_info(cluster: Cluster) -> dict:
    """The cluster's required copies beside its store group as it is now (members, roles,
    lag, the timeline and when it began: the last failover or switchover, null if none or
    unknown); `copiesOk` false is what the operator must act on."""
    info = {"name": cluster.name, "state": cluster.state,
            "requiredcopies": cluster.required_copies}
    try:
        group = _described(store_for(cluster).group())
    except (StoreError, OSError, psycopg.Error) as err:
        return {**info, **_unreachable(err), "copiesOk": False}
    return {**info, **group, "copiesOk": group["copies"] >= cluster.required_copies}


def control_info() -> dict:
    """The control database's group as its primary sees it now, in cluster_info's shape: the
    portal's, Celery's and every process's rules live there, so an operator watches its
    members and copies as a store's. The embedded default's SQLite file is one copy."""
    try:
        if connection.vendor != "postgresql":
            return _described(single("control"))
        connection.ensure_connection()
        return _described(pg_group(connection.connection))
    except (OSError, psycopg.Error) as err:
        return _unreachable(err)


def _described(group: ServerGroup) -> dict:
    failover = group.last_failover
    return {"copies": group.copies, "members": group.as_rows(), "timeline": group.timeline,
            "lastFailover": failover.isoformat(timespec="seconds") if failover else None}


def _unreachable(err: Exception) -> dict:
    return {"copies": 0, "members": [], "timeline": None, "lastFailover": None,
            "storeError": str(err).strip().splitlines()[0]}


def validate_gateway_address(address: str, *, field: str = "gateways") -> str:
    match = GATEWAY_ADDRESS.fullmatch(address)
    if len(address) > 255 or not match or (match["port"] and not 0 < int(match["port"]) < 65536):
        raise InvalidInput(f"invalid gateway address {address!r}: write host or host:port",
                           field=field)
    return address


def parse_gateways(text: str) -> list[str]:
    names = text.split()
    if not names:
        raise InvalidInput('-gateways is empty: give host names separated by spaces, e.g. '
                           '-gateways "gw1 gw2:7660"', field="gateways")
    if len(names) > MAX_GATEWAYS:
        raise InvalidInput(f"-gateways lists {len(names)}; at most {MAX_GATEWAYS}",
                           field="gateways")
    for name in names:
        validate_gateway_address(name)
    if len(set(names)) != len(names):
        raise InvalidInput("-gateways names a gateway twice", field="gateways")
    return names


@transaction.atomic
def cluster_gateway_set(*, actor: AbstractBaseUser, dstcluster: str, gateways: str) -> Cluster:
    """Replace the gateways configured for a destination cluster, keeping the heartbeats of
    those that stay."""
    _operator_only(actor, "configure gateways")
    cluster = cluster_by_name(dstcluster)
    names = parse_gateways(gateways)
    cluster.gateways.exclude(name__in=names).delete()
    kept = set(cluster.gateways.values_list("name", flat=True))
    # One create per gateway (at most MAX_GATEWAYS), not bulk_create: the audit trail
    # (operations/audit.py) records each through the model signals.
    for name in names:
        if name not in kept:
            Gateway.objects.create(cluster=cluster, name=name, address=name)
    return cluster


@transaction.atomic
def cluster_gateway_delete(*, actor: AbstractBaseUser, dstcluster: str) -> int:
    _operator_only(actor, "delete gateway configuration")
    deleted, _ = cluster_by_name(dstcluster).gateways.all().delete()
    return deleted
