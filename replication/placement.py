"""Where each partition of a cluster lives, as every routing process caches it (issue 33).

A `View` is one cluster's store groups and placement at one `placement_version`, kept per
process and looked at again every REFRESH_SECONDS (one indexed query), at once after this
process changes it, and whenever a store refuses a write as NOT_HELD (the placement fence,
replication/engine/fence.py): a stale view can cost a retry, never a write to the wrong group
(DESIGN.md invariant 12), nor a new partition placed on a group that takes none now (a
draining one: `_record` checks the groups it chose). A cluster of one group has no router at
all (`View.router` None).
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from uuid import UUID

from django.db import DatabaseError, transaction
from django.db.models import F

from replication import grouprate
from replication.engine import fence
from replication.engine.store import StoreError
from replication.engine.storebase import MessageStore
from replication.models import Cluster, Placement, StoreGroup, Stream

REFRESH_SECONDS = 2.0
PLACE_ATTEMPTS = 4  # placements of a topic's partitions found stale in a row before giving up
TopicKey = tuple[UUID, str]  # (stream, topic)


@dataclass
class View:
    cluster: str
    version: int
    stores: dict[str, MessageStore]  # by group name, the home group (the oldest) first
    active: tuple[str, ...]  # groups that take new partitions
    # Each placed topic's partitions and their groups: a topic's placement is one lookup, not
    # a scan of a cluster's 100,000 partitions (issue 33).
    where: dict[TopicKey, dict[int, str]] = field(default_factory=dict)
    urls: dict[str, str] = field(default_factory=dict)  # each group's store URL, resolved
    router: MessageStore | None = None

    @property
    def home(self) -> str:
        return next(iter(self.stores))

    def group_of(self, stream: UUID, topic: str, partition: int) -> str | None:
        return self.where.get((stream, topic), {}).get(partition)


_views: dict[str, View | None] = {}
# (cluster pk, placement_version) each cached view was read at: a cluster made again under
# the same name starts its versions over.
_seen: dict[str, tuple[int, int] | None] = {}
_forgotten: dict[str, float] = {}  # when this process last changed each cluster's placement
_one_group: dict[str, int] = {}  # the version at which each cluster had a single group
_checked: dict[str, float] = {}  # when each cluster's version was last looked at
_lock = threading.Lock()
# Filled by replication.stores (which opens stores by URL and builds the router): kept apart so
# this module needs neither.
opener: Callable[[str, str, str], MessageStore] | None = None  # store_url, group url, cluster
router_factory: Callable[[View], MessageStore] | None = None
resolver: Callable[[str, str, str], str] | None = None  # the URL `opener` opens


def view_of(cluster: str) -> View | None:
    """The cluster's cached view when it has several groups; None for one group (or none)."""
    checked = _checked.get(cluster)
    if checked is not None and time.monotonic() - checked <= REFRESH_SECONDS:
        return _views.get(cluster)
    try:
        return refresh(cluster, _views.get(cluster))
    except DatabaseError:  # TransactionManagementError too
        # The control database away (or this transaction broken): keep routing as last seen;
        # a gateway or listener goes on without it, and the fence catches what changed.
        _checked[cluster] = time.monotonic()
        return _views.get(cluster)


def refresh(cluster: str, old: View | None, *, force: bool = False) -> View | None:
    at = time.monotonic()
    row = Cluster.objects.filter(name=cluster).values_list("pk", "placement_version",
                                                           "store_url").first()
    if row is None:
        return _install(cluster, None, None, at)
    pk, version, store_url = row
    if not force and (old.version if old is not None else _one_group.get(cluster)) == version:
        # One query a look: the groups did not change.
        return _install(cluster, (pk, version), old, at)
    groups = list(StoreGroup.objects.filter(cluster_id=pk).order_by("pk")
                  .values_list("name", "url", "state"))
    if len(groups) < 2:
        _one_group[cluster] = version
        return _install(cluster, (pk, version), None, at)
    _one_group.pop(cluster, None)
    assert opener is not None and router_factory is not None
    assert resolver is not None
    urls = {name: resolver(store_url, url, cluster) for name, url, _ in groups}
    stores = {name: opener(store_url, url, cluster) for name, url, _ in groups}
    where: dict[TopicKey, dict[int, str]] = {}
    for stream, topic, p, group in Placement.objects.filter(group__cluster_id=pk).values_list(
            "stream__uuid", "topic", "partition", "group__name"):
        where.setdefault((stream, topic), {})[p] = group
    view = View(cluster, version, stores,
                tuple(n for n, _, s in groups if s == StoreGroup.State.ACTIVE), where, urls)
    view.router = old.router if old is not None and old.router is not None else \
        router_factory(view)
    return _install(cluster, (pk, version), view, at)


