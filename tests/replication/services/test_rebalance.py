"""`cluster store rebalance` and `cluster store drain` (issue 33): a plan first (dry run, which
changes nothing), then the moves in the background (here the embedded mode's thread) with
progress on the Rebalance row; the groups end within 10% of each other by bytes, a drained
group ends empty and is removed; every message stays readable in order; refusals name the fix
and change nothing; a run redelivered after its worker died goes on where it stopped."""

from __future__ import annotations

import psycopg
import pytest

from operations.models import AuditEvent
from replication import placement
from replication import rebalance as planning
from replication.engine.store import Record
from replication.errors import Conflict, InvalidInput, NotFound, PermissionDenied
from replication.models import Placement, Rebalance, StoreGroup
from replication.services import partitionmove, topic_create
from replication.services.messages import messages_consume, messages_produce
from replication.services.partitionmove import partition_move
from replication.services.rebalance import rebalance_run, rebalance_start, store_group_drain
from replication.services.storegroups import store_group_add, store_group_remove, store_group_rows
from tests.replication.services.test_storegroups import group_url, grow
from tests.workers.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _embedded(monkeypatch, settings):
    """Runs start in a thread of this process, as on `make run`."""
    monkeypatch.setattr(partitionmove, "CLEANUP_GRACE", 0.2)
    settings.CELERY_TASK_ALWAYS_EAGER = True
    placement.forget()
    yield
    placement.forget()


def fill(owner, stream, topic: str, sizes: list[int]) -> None:  # type: ignore[no-untyped-def]
    """The topic with one partition per size, each holding 20 messages of that many bytes."""
    topic_create(actor=owner, stream=stream, name=topic, partitions=len(sizes))
    messages_produce(actor=owner, stream=stream, topic=topic, records=[
        Record(value=b"%d:%d:" % (p, i) + b"x" * size, partition=p)
        for p, size in enumerate(sizes) for i in range(20)])


def group_bytes(cluster) -> dict[str, int]:  # type: ignore[no-untyped-def]
    return {row["name"]: row["bytes"] for row in store_group_rows(cluster)}


def ended(run_id: int) -> Rebalance:
    wait_until(lambda: Rebalance.objects.get(pk=run_id).state not in Rebalance.ACTIVE,
               timeout=120)
    return Rebalance.objects.get(pk=run_id)


def readable(owner, stream, topic: str, sizes: list[int]) -> None:  # type: ignore[no-untyped-def]
    for p in range(len(sizes)):
        got = messages_consume(actor=owner, stream=stream, topic=topic, partition=p, limit=100)
        assert [m.offset for m in got] == list(range(20))
        assert all(m.value.startswith(b"%d:%d:" % (p, m.offset)) for m in got)


def test_a_new_group_is_filled_to_within_ten_percent_and_every_message_stays(
        operator, owner, activity):
    grow(operator, activity.cluster)
    sizes = [1000, 1000, 500, 500, 250, 250]
    fill(owner, activity, "clicks", sizes)
    store_group_add(actor=operator, cluster=activity.cluster.name, name="s2",
                    url=group_url(activity.cluster, "s2"))
    before = group_bytes(activity.cluster)
    assert before["s2"] == 0

    plan = rebalance_start(actor=operator, cluster=activity.cluster.name, dryrun=True)
    assert plan["state"] == "PLANNED" and plan["id"] is None
    assert {m["to"] for m in plan["moves"]} == {"s2"}
    assert not Rebalance.objects.exists() and group_bytes(activity.cluster) == before

    started = rebalance_start(actor=operator, cluster=activity.cluster.name, throttle=10**9)
    assert started["state"] == "QUEUED" and started["moves"] == plan["moves"]
    run = ended(started["id"])
    assert (run.state, run.error) == (Rebalance.State.SUCCEEDED, "")
    assert run.moves_done == len(plan["moves"]) and run.bytes_done == run.bytes_total > 0
    after = group_bytes(activity.cluster)
    assert planning.balanced(after) and sum(after.values()) == sum(before.values())
    readable(owner, activity, "clicks", sizes)
    moves = AuditEvent.objects.filter(action="move", object_type="stream")
    assert moves.count() == len(plan["moves"])
    assert AuditEvent.objects.filter(object_type="rebalance", action="create").count() == 1


def test_a_drained_group_ends_empty_takes_nothing_new_and_is_removed(operator, owner, activity):
    grow(operator, activity.cluster, "s2", "s3")
    sizes = [400, 300, 200, 100, 100, 100]
    fill(owner, activity, "clicks", sizes)
    on_s3 = Placement.objects.filter(group__name="s3", stream=activity).count()
    assert on_s3 == 2  # six partitions dealt over three groups
    plan = store_group_drain(actor=operator, cluster=activity.cluster.name, name="s3",
                             dryrun=True)
    assert len(plan["moves"]) == on_s3 and {m["from"] for m in plan["moves"]} == {"s3"}
    assert StoreGroup.objects.get(name="s3").state == StoreGroup.State.ACTIVE

    started = store_group_drain(actor=operator, cluster=activity.cluster.name, name="s3")
    assert StoreGroup.objects.get(name="s3").state == StoreGroup.State.DRAINING
    topic_create(actor=owner, stream=activity, name="fresh", partitions=3)
    messages_produce(actor=owner, stream=activity, topic="fresh",
                     records=[Record(value=b"f", partition=p) for p in range(3)])
    assert run_state(ended(started["id"])) == Rebalance.State.SUCCEEDED
    assert not Placement.objects.filter(group__name="s3").exists()  # fresh placed elsewhere
    assert group_bytes(activity.cluster)["s3"] == 0
    store_group_remove(actor=operator, cluster=activity.cluster.name, name="s3")
    readable(owner, activity, "clicks", sizes)
    assert len(messages_consume(actor=owner, stream=activity, topic="fresh", partition=2)) == 1


