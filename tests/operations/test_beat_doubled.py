"""Two beats (a second started by mistake, or two nodes each running one): every periodic task
runs twice, at the same moment, and the outcome is that of one run (docs/scaling.md)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from django.db import connection

from operations.models import Alarm, AlarmKind, UsageDay
from operations.tasks import evaluate_alarms_task, rollup_tenant_usage_task
from replication.engine.store import Record
from replication.lag_history import lag_history
from replication.models import ReplicaLink
from replication.services import stream_edit, topic_create
from replication.services.compaction import compaction_summary
from replication.services.messages import messages_consume, messages_produce
from replication.stores import store_for
from tests.factories import ClusterFactory, StreamFactory
from tests.operations.test_alarms import produce
from workers.celery import app
from workers.replication.applier import batch_serve
from workers.tasks import (
    compact_stream_task,
    expire_stream_task,
    record_lag_task,
    recover_moves_task,
    verify_links_task,
)

pytestmark = pytest.mark.django_db(transaction=True)


def twice_at_once(task: Callable[[], object]) -> list[object]:
    """The task in two threads released together, as two beats' workers would run it."""
    start, results = threading.Barrier(2), []

    def run() -> None:
        try:
            start.wait()
            results.append(task())
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


def test_every_beat_entry_is_one_of_the_tasks_checked_here():
    tasks = {entry["task"] for entry in app.conf.beat_schedule.values()}
    assert tasks == {"workers.tasks.expire_messages_task", "workers.tasks.resume_jobs_task",
                     "workers.tasks.record_lag_task", "operations.tasks.evaluate_alarms_task",
                     "workers.tasks.verify_links_task", "operations.tasks.rollup_usage_task",
                     "workers.tasks.compact_streams_task", "workers.tasks.recover_moves_task"}


def test_alarm_evaluation_run_twice_at_once_opens_one_alarm(link, live_gateway):
    twice_at_once(evaluate_alarms_task)
    assert list(Alarm.objects.open().values_list("kind", flat=True)) == [
        AlarmKind.WAITING_FOR_UPSTREAM]


def test_retention_run_twice_at_once_deletes_the_expired_messages_once(owner, activity, clicks):
    activity.ttl = 60
    activity.save()
    produce(owner, activity, 5, timestamp_ms=int(time.time() * 1000) - 120_000)
    produce(owner, activity, 3)  # recent: kept
    deleted = twice_at_once(lambda: expire_stream_task(activity.pk))
    assert sorted(deleted) == [0, 5]
    assert store_for(activity.cluster).watermarks(activity.uuid, "clicks") == {0: (5, 8)}


def test_compaction_run_twice_at_once_removes_each_old_value_once(owner, settings):
    settings.STORE_LAYOUT = "batches"  # compaction needs the batch layout (issue 31)
    stream = StreamFactory(cluster=ClusterFactory(name="twiceland"), name="kv",
                           created_by=owner)
    stream_edit(actor=owner, stream=stream, compact=True, deleteretention=1_000,
                mincleanabledirtyratio=0.0)
    topic_create(actor=owner, stream=stream, name="clicks", partitions=1)
    for n in range(3):  # three values of each key, in batches of their own
        messages_produce(actor=owner, stream=stream, topic="clicks", records=[
            Record(b"%d" % n, key=key, partition=0, timestamp_ms=1_000 + n)
            for key in (b"a", b"b")])
    twice_at_once(lambda: compact_stream_task(stream.pk))
    kept = messages_consume(actor=owner, stream=stream, topic="clicks", partition=0, limit=100)
    assert [(m.offset, m.key, m.value) for m in kept] == [(4, b"a", b"2"), (5, b"b", b"2")]
    assert compaction_summary(stream)["messagesremoved"] == 4


def test_usage_rollup_run_twice_at_once_counts_the_traffic_once(owner, activity, clicks):
    produce(owner, activity, 5)
    tenant = owner.memberships.get().tenant
    assert twice_at_once(lambda: rollup_tenant_usage_task(tenant.pk)) == [1, 1]
    row = UsageDay.objects.get(stream_uuid=activity.uuid)
    assert (row.produced_messages, row.consumed_messages) == (5, 0)


def test_lag_recording_run_twice_at_once_keeps_a_sample_and_no_more_than_two(pair):
    started_ms = int(time.time() * 1000)
    twice_at_once(record_lag_task)
    # The shared cache may hold samples of an earlier test's link with the same id.
    points = [p for p in lag_history([pair.pk])[pair.pk] if p[0] >= started_ms]
    assert 1 <= len(points) <= 2  # a chart point, maybe two



def test_verification_run_twice_at_once_verifies_each_link_once_and_keeps_its_cursor(
        owner, activity, activity_ny, pair):
    produce(owner, activity, 30)
    batch_serve(link_id=pair.pk, topic="clicks", partition=0, start=0, end=30)
    replica = store_for(activity_ny.cluster)
    replica.truncate(activity_ny.uuid, "clicks", 0, 12)  # diverged from offset 12 on
    replica.append(activity_ny.uuid, "clicks", [Record(value=b"other")] * 18,
                   origin=activity.uuid)
    assert sorted(twice_at_once(verify_links_task)) == [0, 1]  # one run did it
    link = ReplicaLink.objects.get(pk=pair.pk)
    assert link.verified_upto == {"clicks:0": 12} and "offset 12" in link.verify_error
    twice_at_once(evaluate_alarms_task)
    assert Alarm.objects.open().filter(kind=AlarmKind.DIVERGED).count() == 1


def test_two_sweeps_give_a_partition_cut_over_by_a_dead_move_back_once(
        operator, owner, activity, monkeypatch):
    """recover_moves_task twice at once: the partition a dead move left writable nowhere is
    given back to its source by one of them, and takes writes again."""
    from replication import placement
    from replication.engine import partitionmove as moving
    from replication.services import partitionmove
    from tests.replication.services.test_partition_move import crash_move, other, where
    from tests.replication.services.test_storegroups import grow

    monkeypatch.setattr(partitionmove, "CLEANUP_GRACE", 0.2)
    placement.forget()
    groups = grow(operator, activity.cluster, "s2")
    topic_create(actor=owner, stream=activity, name="clicks", partitions=2)
    messages_produce(actor=owner, stream=activity, topic="clicks",
                     records=[Record(b"a", partition=0)])
    source = where(activity)
    crash_move(operator, activity, other(groups, source), "cut")
    placement.forget()
    assert sorted(twice_at_once(recover_moves_task)) == [0, 1]
    view = placement.view_of(activity.cluster.name)
    assert moving.marked(view.stores[source]) == [] and where(activity) == source
    messages_produce(actor=owner, stream=activity, topic="clicks",
                     records=[Record(b"b", partition=0)])
    assert [m.value for m in messages_consume(actor=owner, stream=activity, topic="clicks",
                                              partition=0)] == [b"a", b"b"]
    placement.forget()
