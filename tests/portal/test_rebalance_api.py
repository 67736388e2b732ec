"""`cluster store rebalance|drain|rebalancestatus` through /rest (and so the CLI) and
/api/v1/clusters/<name>/rebalances/, a single partition move through
/api/v1/streams/<uuid>/topics/<name>/move/ followed at .../rebalances/<id>/, and the admin's
Rebalance page (issue 33): operators only, a dry run's plan changing nothing, errors in the
maprcli shape and as DRF errors, a move's state and percent as it copies."""

from __future__ import annotations

import time

import pytest
from django.urls import reverse

from replication import placement
from replication.engine import partitionmove as moving
from replication.engine.store import Record
from replication.models import Rebalance, StoreGroup
from replication.services import partitionmove, topic_create
from replication.services.messages import messages_produce
from replication.services.storegroups import store_group_add
from tests.portal.test_rest import call, error_of, ok
from tests.replication.services.test_storegroups import group_url, grow


@pytest.fixture(autouse=True)
def lopsided(operator, owner, activity):  # type: ignore[no-untyped-def]
    """activity's cluster: clicks (4 partitions, 2 KB each) on s1, then an empty s2."""
    placement.forget()
    grow(operator, activity.cluster)
    topic_create(actor=owner, stream=activity, name="clicks", partitions=4)
    messages_produce(actor=owner, stream=activity, topic="clicks", records=[
        Record(b"x" * 100, partition=p) for p in range(4) for _ in range(20)])
    store_group_add(actor=operator, cluster=activity.cluster.name, name="s2",
                    url=group_url(activity.cluster, "s2"))
    yield
    placement.forget()


def test_rest_plans_a_rebalance_and_lists_runs(api, operator, activity):
    ops, name = api(operator), activity.cluster.name
    [plan] = ok(call(ops, "cluster/store/rebalance", cluster=name, dryrun="true"))
    assert plan["state"] == "PLANNED" and len(plan["moves"]) == 2
    assert {(m["from"], m["to"], m["path"], m["topic"]) for m in plan["moves"]} == {
        ("s1", "s2", activity.path, "clicks")}
    assert not Rebalance.objects.exists()
    assert ok(call(ops, "cluster/store/rebalancestatus", cluster=name)) == []
    Rebalance.objects.create(cluster=activity.cluster, kind="rebalance", requested_by=operator,
                             plan=plan["moves"], bytes_total=plan["bytesTotal"])
    [row] = ok(call(ops, "cluster/store/rebalancestatus", cluster=name))
    assert (row["state"], row["movesTotal"], row["movesDone"], row["percent"]) == (
        "QUEUED", 2, 0, 0)
    assert "is QUEUED: wait for it" in error_of(call(ops, "cluster/store/rebalance",
                                                      cluster=name))


def test_rest_refusals_in_the_maprcli_shape_change_nothing(api, operator, owner, activity):
    name = activity.cluster.name
    assert "only cluster operators may rebalance" in error_of(
        call(api(owner), "cluster/store/rebalance", cluster=name, dryrun="true"))
    assert "-throttle 0 is out of range" in error_of(
        call(api(operator), "cluster/store/rebalance", cluster=name, throttle="0"))
    assert "no store group 's9'" in error_of(
        call(api(operator), "cluster/store/drain", cluster=name, name="s9"))
    assert not Rebalance.objects.exists()
    assert set(StoreGroup.objects.values_list("state", flat=True)) == {"active"}


def test_api_plans_and_starts_a_drain_and_lists_it(api, operator, activity, settings):
    settings.CELERY_TASK_ALWAYS_EAGER = False  # recorded here; a worker runs it elsewhere
    client, url = api(operator), f"/api/v1/clusters/{activity.cluster.name}/rebalances/"
    refused = client.post(url, {"kind": "drain"}, format="json")
    assert refused.status_code == 400 and "needs the group" in str(refused.json())
    plan = client.post(url, {"kind": "drain", "group": "s1", "dryrun": True}, format="json")
    assert plan.status_code == 200 and plan.json()["state"] == "PLANNED"
    assert len(plan.json()["moves"]) == 4 and StoreGroup.objects.get(name="s1").state == "active"
    started = client.post(url, {"kind": "drain", "group": "s1"}, format="json")
    assert started.status_code == 202 and started.json()["state"] == "QUEUED"
    assert StoreGroup.objects.get(name="s1").state == "draining"
    listed = client.get(url).json()
    assert [r["id"] for r in listed] == [started.json()["id"]]
    assert api(activity.created_by).get(url).status_code == 403


