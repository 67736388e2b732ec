"""A rebalance, and a single partition move, run by a real Celery worker process (issue 33):
the request commits the Rebalance row, the workers app enqueues it, the worker moves the
partitions and records its progress; every message stays readable."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from replication import placement
from replication.engine.store import Record
from replication.models import Placement, Rebalance
from replication.rebalance import balanced
from replication.services import topic_create
from replication.services.messages import messages_consume, messages_produce
from replication.services.partitionmove import partition_move_plan
from replication.services.rebalance import (
    move_result,
    partition_move_start,
    rebalance_start,
    rebalances_stale,
)
from replication.services.storegroups import store_group_add, store_group_rows
from tests.replication.services.test_storegroups import group_url, grow
from tests.workers.conftest import wait_until
from workers.tasks import resume_jobs_task


def test_a_celery_worker_runs_the_rebalance(celery_worker, operator, owner, activity):
    placement.forget()
    grow(operator, activity.cluster)
    topic_create(actor=owner, stream=activity, name="clicks", partitions=4)
    messages_produce(actor=owner, stream=activity, topic="clicks", records=[
        Record(b"%d" % i, partition=p) for p in range(4) for i in range(50)])
    store_group_add(actor=operator, cluster=activity.cluster.name, name="s2",
                    url=group_url(activity.cluster, "s2"))
    started = rebalance_start(actor=operator, cluster=activity.cluster.name)
    wait_until(lambda: Rebalance.objects.get(pk=started["id"]).state
               not in Rebalance.ACTIVE, timeout=120)
    run = Rebalance.objects.get(pk=started["id"])
    assert (run.state, run.error, run.moves_done) == ("SUCCEEDED", "", 2)
    assert Placement.objects.filter(stream=activity, group__name="s2").count() == 2
    assert balanced({r["name"]: r["bytes"] for r in store_group_rows(activity.cluster)})
    placement.forget()
    for p in range(4):
        got = messages_consume(actor=owner, stream=activity, topic="clicks", partition=p,
                               limit=100)
        assert [m.value for m in got] == [b"%d" % i for i in range(50)]


def test_a_celery_worker_runs_a_single_move_queued_by_the_request(celery_worker, operator,
                                                                   owner, activity):
    placement.forget()
    grow(operator, activity.cluster)
    topic_create(actor=owner, stream=activity, name="clicks", partitions=1)
    messages_produce(actor=owner, stream=activity, topic="clicks",
                     records=[Record(b"%d" % i, partition=0) for i in range(50)])
    store_group_add(actor=operator, cluster=activity.cluster.name, name="s2",
                    url=group_url(activity.cluster, "s2"))
    started = partition_move_start(actor=operator, stream=activity, topic="clicks", partition=0,
                                   to="s2")
    assert (started["kind"], started["state"]) == ("move", "QUEUED")
    wait_until(lambda: Rebalance.objects.get(pk=started["id"]).state
               not in Rebalance.ACTIVE, timeout=120)
    run = Rebalance.objects.get(pk=started["id"])
    assert (run.state, run.error, run.percent) == ("SUCCEEDED", "", 100)
    assert move_result(run)["messagesCopied"] == 50
    assert Placement.objects.get(stream=activity, topic="clicks", partition=0).group.name == "s2"
    placement.forget()
    got = messages_consume(actor=owner, stream=activity, topic="clicks", partition=0, limit=100)
    assert [m.value for m in got] == [b"%d" % i for i in range(50)]


def test_beat_queues_a_run_whose_worker_was_lost_and_a_worker_finishes_it(
        celery_worker, operator, owner, activity):
    """A move run left RUNNING by a worker that died with its task never delivered again (a
    Redis restarted empty), and one QUEUED whose task was lost: beat's resume sweep queues
    both again after their quiet time, and a real worker moves each partition. A run that
    reported recently is left to its worker."""
    placement.forget()
    grow(operator, activity.cluster)
    topic_create(actor=owner, stream=activity, name="clicks", partitions=3)
    messages_produce(actor=owner, stream=activity, topic="clicks", records=[
        Record(b"%d" % i, partition=p) for p in range(3) for i in range(20)])
    store_group_add(actor=operator, cluster=activity.cluster.name, name="s2",
                    url=group_url(activity.cluster, "s2"))

    def run(partition: int, state: str, quiet: float) -> Rebalance:
        plan = partition_move_plan(actor=operator, stream=activity, topic="clicks",
                                   partition=partition, to="s2")
        made = Rebalance.objects.create(cluster=activity.cluster, kind=Rebalance.Kind.MOVE,
                                        plan=[plan], bytes_total=plan["bytes"], state=state,
                                        requested_by=operator)  # no task queued: it was lost
        Rebalance.objects.filter(pk=made.pk).update(
            updated=timezone.now() - timedelta(seconds=quiet))
        return made

    died = run(0, Rebalance.State.RUNNING, settings.JOB_STALE_SECONDS + 5)
    lost = run(1, Rebalance.State.QUEUED, settings.JOB_QUEUED_SECONDS + 5)
    working = run(2, Rebalance.State.RUNNING, 1)
    assert sorted(rebalances_stale()) == sorted([died.pk, lost.pk])
    assert resume_jobs_task() == 2
    for queued in (died, lost):
        wait_until(lambda r=queued: Rebalance.objects.get(pk=r.pk).state
                   not in Rebalance.ACTIVE, timeout=120)
        assert Rebalance.objects.get(pk=queued.pk).state == "SUCCEEDED"
    assert Rebalance.objects.get(pk=working.pk).state == "RUNNING"  # its worker's still
    placed = dict(Placement.objects.filter(stream=activity, topic="clicks").values_list(
        "partition", "group__name"))
    assert (placed[0], placed[1]) == ("s2", "s2") and placed.get(2, "s1") == "s1"
    placement.forget()
    for p in range(3):
        got = messages_consume(actor=owner, stream=activity, topic="clicks", partition=p,
                               limit=100)
        assert [m.value for m in got] == [b"%d" % i for i in range(20)]
