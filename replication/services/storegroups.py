"""A cluster's store groups (issue 33): `cluster store add|list|remove`.

Adding a group makes the cluster route by partition (replication/storerouter.py): the new
group's store is created and checked first, every group's store gets the placement fence
(engine/fence.py) and the new one a row (not held) for every partition the cluster has, and
only then is the group recorded, so a process that sees the group finds its store ready. The
stores are worked on before any control-plane row is locked (invariant 14).
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

import psycopg
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from replication import grouprate, placement
from replication.engine import fence
from replication.engine.store import StoreError
from replication.engine.storebase import MessageStore
from replication.errors import AlreadyExists, Conflict, Hint, InvalidInput, NotFound
from replication.models import Cluster, Placement, StoreGroup, Stream
from replication.services.clusters import _operator_only, cluster_by_name
from replication.stores import group_store, store_url

GROUP_NAME = re.compile(r"[a-z][a-z0-9_-]{0,62}")
HOME = "s1"  # the group every cluster starts with, at its store as before store groups
LIST_HINT = Hint("cluster.store.list", "see the cluster's store groups", cli="see {command}")


def groups_of(cluster: Cluster) -> list[StoreGroup]:
    """The cluster's groups, oldest (home) first; a cluster made without one gets its home."""
    groups = list(cluster.store_groups.order_by("pk"))
    if not groups:
        groups = [StoreGroup.objects.get_or_create(cluster=cluster, name=HOME,
                                                   defaults={"url": cluster.store_url})[0]]
    return groups


def group_named(cluster: Cluster, groups: list[StoreGroup], name: str) -> StoreGroup:
    """The group of that name among the cluster's `groups`, or NotFound naming the fix."""
    group = next((g for g in groups if g.name == name), None)
    if group is None:
        raise NotFound(f"cluster {cluster.name} has no store group {name!r}", field="name",
                       hint=LIST_HINT)
    return group


def _check_name(cluster: Cluster, name: str) -> None:
    if not GROUP_NAME.fullmatch(name):
        raise InvalidInput(f"invalid store group name {name!r}: use a lowercase letter then up "
                           "to 62 lowercase letters, digits, '_' or '-' (e.g. s2)", field="name")
    if cluster.store_groups.filter(name=name).exists():
        raise AlreadyExists(f"cluster {cluster.name} already has a store group {name}",
                            field="name", hint=LIST_HINT)


def _check_url(cluster: Cluster, url: str, groups: list[StoreGroup]) -> None:
    if not url.startswith(("postgresql://", "postgres://", "sqlite:///")):
        raise InvalidInput(f"-url {redact(url)!r} is not a message store URL: give "
                           "postgresql://user@host:port/database (or sqlite:///path in "
                           "embedded mode)", field="url")
    taken = {group_store_url(cluster, g) for g in groups}
    others = StoreGroup.objects.exclude(cluster=cluster).filter(url=url).first()
    if url in taken or others is not None:
        owner = f"cluster {others.cluster.name}" if others else f"cluster {cluster.name}"
        raise InvalidInput(f"-url {redact(url)} is already a store group of {owner}: give "
                           "each group its own database", field="url")


def group_store_url(cluster: Cluster, group: StoreGroup) -> str:
    return group.url or store_url(cluster)


def _open_checked(cluster: Cluster, url: str) -> MessageStore:
    try:
        return group_store(cluster, url)
    except (StoreError, OSError, psycopg.Error) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise InvalidInput(f"cannot reach or create the message store at {redact(url)}: "
                           f"{first}; fix -url (the server must be up and the user allowed "
                           "to create databases)", field="url") from err


