"""Alarms raised and cleared by the engine: each kind's condition, idempotence (one open alarm
per kind and object), clearing, events to the tenants, and the beat entry."""

from __future__ import annotations

import time

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from django.db import IntegrityError

from operations.alarms import Condition, alarm_raise, alarms_evaluate
from operations.models import Alarm, AlarmKind
from operations.tasks import evaluate_alarms_task
from replication import lag_history, services
from replication.engine.store import Record
from replication.models import ReplicaLink, SyncMode
from replication.services.linknotes import link_error, link_progress, link_waiting
from replication.services.messages import messages_produce
from replication.services.purge import stream_expire
from replication.services.sync import link_mode_switch
from tests.operations.conftest import ago
from tests.portal.web.test_consumers import socket_for
from workers.celery import app
from workers.replication.applier import batch_serve

pytestmark = pytest.mark.django_db


def open_kinds(key: str | None = None) -> list[str]:
    alarms = Alarm.objects.open()
    if key is not None:
        alarms = alarms.filter(key=key)
    return sorted(alarms.values_list("kind", flat=True))


def produce(owner, stream, count: int, *, timestamp_ms: int | None = None) -> None:  # type: ignore[no-untyped-def]
    records = [Record(value=f"m{i}".encode(), timestamp_ms=timestamp_ms) for i in range(count)]
    messages_produce(actor=owner, stream=stream, topic="clicks", records=records)


def test_replica_waiting_for_upstream_is_raised_once_and_cleared_on_approval(
        owner, activity, activity_ny, link, live_gateway):
    first = alarms_evaluate()
    again = alarms_evaluate()
    alarm = Alarm.objects.get()
    assert (first["raised"], again["raised"]) == (1, 0)
    assert alarm.kind == AlarmKind.WAITING_FOR_UPSTREAM and alarm.link_id == link.pk
    assert alarm.entity == f"{activity.path} -> {activity_ny.path}"
    assert alarm.description.endswith("so nothing replicates: its owner approves it as an upstream")

    services.upstream_add(actor=owner, replica=activity_ny, source=activity)
    assert alarms_evaluate()["cleared"] == 1
    alarm.refresh_from_db()
    assert alarm.cleared is not None and open_kinds() == []


def test_one_open_alarm_per_kind_and_object_is_a_database_rule(link):
    Alarm.objects.create(kind=AlarmKind.STALLED, key=f"link:{link.pk}", entity="x",
                         description="d")
    with pytest.raises(IntegrityError):
        Alarm.objects.create(kind=AlarmKind.STALLED, key=f"link:{link.pk}", entity="x",
                             description="d")


def test_raising_again_refreshes_the_open_alarm_instead_of_adding_one(link):
    condition = Condition(AlarmKind.REPLICATION_ERROR, f"link:{link.pk}", "e", "first",
                          link_id=link.pk)
    assert alarm_raise(condition=condition) is True
    changed = Condition(AlarmKind.REPLICATION_ERROR, f"link:{link.pk}", "e", "second",
                        link_id=link.pk)
    assert alarm_raise(condition=changed) is False
    assert list(Alarm.objects.values_list("description", flat=True)) == ["second"]


def test_all_gateways_down_on_a_destination_cluster_is_raised_and_cleared(pair, newyork,
                                                                           live_gateway):
    live_gateway.last_heartbeat = ago(120)
    live_gateway.save()
    alarms_evaluate()
    alarm = Alarm.objects.get(kind=AlarmKind.GATEWAYS_DOWN)
    assert alarm.cluster_id == newyork.pk and alarm.entity == "newyork"
    assert "all 1 configured gateways are down" in alarm.description

    live_gateway.last_heartbeat = ago(0)
    live_gateway.save()
    alarms_evaluate()
    assert open_kinds() == []


def test_a_cluster_without_gateways_alarms_only_while_a_moving_link_goes_there(
        owner, activity, activity_ny, pair):
    alarms_evaluate()
    assert "no gateway is configured" in Alarm.objects.open().get().description
    services.replica_pause(actor=owner, source=activity, replica=activity_ny)
    alarms_evaluate()
    assert open_kinds() == []


