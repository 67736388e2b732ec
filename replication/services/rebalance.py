"""Rebalancing a cluster's store groups and draining one (issue 33): `cluster store rebalance`
and `cluster store drain`, each a plan of partition moves (replication/rebalance.py) shown
first with `-dryrun true`, then run in the background one move after the other
(services/partitionmove.py) with its progress kept on a Rebalance row, which the CLI
(`cluster store rebalancestatus`), the API and the admin site show. Creating the row is
audited (operations/audit.py), and so is each move's switch of its placement.

A run is safe to run twice (a redelivered task): it goes on from the first move not done, and
a partition already where the plan sends it counts as moved. One run at a time per cluster.
"""

from __future__ import annotations

import time
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from replication import placement
from replication.engine import fence
from replication.errors import Conflict, InvalidInput
from replication.models import Cluster, Rebalance, StoreGroup, Stream
from replication.rebalance import Move, Part, plan_drain, plan_rebalance
from replication.services import partitionmove
from replication.services.clusters import _operator_only, cluster_by_name
from replication.services.partitionmove import BulkCopy, clean_up_moved, partition_move
from replication.services.storegroups import LIST_HINT, group_named, groups_of
from replication.signals import rebalance_submitted
from replication.stores import group_store

STATUS_HINT = "see its progress with cluster store rebalancestatus"


def _parts(cluster: Cluster, draining: StoreGroup | None = None
           ) -> tuple[list[Part], dict[str, str]]:
    """Every partition each group holds, with its bytes, and those placed on the `draining`
    group not held there yet (their placer's hold comes just after its record); each
    stream's path by UUID."""
    parts = [Part(stream, topic, partition, nbytes, group.name)
             for group in groups_of(cluster)
             for stream, topic, partition, nbytes in fence.held_parts(
                 group_store(cluster, group.url))]
    if draining is not None:
        seen = {(p.stream, p.topic, p.partition) for p in parts}
        parts += [Part(*key, 0, draining.name) for key in draining.placements.values_list(
            "stream__uuid", "topic", "partition") if key not in seen]
    paths = {str(uuid): path for uuid, path in Stream.objects.filter(
        cluster=cluster, uuid__in={p.stream for p in parts}).values_list("uuid", "path")}
    return [p for p in parts if str(p.stream) in paths], paths


def _rows(moves: list[Move], paths: dict[str, str]) -> list[dict[str, Any]]:
    return [{"path": paths[str(m.part.stream)], "stream": str(m.part.stream),
             "topic": m.part.topic, "partition": m.part.partition, "from": m.part.group,
             "to": m.to, "bytes": m.part.nbytes} for m in moves]


def _routed(cluster: Cluster) -> list[StoreGroup]:
    groups = groups_of(cluster)
    if len(groups) < 2:
        raise Conflict(f"cluster {cluster.name} has one store group: add another with "
                       "cluster store add first", hint=LIST_HINT)
    return groups


def _check_throttle(throttle: int | None) -> None:
    if throttle is not None and throttle < 1:
        raise InvalidInput(f"-throttle {throttle} is not a rate: give bytes per second, 1 or "
                           "more (or leave it out for no limit)", field="throttle")


def _check_idle(cluster: Cluster) -> None:
    running = cluster.rebalances.filter(state__in=Rebalance.ACTIVE).first()
    if running is not None:
        raise Conflict(f"{running.kind} #{running.pk} of cluster {cluster.name} is "
                       f"{running.state}: wait for it to end ({STATUS_HINT})")


def rebalance_start(*, actor: AbstractBaseUser, cluster: str, dryrun: bool = False,
                    throttle: int | None = None) -> dict[str, Any]:
    """Plan moves until the active groups are within 10% of each other by bytes; run them
    unless `dryrun`."""
    _operator_only(actor, "rebalance store groups")
    target = cluster_by_name(cluster, field="cluster")
    groups = _routed(target)
    _check_throttle(throttle)
    parts, paths = _parts(target)
    active = [g.name for g in groups if g.state == StoreGroup.State.ACTIVE]
    plan = _rows(plan_rebalance(parts, active), paths)
    return _submit(actor, target, Rebalance.Kind.REBALANCE, None, plan, dryrun, throttle)


def store_group_drain(*, actor: AbstractBaseUser, cluster: str, name: str,
                      dryrun: bool = False, throttle: int | None = None) -> dict[str, Any]:
    """Mark the group draining (it takes no new partitions) and move every partition it holds
    to the other active groups, lightest first; then `cluster store remove` takes it."""
    _operator_only(actor, "drain store groups")
    target = cluster_by_name(cluster, field="cluster")
    groups = _routed(target)
    group = group_named(target, groups, name)
    others = [g.name for g in groups if g.state == StoreGroup.State.ACTIVE and g.pk != group.pk]
    if not others:
        raise Conflict(f"store group {name} is the last active group of cluster {target.name}:"
                       " its partitions would have nowhere to go; add a group first",
                       hint=LIST_HINT)
    _check_throttle(throttle)
    if not dryrun:
        _check_idle(target)
        _mark_draining(group)
    # Planned after the mark: every partition placed on the group is placed by then
    # (placement._record locks the group's row and places only on active groups).
    parts, paths = _parts(target, group)
    plan = _rows(plan_drain(parts, name, [*others, name]), paths)
    return _submit(actor, target, Rebalance.Kind.DRAIN, group, plan, dryrun, throttle)