def _install(cluster: str, read: tuple[int, int] | None, view: View | None,
             at: float) -> View | None:
    """Cache the view, `read` (cluster pk, version) at time `at`, and return it.

    The view and the time of the look are set together: never a window in which the cache is
    checked but empty (a thread looking then took a cluster of several groups for one of one
    group and wrote to its home store past the router, refused there as NOT_HELD with no
    retry: issue 33's drain race). A view older than the one cached is not put back, and one
    read before this process last changed the placement is not taken as fresh (another
    thread's read that this process's change overtook): the next look reads it again.
    """
    with _lock:
        seen = _seen.get(cluster)
        if read is None or seen is None or read[0] != seen[0] or read[1] >= seen[1]:
            _views[cluster] = view
            _seen[cluster] = read
        if at >= _forgotten.get(cluster, 0.0):
            _checked[cluster] = at
    return view


def forget(cluster: str | None = None) -> None:
    """Have the next look read the placement again: after this process changed it. The last
    view stays what a look finds meanwhile (or while the control database is away), never
    nothing. With no cluster, forget everything (between tests)."""
    with _lock:
        if cluster is None:
            for cache in (_views, _seen, _forgotten, _checked, _one_group):
                cache.clear()
        else:
            _checked.pop(cluster, None)
            _one_group.pop(cluster, None)
            _forgotten[cluster] = time.monotonic()


# --- placing new partitions -----------------------------------------------------------------


@dataclass(frozen=True)
class Load:
    nbytes: int
    partitions: int
    rate: float | None = None  # messages per second written (grouprate.py), None unknown


def least_loaded(loads: dict[str, Load], count: int) -> list[str]:
    """The group of each of `count` new partitions of a topic: the groups in order of load
    (each one's share of the groups' bytes plus its share of their write rate, then fewest
    partitions), taken in turn, so a topic's partitions spread over the groups and the
    least-loaded ones take the first (and any one more than the others)."""
    total_bytes = sum(load.nbytes for load in loads.values())
    total_rate = sum(load.rate or 0.0 for load in loads.values())

    def weight(group: str) -> tuple[float, int, str]:
        load = loads[group]
        share = (load.nbytes / total_bytes if total_bytes else 0.0) + (
            (load.rate or 0.0) / total_rate if total_rate else 0.0)
        return share, load.partitions, group

    order = sorted(loads, key=weight)
    return [order[i % len(order)] for i in range(count)]


# The threads loads_of asks the groups' stores in, kept (starting them cost more than asking),
# per process: a forked worker inherits a pool whose threads it does not have.
_asking: tuple[int, ThreadPoolExecutor] | None = None


def _pool() -> ThreadPoolExecutor:
    global _asking
    if _asking is None or _asking[0] != os.getpid():
        _asking = (os.getpid(), ThreadPoolExecutor(max_workers=8,
                                                   thread_name_prefix="placement-loads"))
    return _asking[1]


def loads_of(view: View, groups: Iterable[str]) -> dict[str, Load]:
    """Each group's load, its store asked in a thread of its own: each answer sums a table of
    a row per partition (100,000 of them on a big cluster, issue 33), so asked one after the
    other they would add up in every topic's creation."""
    names = list(groups)
    measured = list(_pool().map(lambda name: fence.load(view.stores[name]), names))
    return {name: Load(nbytes, partitions, grouprate.rate(view.cluster, name, written))
            for name, (nbytes, partitions, written) in zip(names, measured, strict=True)}


def place(view: View, stream: UUID, topic: str, partitions: Iterable[int]) -> View:
    """Place the topic's partitions that have no group yet on the least-loaded active groups,
    then make every group's store hold exactly the topic's partitions placed on it (rows for
    all of them in every group, the fence set). Returns the view reloaded."""
    missing = sorted({p for p in partitions if view.group_of(stream, topic, p) is None})
    if missing:
        view = _place_missing(view, stream, topic, missing)
    hold(view, stream, topic)
    return view