def test_replication_error_is_raised_with_its_gateway_and_cleared_by_progress(pair,
                                                                             live_gateway):
    link_error(link_id=pair.pk, error="Misordered: replica ends at 7", gateway="gw1")
    alarms_evaluate()
    alarm = Alarm.objects.get()
    assert alarm.kind == AlarmKind.REPLICATION_ERROR
    assert alarm.description == "Misordered: replica ends at 7 (gateway gw1)"

    link_progress(link_ids=[pair.pk])
    alarms_evaluate()
    assert open_kinds() == []


def test_waiting_for_a_gateway_is_the_clusters_alarm_not_a_replication_error(pair):
    link_waiting(link_ids=[pair.pk], cluster="newyork")
    alarms_evaluate()
    assert open_kinds() == [AlarmKind.GATEWAYS_DOWN]


def test_a_paused_link_raises_no_error_or_stall(owner, activity, activity_ny, pair,
                                               live_gateway):
    link_error(link_id=pair.pk, error="boom")
    services.replica_pause(actor=owner, source=activity, replica=activity_ny)
    alarms_evaluate()
    assert open_kinds() == []


def test_stalled_link_is_raised_and_cleared_once_the_replica_catches_up(
        owner, activity, pair, live_gateway, settings):
    produce(owner, activity, 3)
    ReplicaLink.objects.filter(pk=pair.pk).update(last_progress=ago(
        settings.REPLICATION_STALL_SECONDS + 5))
    alarms_evaluate()
    alarm = Alarm.objects.get()
    assert alarm.kind == AlarmKind.STALLED
    assert alarm.description.startswith("3 messages pending")

    assert batch_serve(link_id=pair.pk, topic="clicks", partition=0, start=0,
                       end=3) == 3
    alarms_evaluate()
    assert open_kinds() == []


def test_the_lag_recorders_fresh_sample_stands_for_the_backlog_an_old_one_does_not(
        pair, live_gateway, settings):
    # The evaluation reads the recorder's samples rather than every link's backlog again
    # (issue 33's idle cost). The store holds nothing, so only a sample can say 4 pending.
    ReplicaLink.objects.filter(pk=pair.pk).update(last_progress=ago(
        settings.REPLICATION_STALL_SECONDS + 5))
    now_ms = int(time.time() * 1000)
    lag_history._append({pair.pk: [now_ms - 60_000, 4, 40, 0, 1]})  # a minute old
    alarms_evaluate()
    assert open_kinds() == []  # read afresh from the stores: nothing pending
    lag_history._append({pair.pk: [now_ms, 4, 40, 0, 1]})
    alarms_evaluate()
    assert Alarm.objects.get().description.startswith("4 messages pending")


def test_synchronous_replica_that_fell_back_to_async_is_raised_until_it_returns(
        pair, live_gateway):
    ReplicaLink.objects.filter(pk=pair.pk).update(synchronous=True, mode=SyncMode.SYNC)
    pair.refresh_from_db()
    alarms_evaluate()
    assert open_kinds() == []

    assert link_mode_switch(link=pair, to=SyncMode.ASYNC, reason="replica applied too slowly")
    alarms_evaluate()
    alarm = Alarm.objects.open().get()
    assert alarm.kind == AlarmKind.ASYNC_FALLBACK
    assert "replica applied too slowly" in alarm.description

    assert link_mode_switch(link=pair, to=SyncMode.SYNC, reason="caught up")
    alarms_evaluate()
    assert open_kinds() == []


def test_an_asynchronous_replica_is_no_fallback(pair, live_gateway):
    assert not pair.synchronous and pair.mode == SyncMode.ASYNC
    alarms_evaluate()
    assert open_kinds() == []


