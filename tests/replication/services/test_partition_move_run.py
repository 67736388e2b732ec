"""A single partition move as a run with progress (issue 33): `stream topic partition move`
queues a Rebalance run of kind move, which the worker task runs as it runs rebalances; the
run's percent follows the copy's chunks (strictly between 0 and 100 while a throttled move
copies), a worker that dies at any stage leaves the partition in one group and its
redelivered task completes the move, and what the move would refuse is refused at once,
queuing nothing (DESIGN.md invariant 12)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from django.db import connection

from operations.models import AuditEvent
from replication import placement
from replication.engine import partitionmove as moving
from replication.engine.store import Record
from replication.errors import Conflict, InvalidInput
from replication.models import Rebalance
from replication.services.messages import messages_produce
from replication.services.partitionmove import partition_move_plan
from replication.services.rebalance import (
    move_result,
    partition_move_start,
    rebalance_run,
    rebalance_start,
)
from tests.replication.services import test_partition_move as moves
from tests.replication.services.test_partition_move import (
    ROOT,
    holds,
    other,
    produce,
    rows_in,
    values_at_0,
    where,
)
from tests.replication.services.test_storegroups import held
from workers.tasks import recover_moves_task

pytestmark = pytest.mark.django_db(transaction=True)

_fresh_views = moves._fresh_views
two = moves.two
CHUNK = 20  # offsets a chunk of the copy: 20 chunks for the 400 messages below


def fill(owner, activity) -> list[bytes]:  # type: ignore[no-untyped-def]
    """Partition 0 of clicks: 400 messages of 200 bytes, 40 batches of 10."""
    values = [b"%03d:" % i + b"x" * 196 for i in range(400)]
    for at in range(0, 400, 10):
        messages_produce(actor=owner, stream=activity, topic="clicks",
                         records=[Record(v, partition=0) for v in values[at:at + 10]])
    return values


def watch(run_id: int, timeout: float = 120) -> list[tuple[str, int]]:
    """(state, percent) of the run, looked at every 20 ms until it ends."""
    seen: list[tuple[str, int]] = []
    deadline = time.monotonic() + timeout
    while not seen or seen[-1][0] in Rebalance.ACTIVE:
        assert time.monotonic() < deadline, f"the run did not end: {seen[-5:]}"
        run = Rebalance.objects.get(pk=run_id)
        seen.append((run.state, run.percent))
        time.sleep(0.02)
    return seen


def test_a_throttled_move_shows_its_copy_progress_between_0_and_100(
        operator, owner, activity, two, settings, monkeypatch):
    settings.CELERY_TASK_ALWAYS_EAGER = True  # the run: a thread, as on `make run`
    monkeypatch.setattr(moving, "CHUNK_OFFSETS", CHUNK)
    values = fill(owner, activity)
    source = where(activity)
    target = other(two, source)

    size = partition_move_plan(actor=operator, stream=activity, topic="clicks", partition=0,
                               to=target)["bytes"]
    assert size > 400 * 200

    started = partition_move_start(actor=operator, stream=activity, topic="clicks",
                                   partition=0, to=target, throttle=size // 3)
    run = Rebalance.objects.get(pk=started["id"])
    assert (started["kind"], started["state"], started["percent"], started["movesTotal"]) == (
        "move", "QUEUED", 0, 1)
    assert started["moves"] == [{"path": activity.path, "stream": str(activity.uuid),
                                 "topic": "clicks", "partition": 0, "from": source,
                                 "to": target, "bytes": size}]
    seen = watch(run.pk)

    percents = [p for _, p in seen]
    assert percents == sorted(percents)
    assert len({p for state, p in seen if state == "RUNNING" and 0 < p < 99}) >= 3, seen
    assert all(p < 100 for p in percents[:-1])  # 100 once it succeeded
    run.refresh_from_db()
    assert (run.state, run.error, run.percent, run.moves_done) == ("SUCCEEDED", "", 100, 1)
    assert (run.finished - run.started).total_seconds() >= 2.5  # size / (size // 3) s
    result = move_result(run)
    assert {k: result[k] for k in ("partition", "from", "to", "messagesCopied", "id")} == {
        "partition": 0, "from": source, "to": target, "messagesCopied": 400, "id": run.pk}
    assert result["seconds"] >= 2.5
    assert where(activity) == target and values_at_0(owner, activity) == values
    assert held(two[target], activity)[("clicks", 0)] == 400
    assert rows_in(two[source], activity) == 0
    assert AuditEvent.objects.filter(object_type="rebalance", action="create").count() == 1
    assert AuditEvent.objects.filter(object_type="stream", action="move").count() == 1


def test_what_a_move_would_refuse_is_refused_at_once_queuing_nothing(operator, owner, activity,
                                                                     two, settings):
    settings.CELERY_TASK_ALWAYS_EAGER = True
    produce(owner, activity, [b"x"] * 3)
    source = where(activity)
    target = other(two, source)
    cases = [*moves.refusals(owner, source, target),
             (dict(to=target, throttle=0), InvalidInput, "-throttle 0 is not a rate")]
    for given, error, text in cases:
        args = dict(actor=operator, stream=activity, topic="clicks", partition=0) | given
        with pytest.raises(error, match=text):
            partition_move_start(**args)
    assert not Rebalance.objects.exists()

    # A move queued (no worker has it yet): the same partition again, and a rebalance, wait.
    plan = partition_move_plan(actor=operator, stream=activity, topic="clicks", partition=0,
                               to=target)
    queued = Rebalance.objects.create(cluster=activity.cluster, kind=Rebalance.Kind.MOVE,
                                      requested_by=operator, plan=[plan])
    with pytest.raises(Conflict, match=rf"being moved already by move #{queued.pk}, QUEUED"):
        partition_move_start(actor=operator, stream=activity, topic="clicks", partition=0,
                             to=target)
    with pytest.raises(Conflict, match=rf"move #{queued.pk} of cluster .* is QUEUED: wait"):
        rebalance_start(actor=operator, cluster=activity.cluster.name)
    # Another partition's move goes on beside it.
    other_move = partition_move_start(actor=operator, stream=activity, topic="clicks",
                                      partition=1, to=other(two, moves_group(activity, 1)))
    assert watch(other_move["id"])[-1] == ("SUCCEEDED", 100)
    assert where(activity) == source
    assert held(two[source], activity)[("clicks", 0)] == 3
    Rebalance.objects.filter(pk=queued.pk).update(state=Rebalance.State.FAILED)
    Rebalance.objects.create(cluster=activity.cluster, kind=Rebalance.Kind.REBALANCE,
                             requested_by=operator, plan=[{"x": 1}])
    with pytest.raises(Conflict, match=r"rebalance #\d+ of cluster .* is QUEUED: wait"):
        partition_move_start(actor=operator, stream=activity, topic="clicks", partition=0,
                             to=target)


def moves_group(activity, partition: int) -> str:  # type: ignore[no-untyped-def]
    return activity.placements.get(topic="clicks", partition=partition).group.name


CRASHER = """
import os, sys
import django
django.setup()
from replication.engine import partitionmove as moving
from replication.services import rebalance
run, stage, chunk = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
moving.CHUNK_OFFSETS = chunk
real = rebalance.partition_move

