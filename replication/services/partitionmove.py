"""Moving a partition online between a cluster's store groups (issue 33):
`stream topic partition move -path P -topic T -partition N -to s2`.

The move copies the partition's history from the group holding it (the source) to the target
group's store while producers go on, then cuts over under the source row's lock
(engine/partitionmove.py), and switches the placement. All store work happens before any
control-plane row is locked, and no control-plane lock waits on a store (invariant 14).

Crash safety (invariant 12: never both, never neither). The placement row in the control
database is the commit point: whatever group it names holds the partition, and the stores'
held flags follow it (the fence refuses writes elsewhere; a router repairs flags from the
placement, fence.set_held). The steps and what a crash after each leaves:

1. `prepare`: the target row (not held, so written by nothing else) is emptied of whatever an
   earlier attempt left. Crash: nothing changed that anyone reads.
2. Bulk copy in chunks, no lock. Crash: a partial copy in a not-held row of the target; the
   placement still names the source, which still holds the partition. A retried move starts
   over (step 1 wipes the copy). A cut-back of the source meanwhile (store truncate: a
   failback's, diffstreams' repair) is noted there by a trigger, and step 3 drops what the
   target copied from its offset on and copies it again.
3. Cut-over, one source transaction: the source row locked (FOR UPDATE: every write of the
   partition updates it, so writers wait), the tail and every per-partition table copied to
   the target and its counters set there (committed, still not held), then the source row
   marked moved out (table `moved_out`) and not held, committed. A crash before that commit
   rolls the source back (still held, still placed): as after step 2. After it, the partition
   is placed on the source but held nowhere, and the marker keeps routers' repairs from
   holding it again: writers get NOT_HELD (retriable) and reads still go to the source,
   which has every message. A retried move removes the marker (the source holds it again:
   the placement never moved) and starts over.
4. The commit point: the Placement row names the target and `placement_version` is bumped,
   in one short control-plane transaction. From then on the target is where it lives: the
   first writer that meets NOT_HELD reloads the placement and the router marks the target
   held (placement.hold), as this process does at once.
5. After a grace of a placement refresh (readers with a cached placement move over), the
   source's copy is deleted and its marker removed. A crash before that, or a source
   unreachable then (the move still reports itself done: it is), leaves rows nobody reads or
   writes (not held, not placed); beat's sweep (`moves_recover`) deletes them, and a retried
   move of the partition to the group it is now on finishes that clean-up and reports the
   move. The clean-up records the placement version it saw in the source (table
   `moved_away`): a repair from a view older than that (a process stalled past the grace)
   never holds the partition there again.

Consumer cursors are fenced too (engine/partitionmove.py's CURSOR_FENCE, installed on every
group's store by the first move): a commit sent to the source by a process with a stale
placement is refused as NOT_HELD and the router sends it to the target.

A partition of STREAMGATE_MOVE_SPARK_BYTES or more, moved by a caller that hands in a `bulk`
copier (the worker's rebalance task: workers/moves.py), has step 2's first pass copied by a
Spark job, a task per offset range, each idempotent by its range (a retried task deletes
what its earlier attempt left in the target's not-held row first): the crash argument of
step 2 is unchanged, a died job leaving a partial copy the retry wipes.

A move as a run with progress. The interfaces do not move in the request: they check the
move with `partition_move_plan` (partition_move's refusals, answered at once) and queue a
Rebalance run of kind move, a plan of this one move (services/rebalance.py
partition_move_start), which the worker's task (acks late) runs through partition_move as it
runs a rebalance's moves; the request waits for the run unless told not to. A worker that
dies at any step leaves what the list above says, and its redelivered task is the retried
move: step 1 wipes a partial copy, step 3's marker is taken off (or beat's recover-moves
sweep gave the partition back meanwhile), and a move switched before the crash counts as
done, its source's copy deleted at the run's end. Step 2 reports each chunk it copied (and
a Spark first pass its finished tasks) to `progress`, which the run turns into the row's
bytes and percent and where `-throttle` waits: between chunks, holding no control-plane lock
and no transaction, only the partition's move lock on the source store (invariant 14).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import psycopg
import structlog
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from replication import placement
from replication.engine import partitionmove as moving
from replication.engine.store import StoreError
from replication.errors import Conflict, InvalidInput, NotFound
from replication.models import Cluster, Placement, StoreGroup, Stream, Topic
from replication.services.clusters import _operator_only
from replication.services.storegroups import LIST_HINT, groups_of
from replication.signals import partition_moved

# Readers with a cached placement look again within REFRESH_SECONDS: only then is the
# source's copy deleted.
CLEANUP_GRACE = placement.REFRESH_SECONDS + 0.5
log = structlog.get_logger(__name__)
Pause = Callable[[str], None]
# (source URL, target URL, data table, offset column, source pid, target pid, start, end):
# copies the partition's offsets [start, end) into the target's not-held row, idempotent by
# range (workers/moves.py: a Spark job), and reports (done, total) offsets to its keyword
# `progress` when given one. The domain cannot start Spark (the layers), so the interface
# that runs the move hands it in.
BulkCopy = Callable[..., None]


def partition_move(*, actor: AbstractBaseUser, stream: Stream, topic: str, partition: int,
                   to: str, pause: Pause | None = None, defer_cleanup: bool = False,
                   bulk: BulkCopy | None = None, progress: moving.Progress | None = None
                   ) -> dict:
    """Move the partition to group `to`; the result row {partition, from, to, messagesCopied,
    seconds}. `pause(stage)` is called after "copied", "cut" and "switched" (tests crash the
    process there). `defer_cleanup`: return at once after the switch, leaving the source's
    copy for `clean_up_moved` (a rebalance waits one refresh for all its moves, not each).
    `progress(done, total)`: the bulk copy's offsets, after each chunk (a run's progress)."""
    view, source_name, target_group = _checked(actor, stream, topic, partition, to)
    source = view.stores[source_name]
    pid = moving.pid_of(source, stream.uuid, topic, partition)
    # One move of a partition at a time: a lock of the group holding it, on a connection of
    # its own (a crash lets go), never a control-plane lock (invariant 14).
    with moving.move_lock(view.urls[source_name], pid) as locked:
        view = placement.refresh(stream.cluster.name, view, force=True) or view
        if not locked or (view.group_of(stream.uuid, topic, partition) or view.home) \
                != source_name:
            raise _being_moved(stream, topic, partition)
        row = _locked_move(view, stream, topic, partition, source_name, target_group,
                           _Steps(pause, defer_cleanup, bulk, progress))
    partition_moved.send(sender=Stream, stream=stream, actor=actor,
                         details={"topic": topic, **row})
    return row


def partition_move_plan(*, actor: AbstractBaseUser, stream: Stream, topic: str,
                        partition: int, to: str) -> dict:
    """What a move would do, checked as partition_move checks it, moving nothing: the plan
    row {path, stream, topic, partition, from, to, bytes} of a run of kind move (the
    interfaces queue one: services/rebalance.py partition_move_start). Refused with the same
    errors as partition_move, so they reach the caller at once, not in a run."""
    view, source_name, target_group = _checked(actor, stream, topic, partition, to)
    source = view.stores[source_name]
    pid = moving.pid_of(source, stream.uuid, topic, partition)
    with moving.move_lock(view.urls[source_name], pid) as alone:
        if not alone:
            raise _being_moved(stream, topic, partition)
    if source_name == to and not _left_over(view, stream, topic, partition, source_name):
        raise _already_on(stream, topic, partition, to)
    try:
        moving.check_pair(source, view.stores[to])
    except StoreError as err:
        raise Conflict(str(err), field="to") from err
    return {"path": stream.path, "stream": str(stream.uuid), "topic": topic,
            "partition": partition, "from": source_name, "to": target_group.name,
            "bytes": moving.size(source, pid)}


def _checked(actor: AbstractBaseUser, stream: Stream, topic: str, partition: int,
             to: str) -> tuple[placement.View, str, StoreGroup]:
    """The cluster's groups (a row of the partition in each), the group holding it and the
    target, or the refusal naming the fix."""
    _operator_only(actor, "move partitions")
    cluster = stream.cluster
    target_group = _target(stream, topic, partition, to)
    view = placement.refresh(cluster.name, placement.view_of(cluster.name), force=True)
    if view is None:
        raise Conflict(f"cluster {cluster.name} has one store group: add another with "
                       "cluster store add before moving partitions", hint=LIST_HINT)
    count = Topic.objects.get(stream=stream, name=topic).partitions
    view = placement.place(view, stream.uuid, topic, range(count))  # rows in every group
    for store in view.stores.values():
        try:
            moving.check_store(store)
        except StoreError as err:
            raise Conflict(str(err)) from err
        moving.ensure_marker_table(store)
    return view, view.group_of(stream.uuid, topic, partition) or view.home, target_group


def _being_moved(stream: Stream, topic: str, partition: int) -> Conflict:
    return Conflict(f"partition {partition} of {stream.path}:{topic} is being moved already: "
                    "wait for that move to finish, then see where it is with cluster store "
                    "list", hint=LIST_HINT)


def _already_on(stream: Stream, topic: str, partition: int, to: str) -> Conflict:
    return Conflict(f"partition {partition} of {stream.path}:{topic} is already on store group "
                    f"{to}: give another group with -to", field="to", hint=LIST_HINT)


def _left_over(view: placement.View, stream: Stream, topic: str, partition: int,
               placed: str) -> bool:
    """Whether a finished move of the partition left its copy in another group (a move to
    where it is now finishes that clean-up)."""
    return any(moving.moved_out(store, moving.pid_of(store, stream.uuid, topic, partition))
               is not None for name, store in view.stores.items() if name != placed)


@dataclass(frozen=True)
class _Steps:
    """How partition_move's caller wants the steps run (see partition_move)."""

    pause: Pause | None
    defer_cleanup: bool
    bulk: BulkCopy | None
    progress: moving.Progress | None