def test_retention_deleting_unreplicated_messages_raises_an_alarm_on_the_link(
        owner, activity, activity_ny, pair, live_gateway):
    activity.ttl = 60
    activity.save()
    old = int(time.time() * 1000) - 120_000
    produce(owner, activity, 4, timestamp_ms=old)
    produce(owner, activity, 2)  # recent: retention keeps them

    assert stream_expire(stream=activity) == 4
    alarm = Alarm.objects.open().get(kind=AlarmKind.RETENTION_UNREPLICATED)
    assert alarm.link_id == pair.pk
    assert f"deleted 4 messages of {activity.path} that {activity_ny.path}" in alarm.description
    assert "clicks partition 0 offsets 0-3" in alarm.description
    # Not the evaluator's to clear: the loss happened, whatever the link does next.
    alarms_evaluate()
    assert Alarm.objects.open().filter(kind=AlarmKind.RETENTION_UNREPLICATED).exists()


def test_retention_of_replicated_messages_raises_nothing(owner, activity, pair, live_gateway):
    activity.ttl = 60
    activity.save()
    produce(owner, activity, 4, timestamp_ms=int(time.time() * 1000) - 120_000)
    assert batch_serve(link_id=pair.pk, topic="clicks", partition=0, start=0,
                       end=4) == 4
    assert stream_expire(stream=activity) == 4
    assert not Alarm.objects.exists()


def test_retention_alarm_clears_after_the_hold(owner, activity, pair, live_gateway, settings):
    activity.ttl = 60
    activity.save()
    produce(owner, activity, 1, timestamp_ms=int(time.time() * 1000) - 120_000)
    stream_expire(stream=activity)
    Alarm.objects.update(last_seen=ago(settings.ALARM_RETENTION_HOLD_SECONDS + 1))
    alarms_evaluate()
    assert open_kinds() == []


def test_alarms_of_a_deleted_link_are_cleared(owner, activity, activity_ny, link):
    alarms_evaluate()
    services.replica_remove(actor=owner, source=activity, replica=activity_ny)
    alarms_evaluate()
    assert open_kinds() == [] and Alarm.objects.get().cleared is not None


@pytest.mark.django_db(transaction=True)
def test_raise_and_clear_reach_the_tenants_sockets_and_never_an_outsiders(
        owner, outsider, activity, activity_ny, link, live_gateway, private_channel_layer):
    alice, mallory = socket_for(owner), socket_for(outsider)

    async def scenario() -> None:
        assert (await alice.connect())[0] and (await mallory.connect())[0]
        await database_sync_to_async(alarms_evaluate)()
        raised = await alice.receive_json_from(timeout=2)
        assert raised["event"] == "alarm.raised"
        assert raised["payload"]["kind"] == AlarmKind.WAITING_FOR_UPSTREAM
        await database_sync_to_async(services.upstream_add)(actor=owner, replica=activity_ny,
                                                            source=activity)
        await database_sync_to_async(alarms_evaluate)()
        events = [(await alice.receive_json_from(timeout=2))["event"] for _ in range(2)]
        assert events == ["upstream.added", "alarm.cleared"]
        assert await mallory.receive_nothing(timeout=0.3)
        await alice.disconnect()
        await mallory.disconnect()

    async_to_sync(scenario)()


def test_the_task_evaluates_and_beat_runs_it_every_ten_seconds(link, live_gateway):
    entry = app.conf.beat_schedule["evaluate-alarms"]
    assert entry["schedule"] <= 10 and entry["task"] == evaluate_alarms_task.name
    assert evaluate_alarms_task.apply().get()["raised"] == 1
    assert open_kinds() == [AlarmKind.WAITING_FOR_UPSTREAM]


def test_the_embedded_scheduler_runs_the_alarm_evaluation(link, live_gateway, settings):
    from workers.embedded import _run_due

    app.loader.import_default_modules()
    due = {name: float("inf") for name in app.conf.beat_schedule if name != "evaluate-alarms"}
    _run_due(app, due)
    assert open_kinds() == [AlarmKind.WAITING_FOR_UPSTREAM]
