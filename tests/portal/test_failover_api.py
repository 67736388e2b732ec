"""`stream replica failover` over /rest (maprcli JSON) and /api/v1 (DRF errors): a failover
switches, and every refusal names the problem and leaves the database as it was."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import pytest

from operations.models import Alarm, AuditEvent
from replication import services
from replication.engine.store import Record
from replication.models import Failover, ReplicaLink, Stream, Topic, Upstream
from replication.services.messages import messages_produce
from replication.stores import store_for
from tests.factories import StreamFactory, replicated_clicks, spread

MODELS = (Stream, Topic, ReplicaLink, Upstream, Failover, Alarm)


def snapshot() -> dict[str, list[dict[str, Any]]]:
    return {model.__name__: list(model.objects.order_by("pk").values()) for model in MODELS}


@pytest.fixture
def pair(owner, activity, activity_ny):
    """activity -> activity_ny, agreed, with 12 messages replicated."""
    replicated_clicks(owner, activity, activity_ny, per_partition=6)
    return activity, activity_ny


def rest(client, command: str, **params: Any):  # type: ignore[no-untyped-def]
    return client.post(f"/rest/{command}", urlencode(params),
                       content_type="application/x-www-form-urlencoded")


def rest_error(response) -> tuple[int, int, str]:  # type: ignore[no-untyped-def]
    body = response.json()
    assert body["status"] == "ERROR", body
    return response.status_code, body["errors"][0]["id"], body["errors"][0]["desc"]


def test_rest_failover_answers_what_was_switched(api, owner, pair):
    source, replica = pair
    response = rest(api(owner), "stream/replica/failover", path=replica.path, force="true")
    body = response.json()
    assert response.status_code == 200 and body["status"] == "OK", body
    [row] = body["data"]
    assert (row["replicaPath"], row["sourcePath"], row["forced"]) == (replica.path,
                                                                      source.path, True)
    assert row["messagesMissing"] == 0 and row["topics"] == ["clicks"]
    assert row["endedLinks"] == [f"{source.path} -> {replica.path}"]
    assert Topic.objects.get(stream=replica).origin_uuid == replica.uuid


def test_rest_planned_failover_stops_the_sources_producers(api, owner, pair):
    source, replica = pair
    row = rest(api(owner), "stream/replica/failover", path=replica.path).json()["data"][0]
    assert (row["forced"], row["sourceReachable"], row["messagesMissing"]) == (False, True, 0)
    response = api(owner).post(f"/api/v1/streams/{source.uuid}/topics/clicks/messages/",
                               {"records": [{"value": "late"}]}, format="json")
    assert response.status_code == 409
    assert f"failed over to {replica.path}" in response.json()["detail"]


@pytest.mark.parametrize(("who", "path", "status", "errno", "says"), [
    ("alice", "/mapr/newyork/nothing", 404, 2, "does not exist"),
    ("alice", "activity", 400, 22, "/mapr/"),
    ("alice", "/mapr/sanfrancisco/activity", 400, 22, "is no replica"),
    ("bob", "/mapr/newyork/activity", 403, 1, "adminperm"),
    ("mallory", "/mapr/newyork/activity", 404, 2, "does not exist"),
])
def test_rest_failover_refusals_change_nothing(api, owner, member, outsider, pair, who, path,
                                               status, errno, says):
    user = {"alice": owner, "bob": member, "mallory": outsider}[who]
    before = snapshot()
    response = rest(api(user), "stream/replica/failover", path=path, force="true")
    code, number, desc = rest_error(response)
    assert (code, number) == (status, errno) and says in desc, desc
    assert snapshot() == before


def test_rest_failover_of_a_paused_link_is_refused(api, owner, pair):
    source, replica = pair
    services.replica_pause(actor=owner, source=source, replica=replica)
    before = snapshot()
    code, _errno, desc = rest_error(rest(api(owner), "stream/replica/failover",
                                         path=replica.path))
    assert code == 409 and "is paused" in desc and "stream replica resume" in desc
    assert snapshot() == before


def test_api_failover_creates_a_failover_and_lists_it(api, owner, pair):
    source, replica = pair
    client = api(owner)
    response = client.post(f"/api/v1/streams/{replica.uuid}/failovers/",
                           {"force": True, "source": source.path}, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["replica"], body["source_path"], body["forced"]) == (replica.path,
                                                                      source.path, True)
    assert [p["replicaEnd"] for p in body["partitions"]] == [6, 6]
    listed = client.get(f"/api/v1/streams/{replica.uuid}/failovers/").json()
    assert [item["id"] for item in listed["results"]] == [body["id"]]
    assert AuditEvent.objects.filter(action="failover").count() == 1


def test_api_failover_refusals_are_drf_errors_and_change_nothing(api, owner, member, pair):
    source, replica = pair
    before = snapshot()
    url = f"/api/v1/streams/{replica.uuid}/failovers/"
    response = api(member).post(url, {"force": True}, format="json")
    assert response.status_code == 403 and response.json()["code"] == "permission_denied"
    response = api(owner).post(url, {"force": "maybe"}, format="json")
    assert response.status_code == 400 and "force" in response.json()
    response = api(owner).post(url, {"source": "not a path"}, format="json")
    assert response.status_code == 400 and "source" in response.json()
    response = api(owner).post(f"/api/v1/streams/{source.uuid}/failovers/", {}, format="json")
    assert response.status_code == 400 and "is no replica" in response.json()["detail"]
    assert snapshot() == before


def test_api_failover_of_another_tenants_stream_is_404(api, outsider, pair, owner, newyork):
    source, replica = pair
    before = snapshot()
    url = f"/api/v1/streams/{replica.uuid}/failovers/"
    assert api(outsider).post(url, {"force": True}, format="json").status_code == 404
    assert api(outsider).get(url).status_code == 404
    mine = StreamFactory(cluster=newyork, name="mine", created_by=outsider)
    response = api(outsider).post(f"/api/v1/streams/{mine.uuid}/failovers/",
                                  {"source": source.path}, format="json")
    assert response.status_code == 404 and "does not exist" in response.json()["detail"]
    assert snapshot() == {**before, "Stream": list(Stream.objects.order_by("pk").values())}


def test_the_failover_alarm_is_seen_by_the_owner_and_not_an_outsider(api, owner, outsider,
                                                                     pair):
    _source, replica = pair
    rest(api(owner), "stream/replica/failover", path=replica.path, force="true")
    mine = api(owner).get("/api/v1/alarms/").json()["results"]
    assert [a["kind"] for a in mine] == ["STREAM_ALARM_REPLICA_FAILOVER"]
    assert api(outsider).get("/api/v1/alarms/").json()["results"] == []
    assert store_for(replica.cluster).watermarks(replica.uuid, "clicks")[0][1] == 6


# --- failback ------------------------------------------------------------------------------


@pytest.fixture
def failed_over(api, owner, pair):
    """pair failed over (6 per partition replicated, all of it), then 4 produced on the
    promoted stream."""
    source, replica = pair
    rest(api(owner), "stream/replica/failover", path=replica.path, force="true")
    messages_produce(actor=owner, stream=replica, topic="clicks",
                     records=spread(replica, "clicks",
                                    [Record(value=b"second-%d" % i) for i in range(4)]))
    return source, replica


def test_rest_failback_dryrun_reports_per_partition_and_changes_nothing(api, owner,
                                                                      failed_over):
    source, replica = failed_over
    before = snapshot()
    response = rest(api(owner), "stream/replica/failback", path=source.path,
                    replica=replica.path, dryrun="true")
    rows = response.json()["data"]
    assert [(r["partition"], r["commonPrefix"], r["keepAside"], r["copy"]) for r in rows[:2]] \
        == [(0, 6, 0, 2), (1, 6, 0, 2)]
    assert rows[-1]["topic"] == "(total)" and rows[-1]["dryrun"] is True
    assert snapshot() == before


def test_rest_failback_switches_back(api, owner, failed_over):
    source, replica = failed_over
    rows = rest(api(owner), "stream/replica/failback", path=source.path,
                replica=replica.path).json()["data"]
    assert rows[-1]["copy"] == 4
    assert set(ReplicaLink.objects.values_list("source", "replica")) == {(source.pk,
                                                                          replica.pk)}
    assert Topic.objects.get(stream=replica, name="clicks").origin_uuid == source.uuid


SF, NY = "/mapr/sanfrancisco/activity", "/mapr/newyork/activity"


@pytest.mark.parametrize(("who", "path", "replica", "status", "says"), [
    ("alice", NY, SF, 400, "did not take over from"),  # the promoted stream is no old source
    ("bob", SF, NY, 403, "adminperm"),
    ("mallory", SF, NY, 404, "does not exist"),
])
def test_rest_failback_refusals_change_nothing(api, owner, member, outsider, failed_over, who,
                                               path, replica, status, says):
    user = {"alice": owner, "bob": member, "mallory": outsider}[who]
    before = snapshot()
    response = rest(api(user), "stream/replica/failback", path=path, replica=replica)
    code, _errno, desc = rest_error(response)
    assert code == status and says in desc, desc
    assert snapshot() == before


def test_api_failback_dryrun_and_outsider(api, owner, outsider, failed_over):
    source, replica = failed_over
    before = snapshot()
    url = f"/api/v1/streams/{replica.uuid}/failovers/failback/"
    response = api(owner).post(url, {"source": source.path, "dryrun": True}, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["toCopy"] == 4 and response.json()["dryrun"] is True
    assert api(outsider).post(url, {"source": source.path}, format="json").status_code == 404
    response = api(owner).post(url, {}, format="json")
    assert response.status_code == 400 and "source" in response.json()
    assert snapshot() == before