def crashing(**kwargs):
    report = kwargs.pop("progress")

    def progress(done, total):
        report(done, total)
        if stage == "copying" and done * 2 >= total:
            os._exit(17)

    def pause(at):
        if at == stage:
            os._exit(17)

    return real(**kwargs, progress=progress, pause=pause)

rebalance.partition_move = crashing  # the worker dies at `stage` of the run's move
rebalance.rebalance_run(rebalance_id=run)
"""


def crash_run(run: Rebalance, stage: str) -> None:
    params = connection.settings_dict
    env = dict(os.environ, DATABASE_URL=(
        f"postgres://{params['USER']}@{params['HOST'] or '127.0.0.1'}:{params['PORT'] or 5432}"
        f"/{params['NAME']}"), PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", CRASHER, str(run.pk), stage, str(CHUNK)],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 17, done.stderr[-3000:]


@pytest.mark.parametrize("stage", ["copying", "cut", "switched"])
def test_a_move_whose_worker_died_leaves_one_group_and_its_redelivery_completes_it(
        operator, owner, activity, two, settings, stage):
    settings.CELERY_TASK_ALWAYS_EAGER = False  # no worker: the task runs in a process below
    values = fill(owner, activity)
    source = where(activity)
    target = other(two, source)
    plan = partition_move_plan(actor=operator, stream=activity, topic="clicks", partition=0,
                               to=target)
    run = Rebalance.objects.create(cluster=activity.cluster, kind=Rebalance.Kind.MOVE,
                                   requested_by=operator, plan=[plan],
                                   bytes_total=plan["bytes"])
    crash_run(run, stage)

    run.refresh_from_db()
    assert (run.state, run.moves_done) == ("RUNNING", 0)
    if stage == "copying":
        assert 0 < run.percent < 100
    placement.forget()
    placed = where(activity)
    assert placed == (target if stage == "switched" else source)
    assert [n for n, url in two.items() if holds(url, activity)] == (
        [source] if stage == "copying" else [])
    assert values_at_0(owner, activity) == values
    if stage == "cut":  # held nowhere: beat's sweep gives it back where it was
        assert recover_moves_task() == 1
    produce(owner, activity, [b"meanwhile"])
    assert where(activity) == placed
    assert [n for n, url in two.items() if holds(url, activity)] == [placed]

    assert rebalance_run(rebalance_id=run.pk) == Rebalance.State.SUCCEEDED  # redelivered
    run.refresh_from_db()
    assert (run.percent, run.moves_done, run.error) == (100, 1, "")
    assert move_result(run)["to"] == target
    assert where(activity) == target
    assert values_at_0(owner, activity) == [*values, b"meanwhile"]
    assert held(two[target], activity)[("clicks", 0)] == 401
    assert ("clicks", 0) not in held(two[source], activity)
    assert rows_in(two[source], activity) == 0