def _locked_move(view: placement.View, stream: Stream, topic: str, partition: int,
                 source_name: str, target_group: StoreGroup, steps: _Steps) -> dict:
    to = target_group.name
    finished = _recover(view, stream, topic, partition, source_name)
    if source_name == to:
        if finished is not None:  # a move interrupted after its commit point: now complete
            return _row(partition, finished, to, 0, 0.0)
        raise _already_on(stream, topic, partition, to)
    started = time.monotonic()
    copied = _move(view, stream, topic, partition, source_name, target_group, steps)
    return _row(partition, source_name, to, copied, time.monotonic() - started)


def _row(partition: int, source: str, to: str, copied: int, seconds: float) -> dict:
    return {"partition": partition, "from": source, "to": to, "messagesCopied": copied,
            "seconds": round(seconds, 3)}


def _target(stream: Stream, topic: str, partition: int, to: str) -> StoreGroup:
    if not Topic.objects.filter(stream=stream, name=topic).exists():
        raise NotFound(f"stream {stream.path} has no topic {topic!r}: see stream topic list",
                       field="topic")
    count = Topic.objects.get(stream=stream, name=topic).partitions
    if not 0 <= partition < count:
        raise InvalidInput(f"partition {partition} does not exist: topic {topic} has "
                           f"partitions 0..{count - 1}", field="partition")
    group = next((g for g in groups_of(stream.cluster) if g.name == to), None)
    if group is None:
        raise NotFound(f"cluster {stream.cluster.name} has no store group {to!r}: give one of "
                       "its groups with -to", field="to", hint=LIST_HINT)
    if group.state != StoreGroup.State.ACTIVE:
        raise Conflict(f"store group {to} of cluster {stream.cluster.name} is {group.state} "
                       "and takes no partitions: move to an active group", field="to",
                       hint=LIST_HINT)
    return group


