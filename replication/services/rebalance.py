"""Rebalancing a cluster's store groups and draining one (issue 33): `cluster store rebalance`
and `cluster store drain`, each a plan of partition moves (replication/rebalance.py) shown
first with `-dryrun true`, then run in the background one move after the other
(services/partitionmove.py) with its progress kept on a Rebalance row, which the CLI
(`cluster store rebalancestatus`), the API and the admin site show. Creating the row is
audited (operations/audit.py), and so is each move's switch of its placement. A single
`stream topic partition move` is such a run too, of kind move with a plan of one move
(partition_move_start), so it has the same progress, worker task and redelivery.

Progress: bytes_done counts the moves done and, within the move running, each chunk of its
copy (_Pace; a move's last 1% is its cut-over and switch). `-throttle` paces the copy
between chunks, over the run.

A run is safe to run twice (a redelivered task): it goes on from the first move not done, and
a partition already where the plan sends it counts as moved. One rebalance or drain at a time
per cluster, and none beside a move; moves of different partitions run side by side.
"""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from replication import placement
from replication.engine import fence
from replication.engine.partitionmove import Progress
from replication.errors import Conflict, InvalidInput, NotFound
from replication.models import Cluster, Rebalance, StoreGroup, Stream
from replication.rebalance import Move, Part, plan_drain, plan_rebalance
from replication.services import partitionmove
from replication.services.clusters import _operator_only, cluster_by_name
from replication.services.partitionmove import BulkCopy, clean_up_moved, partition_move
from replication.services.storegroups import LIST_HINT, group_named, groups_of
from replication.signals import rebalance_submitted
from replication.stores import group_store

STATUS_HINT = "see its progress with cluster store rebalancestatus"
WAIT_POLL = 0.25  # seconds between looks at a run a request waits for
QUEUE_PATIENCE = 60.0  # seconds a waiting request gives a worker to start the run


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


def _check_idle(cluster: Cluster, move: dict[str, Any] | None = None) -> None:
    """One rebalance or drain at a time, and none beside a move; moves of different
    partitions go on side by side (each partition's move takes its lock), one at a time a
    partition."""
    active = cluster.rebalances.filter(state__in=Rebalance.ACTIVE)
    running = (active if move is None else active.exclude(kind=Rebalance.Kind.MOVE)).first()
    if running is not None:
        raise Conflict(f"{running.kind} #{running.pk} of cluster {cluster.name} is "
                       f"{running.state}: wait for it to end ({STATUS_HINT})")
    same = None if move is None else active.filter(
        kind=Rebalance.Kind.MOVE, plan__0__stream=move["stream"], plan__0__topic=move["topic"],
        plan__0__partition=move["partition"]).first()
    if same is not None:
        raise Conflict(f"partition {move['partition']} of {move['path']}:{move['topic']} is "
                       f"being moved already by move #{same.pk}, {same.state}: wait for it to "
                       f"end ({STATUS_HINT} -cluster {cluster.name} -id {same.pk})")


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


def partition_move_start(*, actor: AbstractBaseUser, stream: Stream, topic: str,
                         partition: int, to: str, throttle: int | None = None
                         ) -> dict[str, Any]:
    """Queue the move of one partition to group `to` as a run of kind move (a plan of that
    one move), run in the background as rebalances are, with its progress on the row. What
    partition_move would refuse is refused here, at once."""
    row = partitionmove.partition_move_plan(actor=actor, stream=stream, topic=topic,
                                            partition=partition, to=to)
    _check_throttle(throttle)
    return _submit(actor, stream.cluster, Rebalance.Kind.MOVE, None, [row], False, throttle)


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
        _check_idle(cluster, plan[0] if kind == Rebalance.Kind.MOVE else None)
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
            "moves": run.plan, "result": move_result(run)}


def move_result(run: Rebalance) -> dict[str, Any] | None:
    """A finished move's row as partition_move answers it, with the run's id; None for other
    runs and before the end."""
    if run.kind != Rebalance.Kind.MOVE or run.state != Rebalance.State.SUCCEEDED:
        return None
    row = run.plan[0]
    return {"partition": row["partition"], "from": row["from"], "to": row["to"],
            "messagesCopied": row.get("messagesCopied", 0), "seconds": row.get("seconds", 0.0),
            "id": run.pk}


def rebalance_status(*, actor: AbstractBaseUser, cluster: str, id: int | None = None
                     ) -> list[dict[str, Any]]:
    """The cluster's runs, newest first (the last 20), or run `id` alone."""
    _operator_only(actor, "see store group rebalances")
    target = cluster_by_name(cluster, field="cluster")
    runs = target.rebalances.select_related("cluster", "group")
    if id is None:
        return [rebalance_row(r) for r in runs[:20]]
    run = runs.filter(pk=id).first()
    if run is None:
        raise NotFound(f"cluster {target.name} has no rebalance, drain or move #{id}: "
                       f"list them with cluster store rebalancestatus -cluster {target.name}",
                       field="id")
    return [rebalance_row(run)]


def rebalance_wait(*, actor: AbstractBaseUser, cluster: str, id: int,
                   poll: float = WAIT_POLL, patience: float | None = None
                   ) -> dict[str, Any]:
    """Run `id`'s row once it has ended (a request that waits for its move: no lock is held
    meanwhile, each look a query of its own). A run no worker has started within `patience`
    seconds is refused with how to follow it (it runs when a worker takes it)."""
    patience = QUEUE_PATIENCE if patience is None else patience
    deadline = time.monotonic() + patience
    while True:
        [row] = rebalance_status(actor=actor, cluster=cluster, id=id)
        if row["state"] not in Rebalance.ACTIVE:
            return row
        if row["state"] == Rebalance.State.QUEUED and time.monotonic() > deadline:
            raise Conflict(f"{row['kind']} #{id} of cluster {cluster} is still QUEUED after "
                           f"{patience:g} s: no worker has taken it yet, and it runs when one "
                           f"does ({STATUS_HINT} -cluster {cluster} -id {id})")
        time.sleep(poll)