def store_group_add(*, actor: AbstractBaseUser, cluster: str, name: str,
                    url: str) -> StoreGroup:
    _operator_only(actor, "add store groups")
    target = cluster_by_name(cluster, field="cluster")
    groups = groups_of(target)
    _check_name(target, name)
    _check_url(target, url, groups)
    new = _open_checked(target, url)
    homes = {g.name: group_store(target, g.url) for g in groups}
    for store in (*homes.values(), new):
        fence.install(store)
    home = homes[groups[0].name]
    for stream, topic, count in fence.catalog(home):
        new.ensure_topic(stream, topic, count)  # not held: the fence's default
    _place_unplaced(target, groups[0], home)
    with transaction.atomic():
        group = StoreGroup.objects.create(cluster=target, name=name, url=url)
        placement.bump(target.name)
    placement.forget(target.name)
    return group


def _place_unplaced(cluster: Cluster, home: StoreGroup, store: MessageStore) -> None:
    """Record on the home group every partition its store holds with no placement yet (made
    while the cluster had one group): placement is explicit once the cluster routes."""
    streams = dict(Stream.objects.filter(cluster=cluster).values_list("uuid", "pk"))
    placed = set(Placement.objects.filter(group__cluster=cluster).values_list(
        "stream__uuid", "topic", "partition"))
    rows = [Placement(stream_id=streams[stream], topic=topic, partition=p, group=home)
            for stream, topic, count in fence.catalog(store) if stream in streams
            for p in range(count) if (stream, topic, p) not in placed]
    Placement.objects.bulk_create(rows, batch_size=5000, ignore_conflicts=True)


def store_group_remove(*, actor: AbstractBaseUser, cluster: str, name: str) -> None:
    _operator_only(actor, "remove store groups")
    target = cluster_by_name(cluster, field="cluster")
    groups = groups_of(target)
    group = group_named(target, groups, name)
    if len(groups) == 1:
        raise Conflict(f"store group {name} is the last of cluster {target.name}: a cluster "
                       "keeps at least one; add another and move the partitions first")
    held = group.placements.count() or fence.load(group_store(target, group.url))[1]
    if held:
        raise Conflict(f"store group {name} of cluster {target.name} still holds {held} "
                       "partition(s): move them to another group (or delete their topics) "
                       "before removing it")
    with transaction.atomic():
        group.delete()
        placement.bump(target.name)
    placement.forget(target.name)
    if len(groups) == 2:  # back to one group: no router, so no fence either
        last = next(g for g in groups if g.pk != group.pk)
        fence.uninstall(group_store(target, last.url))


def store_group_list(*, actor: AbstractBaseUser, cluster: str) -> list[dict]:
    """`cluster store list`: operators only (the rows name the stores' servers)."""
    _operator_only(actor, "list store groups")
    return store_group_rows(cluster_by_name(cluster, field="cluster"))


def store_group_rows(cluster: Cluster) -> list[dict]:
    """Per group: its partitions, stored bytes and messages, and health (its store answers)."""
    groups = groups_of(cluster)
    counts = {g.pk: g.placements.count() for g in groups}
    return [_row(cluster, g, counts[g.pk], len(groups)) for g in groups]


def _row(cluster: Cluster, group: StoreGroup, placed: int, ngroups: int) -> dict:
    row = {"name": group.name, "url": redact(group_store_url(cluster, group)),
           "state": group.state, "partitions": placed, "bytes": None, "messages": None,
           "msgpersec": None, "health": "ok"}
    try:
        store = group_store(cluster, group.url)
        nbytes, held, written = fence.load(store)
        with store._reading() as conn:
            where = " WHERE held" if ngroups > 1 and fence._has_column(store, conn) else ""
            (messages,) = conn.execute(f"SELECT coalesce(sum(rows), 0) FROM partitions{where}"
                                       ).fetchone()
    except (StoreError, OSError, psycopg.Error) as err:
        row["health"] = f"unreachable: {str(err).strip().splitlines()[0]}"
        return row
    rate = grouprate.rate(cluster.name, group.name, written)
    row.update(bytes=nbytes, messages=int(messages), partitions=max(placed, held)
               if ngroups == 1 else placed, msgpersec=None if rate is None else round(rate, 1))
    return row


def redact(url: str) -> str:
    """The URL without its password."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))