def _recover(view: placement.View, stream: Stream, topic: str, partition: int,
             placed: str) -> str | None:
    """Finish or undo what an interrupted move left (see the module docstring); the group a
    finished move came from, when its clean-up was pending."""
    finished = None
    for name, store in view.stores.items():
        pid = moving.pid_of(store, stream.uuid, topic, partition)
        if moving.moved_out(store, pid) is None:
            continue
        if name == placed:  # cut over, never switched: the source takes it back
            moving.unmark(store, pid)
            placement.hold(view, stream.uuid, topic)
        else:  # switched, not cleaned up
            moving.clean_up(store, pid, view.version)
            finished = name
    return finished


def _move(view: placement.View, stream: Stream, topic: str, partition: int, source_name: str,
          target_group: StoreGroup, steps: _Steps) -> int:
    source, target = view.stores[source_name], view.stores[target_group.name]
    try:
        moving.check_pair(source, target)
    except StoreError as err:
        raise Conflict(str(err), field="to") from err
    key = (stream.uuid, topic, partition)
    spid, tpid = moving.pid_of(source, *key), moving.pid_of(target, *key)
    if moving.is_held(target, tpid):
        raise Conflict(f"store group {target_group.name} holds partition {partition} of "
                       f"{topic} though the placement says {source_name}: a router repairs "
                       "this on the partition's next write; try the move again")
    moving.prepare(target, tpid)
    moving.watch_cut_backs(source, spid)
    compaction = moving.compaction_mark(source, spid)
    copied_to = moving.copy_history(source, target, spid, tpid, bulk=_bulk(
        steps, view, source_name, target_group.name, spid, tpid), progress=steps.progress)
    _pause(steps.pause, "copied")
    messages = moving.cut_over(source, target, spid, tpid, copied_to=copied_to,
                               compaction=compaction, target_name=target_group.name)
    _pause(steps.pause, "cut")
    _switch(stream, topic, partition, target_group)
    _pause(steps.pause, "switched")
    try:
        view = placement.refresh(stream.cluster.name, None, force=True) or view
        placement.hold(view, stream.uuid, topic)
        if not steps.defer_cleanup:
            time.sleep(CLEANUP_GRACE)
            moving.clean_up(source, spid, view.version)
    except (StoreError, psycopg.Error) as err:
        _after_switch_failed(stream, topic, partition, source_name, err)
    return messages