def rebalance_run(*, rebalance_id: int, bulk: BulkCopy | None = None) -> str:
    """Run the moves not done yet; the run's final state. `bulk`: the copier of large
    partitions' histories (partitionmove.BulkCopy; the worker hands in Spark's)."""
    updated = Rebalance.objects.filter(pk=rebalance_id, state__in=Rebalance.ACTIVE).update(
        state=Rebalance.State.RUNNING, started=timezone.now(), updated=timezone.now())
    run = Rebalance.objects.select_related("cluster", "requested_by").filter(
        pk=rebalance_id).first()
    if run is None or not updated:
        return run.state if run is not None else "GONE"
    try:
        _run_moves(run, bulk)
    except Exception as err:  # any failure ends the run, recorded for the operator
        _record(run.pk, state=Rebalance.State.FAILED,
                error=f"{type(err).__name__}: {err}"[:2000], finished=timezone.now())
        return Rebalance.State.FAILED
    _record(run.pk, state=Rebalance.State.SUCCEEDED, finished=timezone.now())
    return Rebalance.State.SUCCEEDED


# A throttled run's waits report at least this often (JOB_STALE_SECONDS is 300 s).
ALIVE_SECONDS = 60.0


def _record(pk: int, **fields: Any) -> None:
    """A run's step or progress, with the time it was made (`rebalances_stale`)."""
    Rebalance.objects.filter(pk=pk).update(updated=timezone.now(), **fields)


def rebalances_stale() -> list[int]:
    """Active runs that stopped reporting, as `jobs_stale` finds jobs: their worker died and
    Celery did not deliver the task again, or the queued task was lost with the broker. A run
    taken up again goes on from its first move not done (`rebalance_run`)."""
    now = timezone.now()
    running = now - timezone.timedelta(seconds=settings.JOB_STALE_SECONDS)
    queued = now - timezone.timedelta(seconds=settings.JOB_QUEUED_SECONDS)
    stale = Rebalance.objects.filter(state__in=Rebalance.ACTIVE).filter(
        Q(updated__lt=running) | Q(state=Rebalance.State.QUEUED, updated__lt=queued))
    return list(stale.values_list("pk", flat=True))


def _run_moves(run: Rebalance, bulk: BulkCopy | None) -> None:
    actor = run.requested_by
    if actor is None or not actor.is_staff:
        raise Conflict("the operator who asked for this run is no longer one: ask again")
    pace = _Pace(run)
    for index in range(run.moves_done, len(run.plan)):
        row = run.plan[index]
        base = sum(r["bytes"] for r in run.plan[:index])
        stream = _stream_of(row)
        if stream is not None and _placed_on(run.cluster, stream, row) != row["to"]:
            result = partition_move(actor=actor, stream=stream, topic=row["topic"],
                                    partition=row["partition"], to=row["to"],
                                    defer_cleanup=True, bulk=bulk,
                                    progress=pace.during(base, row["bytes"]))
            row.update({k: result[k] for k in ("from", "messagesCopied", "seconds")})
        # A dropped topic's bytes count as done: nothing left to move.
        _record(run.pk, moves_done=index + 1, plan=run.plan,
                                                   bytes_done=base + row["bytes"])
        pace.moved(row["bytes"])
    # The sources' copies, once readers with a cached placement have moved over: one wait
    # for the run (a redelivered run cleans up what its dead worker's moves left, too).
    time.sleep(partitionmove.CLEANUP_GRACE)
    for row in run.plan:
        stream = _stream_of(row)
        if stream is not None:
            clean_up_moved(stream, row["topic"], row["partition"])


class _Pace:
    """A run's progress and throttle. Each chunk of a move's copy advances the row's
    bytes_done by its share of the partition's bytes (short of the whole: the move ends
    with its cut-over and switch), and waits while the run is ahead of `throttle` bytes a
    second. The waits come between chunks, when the move holds no lock but its own
    partition's (invariant 14)."""

    def __init__(self, run: Rebalance) -> None:
        self.run, self.started, self.done = run, time.monotonic(), 0

    def during(self, base: int, nbytes: int) -> Progress:
        def report(copied: int, total: int) -> None:
            part = min(nbytes * copied // total, nbytes * 99 // 100) if total > 0 else 0
            _record(self.run.pk, bytes_done=base + part)
            self.wait(self.done + part)

        return report

    def moved(self, nbytes: int) -> None:
        self.done += nbytes
        self.wait(self.done)

    def wait(self, moved: int) -> None:
        if not self.run.throttle:
            return
        # At most `throttle` bytes a second, over the run; a long wait reports now and then,
        # so the resume sweep does not take the run for one that lost its worker.
        until = self.started + moved / self.run.throttle
        while (left := until - time.monotonic()) > 0:
            time.sleep(min(left, ALIVE_SECONDS))
            _record(self.run.pk)


def _stream_of(row: dict[str, Any]) -> Stream | None:
    return Stream.objects.select_related("cluster").filter(uuid=row["stream"]).first()


def _placed_on(cluster: Cluster, stream: Stream, row: dict[str, Any]) -> str | None:
    view = placement.refresh(cluster.name, placement.view_of(cluster.name), force=True)
    return view.group_of(stream.uuid, row["topic"], row["partition"]) if view else None
