"""A rebalance, and a single partition move, run by a real Celery worker process (issue 33):
the request commits the Rebalance row, the workers app enqueues it, the worker moves the
partitions and records its progress; every message stays readable."""

from __future__ import annotations

from replication import placement
from replication.engine.store import Record
from replication.models import Placement, Rebalance
from replication.rebalance import balanced
from replication.services import topic_create
from replication.services.messages import messages_consume, messages_produce
from replication.services.rebalance import move_result, partition_move_start, rebalance_start
from replication.services.storegroups import store_group_add, store_group_rows
from tests.replication.services.test_storegroups import group_url, grow
from tests.workers.conftest import wait_until


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
