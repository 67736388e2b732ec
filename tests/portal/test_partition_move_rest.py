"""`stream topic partition move` through /rest (and so the CLI), issue 33: an operator moves
a partition and gets the result row (the request waits for the move's run), or with -wait
false the queued run's row, which `cluster store rebalancestatus -id` follows; a run that
fails answers its error in the maprcli shape; others are refused (an outsider sees no
stream), and a bad request names the fix, changing nothing and queuing nothing."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from django.db import connection

from replication import placement
from replication.engine.store import Record
from replication.models import Placement, Rebalance, StoreGroup
from replication.services import partitionmove, rebalance, topic_create
from replication.services.messages import messages_consume, messages_produce, topic_watermarks
from replication.services.rebalance import rebalance_run
from tests.portal.test_rest import call, error_of, ok
from tests.replication.services.test_storegroups import grow, held
from tests.workers.conftest import wait_until
from workers.celery import app

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def two(monkeypatch, settings, operator, owner, activity):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(partitionmove, "CLEANUP_GRACE", 0.2)
    settings.CELERY_TASK_ALWAYS_EAGER = True  # the move's run: a thread, as on `make run`
    placement.forget()
    urls = grow(operator, activity.cluster, "s2")
    topic_watermarks(topic_create(actor=owner, stream=activity, name="clicks", partitions=2))
    messages_produce(actor=owner, stream=activity, topic="clicks",
                     records=[Record(b"v%d" % i, partition=1) for i in range(7)])
    yield urls
    placement.forget()


def group_of(activity) -> str:  # type: ignore[no-untyped-def]
    return Placement.objects.get(stream=activity, topic="clicks", partition=1).group.name


def test_rest_moves_a_partition_and_returns_the_result_row(api, operator, owner, activity, two):
    source = group_of(activity)
    target = next(n for n in two if n != source)
    rows = ok(call(api(operator), "stream/topic/partition/move", path=activity.path,
                   topic="clicks", partition=1, to=target))
    assert len(rows) == 1
    row = rows[0]
    assert {k: row[k] for k in ("partition", "from", "to", "messagesCopied")} == {
        "partition": 1, "from": source, "to": target, "messagesCopied": 7}
    assert isinstance(row["seconds"], float)
    run = Rebalance.objects.get(pk=row["id"])
    assert (run.kind, run.state, run.percent, run.requested_by) == (
        "move", "SUCCEEDED", 100, operator)
    assert group_of(activity) == target
    assert held(two[target], activity)[("clicks", 1)] == 7
    got = messages_consume(actor=owner, stream=activity, topic="clicks", partition=1, offset=0,
                           limit=100)
    assert [m.value for m in got] == [b"v%d" % i for i in range(7)]


@pytest.mark.parametrize(("who", "text"), [("owner", "only cluster operators"),
                                           ("outsider", "does not exist")])
def test_rest_partition_move_is_for_operators_only(api, request, activity, two, who, text):
    source = group_of(activity)
    target = next(n for n in two if n != source)
    refused = call(api(request.getfixturevalue(who)), "stream/topic/partition/move",
                   path=activity.path, topic="clicks", partition=1, to=target)
    assert text in error_of(refused)
    assert group_of(activity) == source
    assert not Rebalance.objects.exists()


def test_rest_refuses_a_bad_move_naming_the_fix(api, operator, activity, two):
    ops = api(operator)
    source = group_of(activity)
    for params, text in (({"to": "s9"}, "no store group 's9': give one of its groups"),
                         ({"to": source}, "already on store group"),
                         ({"partition": 5, "to": "s2"}, "partitions 0..1")):
        args = {"path": activity.path, "topic": "clicks", "partition": 1} | params
        assert text in error_of(call(ops, "stream/topic/partition/move", **args))
    missing = call(ops, "stream/topic/partition/move", path=activity.path, topic="clicks",
                   to="s2")
    assert "partition" in error_of(missing)
    assert "-wait 'maybe' is not a boolean" in error_of(call(
        ops, "stream/topic/partition/move", path=activity.path, topic="clicks", partition=1,
        to="s2", wait="maybe"))
    assert not Rebalance.objects.exists()
    assert group_of(activity) == source
    assert held(two[source], activity)[("clicks", 1)] == 7


def test_rest_move_without_waiting_answers_the_queued_run_and_status_follows_it(
        api, operator, owner, activity, two):
    ops = api(operator)
    source = group_of(activity)
    target = next(n for n in two if n != source)
    [queued] = ok(call(ops, "stream/topic/partition/move", path=activity.path, topic="clicks",
                       partition=1, to=target, wait="false"))
    assert (queued["kind"], queued["state"], queued["percent"], queued["cluster"]) == (
        "move", "QUEUED", 0, activity.cluster.name)
    assert queued["result"] is None and queued["moves"][0]["to"] == target
    status = {"cluster": activity.cluster.name, "id": queued["id"]}
    deadline = time.monotonic() + 60
    while (row := ok(call(ops, "cluster/store/rebalancestatus", **status))[0])["state"] in (
            "QUEUED", "RUNNING"):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert (row["state"], row["percent"], row["movesDone"]) == ("SUCCEEDED", 100, 1)
    assert {k: row["result"][k] for k in ("partition", "from", "to", "messagesCopied", "id")} \
        == {"partition": 1, "from": source, "to": target, "messagesCopied": 7,
            "id": queued["id"]}
    assert group_of(activity) == target
    assert [r["id"] for r in ok(call(ops, "cluster/store/rebalancestatus",
                                     cluster=activity.cluster.name))] == [queued["id"]]
    assert f"has no rebalance, drain or move #{queued['id'] + 1}" in error_of(call(
        ops, "cluster/store/rebalancestatus", cluster=activity.cluster.name,
        id=queued["id"] + 1))
    assert "only cluster operators" in error_of(call(api(owner), "cluster/store/rebalancestatus",
                                                     **status))


@pytest.fixture
def no_worker(settings):  # type: ignore[no-untyped-def]
    """Runs queued on a Celery queue of their own that no worker reads: the test is the
    worker."""
    settings.CELERY_TASK_ALWAYS_EAGER = False
    queue, previous = f"sg-test-idle-{uuid.uuid4().hex[:8]}", app.conf.task_default_queue
    app.conf.task_default_queue = queue
    yield
    app.conf.task_default_queue = previous
    with app.connection_for_write() as conn:
        conn.default_channel.queue_delete(queue)


def test_rest_move_whose_run_fails_answers_its_error_and_the_partition_stays(
        api, operator, activity, two, no_worker):
    source = group_of(activity)
    target = next(n for n in two if n != source)
    answer: list = []

    def request() -> None:
        try:
            answer.append(call(api(operator), "stream/topic/partition/move", path=activity.path,
                               topic="clicks", partition=1, to=target))
        finally:
            connection.close()

    waiting = threading.Thread(target=request)
    waiting.start()
    wait_until(lambda: Rebalance.objects.exists())
    # Meanwhile the target began to drain: the worker's run finds it taking no partitions.
    StoreGroup.objects.filter(name=target).update(state=StoreGroup.State.DRAINING)
    run = Rebalance.objects.get()
    assert rebalance_run(rebalance_id=run.pk) == "FAILED"
    waiting.join(30)
    [refused] = answer
    assert refused.json()["errors"][0]["id"] == 16  # EBUSY, as maprcli reports a conflict
    assert error_of(refused) == (
        f"move #{run.pk} FAILED: Conflict: store group {target} of cluster "
        f"{activity.cluster.name} is draining and takes no partitions: move to an active "
        "group: see the cluster's store groups; see where the partition is with cluster "
        "store list")
    assert group_of(activity) == source
    assert held(two[source], activity)[("clicks", 1)] == 7


def test_rest_move_no_worker_takes_is_answered_with_how_to_follow_it(
        api, operator, activity, two, no_worker, monkeypatch):
    monkeypatch.setattr(rebalance, "QUEUE_PATIENCE", 0.5)
    target = next(n for n in two if n != group_of(activity))
    refused = call(api(operator), "stream/topic/partition/move", path=activity.path,
                   topic="clicks", partition=1, to=target)
    run = Rebalance.objects.get()
    assert error_of(refused) == (
        f"move #{run.pk} of cluster {activity.cluster.name} is still QUEUED after 0.5 s: no "
        "worker has taken it yet, and it runs when one does (see its progress with cluster "
        f"store rebalancestatus -cluster {activity.cluster.name} -id {run.pk})")
    assert rebalance_run(rebalance_id=run.pk) == "SUCCEEDED"  # a worker at last
    assert group_of(activity) == target