def _mark_draining(group: StoreGroup) -> None:
    """New partitions go elsewhere from the commit on, in every process (the version bumped
    with the state: a cached view that still has the group active is found stale)."""
    with transaction.atomic():
        group.state = StoreGroup.State.DRAINING
        group.save(update_fields=["state"])
        placement.bump(group.cluster.name)
    placement.forget(group.cluster.name)


def _submit(actor: AbstractBaseUser, cluster: Cluster, kind: str, group: StoreGroup | None,
            plan: list[dict[str, Any]], dryrun: bool, throttle: int | None) -> dict[str, Any]:
    total = sum(row["bytes"] for row in plan)
    if dryrun:
        return {"id": None, "kind": kind, "state": "PLANNED", "moves": plan,
                "bytesTotal": total}
    with transaction.atomic():
        _check_idle(cluster)
        run = Rebalance.objects.create(
            cluster=cluster, kind=kind, group=group, plan=plan, throttle=throttle,
            bytes_total=total, requested_by=actor,
            state=Rebalance.State.QUEUED if plan else Rebalance.State.SUCCEEDED,
            finished=None if plan else timezone.now())
        if plan:
            transaction.on_commit(lambda: rebalance_submitted.send(sender=Rebalance,
                                                                   rebalance_id=run.pk))
    return rebalance_row(run)


def rebalance_row(run: Rebalance) -> dict[str, Any]:
    return {"id": run.pk, "cluster": run.cluster.name, "kind": run.kind,
            "group": run.group.name if run.group_id else None, "state": run.state,
            "movesTotal": len(run.plan), "movesDone": run.moves_done,
            "bytesTotal": run.bytes_total, "bytesDone": run.bytes_done,
            "percent": run.percent, "throttle": run.throttle, "error": run.error,
            "created": run.created.isoformat(),
            "started": run.started.isoformat() if run.started else None,
            "finished": run.finished.isoformat() if run.finished else None,
            "moves": run.plan}


def rebalance_status(*, actor: AbstractBaseUser, cluster: str) -> list[dict[str, Any]]:
    """The cluster's runs, newest first (the last 20)."""
    _operator_only(actor, "see store group rebalances")
    target = cluster_by_name(cluster, field="cluster")
    return [rebalance_row(r) for r in target.rebalances.select_related("cluster", "group")[:20]]


def rebalance_run(*, rebalance_id: int, bulk: BulkCopy | None = None) -> str:
    """Run the moves not done yet; the run's final state. `bulk`: the copier of large
    partitions' histories (partitionmove.BulkCopy; the worker hands in Spark's)."""
    updated = Rebalance.objects.filter(pk=rebalance_id, state__in=Rebalance.ACTIVE).update(
        state=Rebalance.State.RUNNING, started=timezone.now())
    run = Rebalance.objects.select_related("cluster", "requested_by").filter(
        pk=rebalance_id).first()
    if run is None or not updated:
        return run.state if run is not None else "GONE"
    try:
        _run_moves(run, bulk)
    except Exception as err:  # any failure ends the run, recorded for the operator
        Rebalance.objects.filter(pk=run.pk).update(
            state=Rebalance.State.FAILED, error=f"{type(err).__name__}: {err}"[:2000],
            finished=timezone.now())
        return Rebalance.State.FAILED
    Rebalance.objects.filter(pk=run.pk).update(state=Rebalance.State.SUCCEEDED,
                                               finished=timezone.now())
    return Rebalance.State.SUCCEEDED


def _run_moves(run: Rebalance, bulk: BulkCopy | None) -> None:
    actor = run.requested_by
    if actor is None or not actor.is_staff:
        raise Conflict("the operator who asked for this run is no longer one: ask again")
    started, moved = time.monotonic(), 0
    for row in run.plan[run.moves_done:]:
        stream = _stream_of(row)
        if stream is not None and _placed_on(run.cluster, stream, row) != row["to"]:
            partition_move(actor=actor, stream=stream, topic=row["topic"],
                           partition=row["partition"], to=row["to"], defer_cleanup=True,
                           bulk=bulk)
        moved += row["bytes"]  # a dropped topic's bytes count as done: nothing left to move
        Rebalance.objects.filter(pk=run.pk).update(moves_done=F("moves_done") + 1,
                                                   bytes_done=F("bytes_done") + row["bytes"])
        if run.throttle:  # at most `throttle` bytes a second, over the run
            time.sleep(max(0.0, moved / run.throttle - (time.monotonic() - started)))
    # The sources' copies, once readers with a cached placement have moved over: one wait
    # for the run (a redelivered run cleans up what its dead worker's moves left, too).
    time.sleep(partitionmove.CLEANUP_GRACE)
    for row in run.plan:
        stream = _stream_of(row)
        if stream is not None:
            clean_up_moved(stream, row["topic"], row["partition"])


def _stream_of(row: dict[str, Any]) -> Stream | None:
    return Stream.objects.select_related("cluster").filter(uuid=row["stream"]).first()


def _placed_on(cluster: Cluster, stream: Stream, row: dict[str, Any]) -> str | None:
    view = placement.refresh(cluster.name, placement.view_of(cluster.name), force=True)
    return view.group_of(stream.uuid, row["topic"], row["partition"]) if view else None