def test_admin_shows_each_run_with_its_progress(operator, activity, client):
    Rebalance.objects.create(cluster=activity.cluster, kind="rebalance", requested_by=operator,
                             plan=[{"bytes": 10}] * 4, moves_done=1, bytes_total=40,
                             bytes_done=10, state="RUNNING")
    client.force_login(operator)
    page = client.get(reverse("admin:replication_rebalance_changelist")).content.decode()
    assert "25% (1 of 4 moves)" in page and "RUNNING" in page
    assert client.get(reverse("admin:replication_rebalance_add")).status_code == 403


@pytest.mark.django_db(transaction=True)  # the run's thread reads what the request committed
def test_api_moves_a_partition_and_shows_its_state_and_percent(
        api, operator, owner, outsider, activity, settings, monkeypatch):
    settings.CELERY_TASK_ALWAYS_EAGER = True  # the run: a thread, as on `make run`
    monkeypatch.setattr(partitionmove, "CLEANUP_GRACE", 0.2)
    monkeypatch.setattr(moving, "CHUNK_OFFSETS", 20)
    for _ in range(19):  # partition 0: 20 batches of 20 offsets, 400 messages
        messages_produce(actor=owner, stream=activity, topic="clicks",
                         records=[Record(b"y" * 100, partition=0) for _ in range(20)])
    url = f"/api/v1/streams/{activity.uuid}/topics/clicks/move/"
    body = {"partition": 0, "to": "s2", "throttle": 15_000}  # ~45 KB: 3 s
    assert api(owner).post(url, body, format="json").status_code == 403
    assert api(outsider).post(url, body, format="json").status_code == 404
    refused = api(operator).post(url, {"partition": 0, "to": "s1"}, format="json")
    assert refused.status_code == 409 and "already on store group s1" in str(refused.json())
    assert not Rebalance.objects.exists()

    started = api(operator).post(url, body, format="json")
    assert started.status_code == 202, started.json()
    run = started.json()
    assert (run["kind"], run["state"], run["percent"], run["cluster"]) == (
        "move", "QUEUED", 0, activity.cluster.name)
    follow = f"/api/v1/clusters/{activity.cluster.name}/rebalances/{run['id']}/"
    seen: list[tuple[str, int]] = []
    deadline = time.monotonic() + 60
    while not seen or seen[-1][0] in ("QUEUED", "RUNNING"):
        assert time.monotonic() < deadline, seen[-3:]
        got = api(operator).get(follow)
        assert got.status_code == 200
        seen.append((got.json()["state"], got.json()["percent"]))
        time.sleep(0.05)
    # The copy's chunks, as it goes (99 would be its end: the cut-over, the switch, the
    # clean-up).
    assert len({p for state, p in seen if state == "RUNNING" and 0 < p < 99}) >= 3, seen
    assert all(percent < 100 for _, percent in seen[:-1]) and seen[-1] == ("SUCCEEDED", 100)
    done = api(operator).get(follow).json()
    assert (done["state"], done["percent"], done["result"]["messagesCopied"]) == (
        "SUCCEEDED", 100, 400)
    listed = api(operator).get(f"/api/v1/clusters/{activity.cluster.name}/rebalances/")
    assert [(r["id"], r["kind"]) for r in listed.json()] == [(run["id"], "move")]
    assert api(owner).get(follow).status_code == 403
    assert api(operator).get(follow.replace(f"/{run['id']}/", "/999/")).status_code == 404


def test_admin_shows_a_single_move_with_its_copy_progress(operator, activity, client):
    Rebalance.objects.create(cluster=activity.cluster, kind="move", requested_by=operator,
                             plan=[{"path": activity.path, "topic": "clicks", "partition": 2,
                                    "to": "s2", "bytes": 2000}],
                             bytes_total=2000, bytes_done=800, state="RUNNING")
    client.force_login(operator)
    page = client.get(reverse("admin:replication_rebalance_changelist")).content.decode()
    assert f"move of {activity.path}:clicks[2] to s2@{activity.cluster.name}" in page
    assert "40% (800 of 2,000 bytes)" in page and "RUNNING" in page