def stored_in(url: str, stream, partition: int) -> int:  # type: ignore[no-untyped-def]
    """Batches of clicks[partition] in the group's database, held or not."""
    with psycopg.connect(url) as conn:
        return conn.execute(
            "SELECT count(*) FROM batches b JOIN partitions p ON p.id = b.pid WHERE "
            "p.stream = %s AND p.topic = 'clicks' AND p.partition = %s",
            (stream.uuid, partition)).fetchone()[0]


def run_state(run: Rebalance) -> str:
    assert run.error == "", run.error
    return run.state


def test_a_run_redelivered_after_its_worker_died_goes_on_where_it_stopped(
        operator, owner, activity, settings):
    settings.CELERY_TASK_ALWAYS_EAGER = False  # no worker: this test runs it by hand
    grow(operator, activity.cluster)
    groups = {"s1": activity.cluster.store_url, "s2": group_url(activity.cluster, "s2")}
    fill(owner, activity, "clicks", [500, 500, 500, 500])
    store_group_add(actor=operator, cluster=activity.cluster.name, name="s2", url=groups["s2"])
    run = Rebalance.objects.create(cluster=activity.cluster, kind=Rebalance.Kind.REBALANCE,
                                   requested_by=operator, state=Rebalance.State.RUNNING,
                                   plan=rebalance_start(actor=operator, dryrun=True,
                                                        cluster=activity.cluster.name)["moves"])
    first = run.plan[0]
    # The dead worker moved the first partition (its source's copy left for the run's end)
    # but never counted it.
    partition_move(actor=operator, stream=activity, topic="clicks",
                   partition=first["partition"], to=first["to"], defer_cleanup=True)
    assert stored_in(groups["s1"], activity, first["partition"]) > 0
    assert rebalance_run(rebalance_id=run.pk) == Rebalance.State.SUCCEEDED
    run.refresh_from_db()
    assert run.moves_done == len(run.plan) == 2
    assert planning.balanced(group_bytes(activity.cluster))
    assert rebalance_run(rebalance_id=run.pk) == Rebalance.State.SUCCEEDED  # again: nothing
    assert AuditEvent.objects.filter(action="move").count() == 2
    for row in run.plan:  # every source's copy deleted at the run's end, the dead one's too
        assert stored_in(groups["s1"], activity, row["partition"]) == 0
        assert stored_in(groups["s2"], activity, row["partition"]) > 0


def test_refusals_name_the_fix_and_change_nothing(operator, owner, activity):
    grow(operator, activity.cluster)
    name = activity.cluster.name
    with pytest.raises(Conflict, match="has one store group: add another"):
        rebalance_start(actor=operator, cluster=name)
    store_group_add(actor=operator, cluster=name, name="s2", url=group_url(activity.cluster, "s2"))
    with pytest.raises(PermissionDenied, match="only cluster operators"):
        rebalance_start(actor=owner, cluster=name)
    with pytest.raises(InvalidInput, match="-throttle 0 is not a rate"):
        rebalance_start(actor=operator, cluster=name, throttle=0)
    with pytest.raises(NotFound, match="no store group 's9'"):
        store_group_drain(actor=operator, cluster=name, name="s9")
    StoreGroup.objects.filter(name="s2").update(state=StoreGroup.State.DRAINING)
    with pytest.raises(Conflict, match=r"last active group .* add a group first"):
        store_group_drain(actor=operator, cluster=name, name="s1")
    StoreGroup.objects.filter(name="s2").update(state=StoreGroup.State.ACTIVE)
    Rebalance.objects.create(cluster=activity.cluster, kind="rebalance", plan=[{"x": 1}],
                             requested_by=operator)
    with pytest.raises(Conflict, match=r"rebalance #\d+ .* is QUEUED: wait for it"):
        store_group_drain(actor=operator, cluster=name, name="s2")
    assert StoreGroup.objects.get(name="s2").state == StoreGroup.State.ACTIVE
    assert Rebalance.objects.count() == 1


def test_a_long_throttled_wait_reports_the_run_alive(operator, activity, monkeypatch):
    """A run paced by a low -throttle waits long between chunks: it reports meanwhile, so
    beat's resume sweep (rebalances_stale) never takes it for a run that lost its worker."""
    from datetime import timedelta

    from django.utils import timezone

    from replication.services import rebalance as running

    monkeypatch.setattr(running, "ALIVE_SECONDS", 0.3)
    run = Rebalance.objects.create(cluster=activity.cluster, kind=Rebalance.Kind.REBALANCE,
                                   state=Rebalance.State.RUNNING, throttle=1_000,
                                   requested_by=operator)
    Rebalance.objects.filter(pk=run.pk).update(updated=timezone.now() - timedelta(hours=1))
    before = Rebalance.objects.get(pk=run.pk).updated
    running._Pace(run).wait(1_000)  # a second's worth of bytes at 1,000 a second
    assert Rebalance.objects.get(pk=run.pk).updated > before + timedelta(minutes=59)
    assert run.pk not in running.rebalances_stale()