def _place_missing(view: View, stream: UUID, topic: str, missing: list[int]) -> View:
    for _ in range(PLACE_ATTEMPTS):
        loads = loads_of(view, view.active)
        chosen = dict(zip(missing, least_loaded(loads, len(missing)), strict=True))
        bumped = _record(view.cluster, stream, topic, chosen)
        if bumped is not None:
            return _after_own_change(view, stream, topic, bumped=bumped)
        # A group chosen takes no new partitions now (drained or removed since the view was
        # read): choose again among the groups as they are.
        view = refresh(view.cluster, view, force=True) or view
        missing = [p for p in missing if view.group_of(stream, topic, p) is None]
        if not missing:
            return view
    raise StoreError(f"the store groups of cluster {view.cluster} kept changing while "
                     f"partitions of topic {topic} were placed: try again")


def hold(view: View, stream: UUID, topic: str) -> None:
    """Rows for every placed partition of the topic in every group, held where placed."""
    placed = view.where.get((stream, topic), {})
    if not placed:
        return
    count = max(placed) + 1
    # The fence is not installed here: `cluster store add` did it on every group before the
    # view could name them, and a stale view must not put it back once the cluster is down to
    # one group (store_group_remove takes it off). Each group's store in a thread of its own.
    def held_in(name: str) -> None:
        store = view.stores[name]
        store.ensure_topic(stream, topic, count)
        fence.set_held(store, stream, topic, [p for p, g in placed.items() if g == name],
                       view.version)

    for _ in _pool().map(held_in, view.stores):
        pass  # each one's error, if any, raised here


def _record(cluster: str, stream: UUID, topic: str, chosen: dict[int, str]) -> bool | None:
    """Whether the placement was recorded (and its version bumped); None, recording nothing,
    when a chosen group takes no new partitions now (the view chosen from was stale)."""
    stream_id = Stream.objects.filter(uuid=stream).values_list("pk", flat=True).first()
    if stream_id is None:  # a store-only stream (engine tests): nothing to record
        return False
    with transaction.atomic():
        # The chosen groups' rows locked, in one order: a drain marking one of them (an update
        # of its row) commits before this looks, or waits for this commit, so the drain's plan,
        # read after its mark, finds every partition placed on the group.
        groups = dict(StoreGroup.objects.select_for_update(of=("self",), no_key=True).filter(
            cluster__name=cluster, name__in=set(chosen.values()),
            state=StoreGroup.State.ACTIVE).order_by("pk").values_list("name", "pk"))
        if set(chosen.values()) - set(groups):
            return None
        Placement.objects.bulk_create(
            [Placement(stream_id=stream_id, topic=topic, partition=p, group_id=groups[g])
             for p, g in chosen.items()], ignore_conflicts=True)  # a racing placer won
        bump(cluster)
    return True


def bump(cluster: str) -> None:
    # Last in its transaction: the cluster's row stays locked only until the commit.
    Cluster.objects.filter(name=cluster).update(placement_version=F("placement_version") + 1)


def unplace(view: View, stream: UUID, topic: str | None) -> None:
    """Forget the placement of a dropped topic (or of every topic of a dropped stream)."""
    rows = Placement.objects.filter(stream__uuid=stream, group__cluster__name=view.cluster)
    if topic is not None:
        rows = rows.filter(topic=topic)
    with transaction.atomic():
        bumped = rows.delete()[0] > 0
        if bumped:
            bump(view.cluster)
    _after_own_change(view, stream, topic, bumped=bumped)


def _after_own_change(view: View, stream: UUID, topic: str | None, *, bumped: bool) -> View:
    """The view after this process placed or unplaced one topic (or stream): when no other
    change came between (the version moved by exactly this process's bump, if any), only that
    topic's rows are read again, not a cluster's whole placement (issue 33: 100,000 rows for
    each topic created); otherwise the whole view is."""
    at = time.monotonic()
    pk, version = Cluster.objects.filter(name=view.cluster).values_list(
        "pk", "placement_version").first() or (None, None)
    if pk is None or version != view.version + bumped:
        return refresh(view.cluster, view, force=True) or view
    rows = Placement.objects.filter(group__cluster__name=view.cluster, stream__uuid=stream)
    if topic is not None:
        rows = rows.filter(topic=topic)
    if topic is None:
        where = {key: placed for key, placed in view.where.items() if key[0] != stream}
    else:
        where = {**view.where}
        where.pop((stream, topic), None)
    for t, p, g in rows.values_list("topic", "partition", "group__name"):
        where.setdefault((stream, t), {})[p] = g
    changed = dataclasses.replace(view, version=version, where=where)
    _install(view.cluster, (pk, version), changed, at)
    return changed