def _after_switch_failed(stream: Stream, topic: str, partition: int, source: str,
                         err: Exception) -> None:
    """Past the commit point the move is done whatever fails: a group unreachable for the
    hold is repaired by the first writer that meets NOT_HELD, and the source's copy by beat's
    sweep (`moves_recover`)."""
    log.warning("partition_move_finish_deferred", stream=stream.path, topic=topic,
                partition=partition, source=source, error=f"{type(err).__name__}: {err}")


def _bulk(steps: _Steps, view: placement.View, source_name: str, target_name: str,
          spid: int, tpid: int) -> Callable[[int, int], None] | None:
    """The first pass's copier when the partition is large enough for it (None: the pipe)."""
    source, bulk = view.stores[source_name], steps.bulk
    if bulk is None or moving.size(source, spid) < settings.MOVE_SPARK_BYTES:
        return None
    table = source.DATA_TABLE  # type: ignore[attr-defined]
    args = (view.urls[source_name], view.urls[target_name], table, moving.key_column(source),
            spid, tpid)
    if steps.progress is None:
        return lambda start, end: bulk(*args, start, end)
    # The first pass starts at the partition's low offset: the copier's (done, total) of its
    # range are the move's.
    return lambda start, end: bulk(*args, start, end, progress=steps.progress)


def clean_up_moved(stream: Stream, topic: str, partition: int) -> bool:
    """Delete what finished moves of the partition left in the groups it left (none while a
    move of it runs); call it a placement refresh (CLEANUP_GRACE) after the move. Whether
    anything was left."""
    view = placement.refresh(stream.cluster.name, None, force=True)
    if view is None or not Topic.objects.filter(stream=stream, name=topic).exists():
        return False  # a dropped topic's rows went with it
    placed = view.group_of(stream.uuid, topic, partition) or view.home
    found = False
    for name, store in view.stores.items():
        if name == placed:
            continue
        try:
            pid = moving.pid_of(store, stream.uuid, topic, partition)
            found = _clean_up_alone(view, name, pid) or found
        except (StoreError, psycopg.Error) as err:
            _after_switch_failed(stream, topic, partition, name, err)
    return found


def _clean_up_alone(view: placement.View, name: str, pid: int) -> bool:
    """Delete the copy a switched move left in group `name`, unless a move of it runs."""
    store = view.stores[name]
    if moving.moved_out(store, pid) is None:
        return False
    with moving.move_lock(view.urls[name], pid) as alone:
        if alone and moving.moved_out(store, pid) is not None:
            moving.clean_up(store, pid, view.version)
            return True
    return False


def _switch(stream: Stream, topic: str, partition: int, group: StoreGroup) -> None:
    """The commit point: the placement names the target (invariant 12)."""
    with transaction.atomic():
        Placement.objects.update_or_create(stream=stream, topic=topic, partition=partition,
                                           defaults={"group": group})
        placement.bump(stream.cluster.name)
    placement.forget(stream.cluster.name)


def _pause(pause: Pause | None, stage: str) -> None:
    if pause is not None:
        pause(stage)


def moves_recover(cluster: Cluster) -> int:
    """Celery beat's sweep of what dead or cut-short moves left: give back to their source
    the partitions whose move died between its cut-over and its switch (step 3 of the
    docstring: placed there, held nowhere, so taking no writes until the move ran again), and
    delete the copies switched moves left at their source (step 5: the move's process died,
    or its source was unreachable then), a placement refresh after they were found. A
    partition whose move is running (its lock taken) is left alone. How many were given back
    or cleaned up."""
    view = placement.view_of(cluster.name)  # its groups; each partition is read afresh below
    if view is None:
        return 0
    done, switched = 0, []
    for name, store in view.stores.items():
        try:
            marks = moving.marked(store)
        except (StoreError, psycopg.Error) as err:  # the group down: the next sweep's
            log.warning("moves_recover_group_unreachable", cluster=cluster.name, group=name,
                        error=f"{type(err).__name__}: {err}")
            continue
        for pid, stream, topic, partition in marks:
            with moving.move_lock(view.urls[name], pid) as alone:
                if not alone or moving.moved_out(store, pid) is None:
                    continue  # its move runs, or another sweep gave it back meanwhile
                view = placement.refresh(cluster.name, view, force=True) or view
                if (view.group_of(stream, topic, partition) or view.home) != name:
                    switched.append((name, pid))
                    continue
                moving.unmark(store, pid)
                placement.hold(view, stream, topic)
                done += 1
    if switched:
        time.sleep(CLEANUP_GRACE)  # readers with a view from before the switch move over
        done += sum(_clean_up_alone(view, name, pid) for name, pid in switched)
    return done
