"""Alarms as users and operators see them: /api/v1/alarms/, `alarm list` over /rest, the admin
site and the overview; each scoped by tenant, and an outsider sees nothing of another's."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from operations.alarms import alarms_evaluate
from operations.models import Alarm, AlarmKind
from tests.factories import StreamFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def raised(link, newyork) -> dict[str, Alarm]:
    """Two open alarms of acme's: the link waits for its upstream, and (once a second,
    agreed link moves into newyork) newyork has no gateway; one cleared alarm."""
    Alarm.objects.create(kind=AlarmKind.STALLED, key=f"link:{link.pk}", link=link,
                         entity=str(link), description="old stall", cleared="2026-01-01T00:00Z")
    alarms_evaluate()
    by_kind = {a.kind: a for a in Alarm.objects.open()}
    assert set(by_kind) == {AlarmKind.WAITING_FOR_UPSTREAM}
    return by_kind


@pytest.fixture
def cluster_alarm(owner, newyork) -> Alarm:
    return Alarm.objects.create(kind=AlarmKind.GATEWAYS_DOWN, key=f"cluster:{newyork.pk}",
                                cluster=newyork, entity="newyork", description="all down")


def test_api_lists_the_alarms_of_your_links_with_filters(api, owner, activity, raised):
    client = api(owner)
    rows = client.get("/api/v1/alarms/", {"open": "true"}).json()["results"]
    assert [(r["kind"], r["alarm_type"], r["open"]) for r in rows] == [
        (AlarmKind.WAITING_FOR_UPSTREAM, "STREAM", True)]
    assert rows[0]["entity"] == f"{activity.path} -> /mapr/newyork/activity"
    history = client.get("/api/v1/alarms/", {"open": "false"}).json()["results"]
    assert [r["description"] for r in history] == ["old stall"]
    assert client.get("/api/v1/alarms/", {"stream": activity.path}).json()["count"] == 2
    assert client.get("/api/v1/alarms/", {"stream": "/mapr/x/y"}).json()["count"] == 0
    alarm = raised[AlarmKind.WAITING_FOR_UPSTREAM]
    assert client.get(f"/api/v1/alarms/{alarm.pk}/").json()["id"] == alarm.pk


def test_api_alarms_are_read_only(api, owner, raised):
    alarm = raised[AlarmKind.WAITING_FOR_UPSTREAM]
    client = api(owner)
    assert client.post("/api/v1/alarms/", {}, format="json").status_code == 405
    assert client.delete(f"/api/v1/alarms/{alarm.pk}/").status_code == 405


def test_outsider_sees_no_alarm_of_another_tenant(api, outsider, activity, raised,
                                                   cluster_alarm):
    client = api(outsider)
    body = client.get("/api/v1/alarms/").content.decode()
    assert activity.path not in body and "newyork" not in body
    for alarm in [*raised.values(), cluster_alarm]:
        assert client.get(f"/api/v1/alarms/{alarm.pk}/").status_code == 404
    assert client.get("/rest/alarm/list").json()["data"] == []
    response = client.get("/rest/alarm/list", {"path": activity.path})
    assert response.status_code == 404


def test_cluster_alarms_show_to_tenants_with_streams_on_the_cluster(api, owner, outsider,
                                                                   activity, cluster_alarm):
    assert api(owner).get("/api/v1/alarms/").json()["count"] == 0  # no stream on newyork yet
    StreamFactory(cluster=cluster_alarm.cluster, name="activity", created_by=owner)
    assert [r["entity"] for r in api(owner).get("/api/v1/alarms/").json()["results"]] == [
        "newyork"]
    assert api(outsider).get("/api/v1/alarms/").json()["count"] == 0
    StreamFactory(cluster=cluster_alarm.cluster, name="ledger", created_by=outsider)
    assert api(outsider).get("/api/v1/alarms/").json()["count"] == 1


def test_a_link_alarm_shows_to_the_tenants_of_both_ends(api, owner, outsider, activity,
                                                        newyork):
    from replication import services

    theirs = StreamFactory(cluster=newyork, name="mirror", created_by=outsider)
    # mallory's replica: alice registers it; only mallory could approve it.
    services.replica_add(actor=owner, source=activity, replica=theirs)
    alarms_evaluate()
    assert api(outsider).get("/api/v1/alarms/").json()["count"] == 1
    assert api(owner).get("/api/v1/alarms/").json()["count"] == 1


def test_operators_see_every_alarm(api, operator, raised, cluster_alarm):
    assert api(operator).get("/api/v1/alarms/", {"open": "true"}).json()["count"] == 2


def test_rest_alarm_list_has_mapr_fields_summary_history_and_filters(api, owner, activity,
                                                                    raised, cluster_alarm):
    client = api(owner)
    rows = client.get("/rest/alarm/list").json()["data"]
    assert list(rows[0])[:6] == ["entity", "alarm name", "alarm state", "alarm statechange time",
                                 "description", "alarm type"]
    assert {(r["alarm name"], r["alarm state"]) for r in rows} == {
        (AlarmKind.WAITING_FOR_UPSTREAM, 1), (AlarmKind.GATEWAYS_DOWN, 1)}
    summary = client.get("/rest/alarm/list", {"summary": "true"}).json()["data"]
    assert summary == [{"alarm name": AlarmKind.GATEWAYS_DOWN, "count": 1},
                       {"alarm name": AlarmKind.WAITING_FOR_UPSTREAM, "count": 1}]
    history = client.get("/rest/alarm/list", {"history": "true"}).json()["data"]
    assert [(r["alarm name"], r["alarm state"]) for r in history] == [(AlarmKind.STALLED, 0)]
    assert [r["entity"] for r in client.get(
        "/rest/alarm/list", {"type": "cluster"}).json()["data"]] == ["newyork"]
    assert [r["alarm type"] for r in client.get(
        "/rest/alarm/list", {"path": activity.path}).json()["data"]] == ["STREAM"]
    assert client.get("/rest/alarm/list", {"entity": "newyork",
                                           "alarm": "cluster_alarm_gateways_down"}
                      ).json()["total"] == 1
    bad = client.get("/rest/alarm/list", {"alarm": "NODE_ALARM_DISK_FAILURE"}).json()
    assert bad["status"] == "ERROR" and "is not an alarm name" in bad["errors"][0]["desc"]


def test_overview_shows_the_open_alarms_of_your_tenants_only(owner, outsider, activity, raised):
    page = Client()
    page.force_login(owner)
    html = page.get(reverse("overview")).content.decode()
    assert 'id="engine-alarms"' in html and AlarmKind.WAITING_FOR_UPSTREAM.value in html
    page.force_login(outsider)
    html = page.get(reverse("overview")).content.decode()
    assert "No alarms raised." in html and activity.path not in html


def test_admin_lists_alarms_read_only_for_operators(operator, owner, raised):
    client = Client()
    client.force_login(operator)
    listing = client.get(reverse("admin:operations_alarm_changelist"))
    assert listing.status_code == 200 and "/mapr/sanfrancisco/activity" in listing.content.decode()
    assert client.get(reverse("admin:operations_alarm_add")).status_code == 403
    client.force_login(owner)
    assert client.get(reverse("admin:operations_alarm_changelist")).status_code == 302


def test_the_live_alarm_fragment_is_scoped_like_the_overview(owner, outsider, activity, raised):
    page = Client()
    page.force_login(owner)
    fragment = page.get(reverse("overview-alarms")).content.decode()
    assert fragment.lstrip().startswith('<section class="card" id="engine-alarms"')
    assert AlarmKind.WAITING_FOR_UPSTREAM.value in fragment
    page.force_login(outsider)
    assert activity.path not in page.get(reverse("overview-alarms")).content.decode()
    assert Client().get(reverse("overview-alarms")).status_code == 302  # sign in first


def test_an_alarm_says_what_to_do_in_words_and_the_command_line_names_the_command(
        api, owner, activity, raised, cluster_alarm):
    """The domain's description is plain words (it reaches the API and the pages as is); /rest
    and the CLI add the command that clears it, as the pages link the page that does."""
    client = api(owner)
    waiting = client.get(f"/api/v1/alarms/{raised[AlarmKind.WAITING_FOR_UPSTREAM].pk}/").json()
    assert waiting["description"].endswith(": its owner approves it as an upstream")
    rows = {r["alarm name"]: r["description"]
            for r in client.get("/rest/alarm/list").json()["data"]}
    assert rows[AlarmKind.WAITING_FOR_UPSTREAM] == (
        f"{waiting['description']} with 'streamgate stream upstream add -path "
        f"/mapr/newyork/activity -upstream {activity.path}'")
    # No gateway configured on newyork: the command that adds them.
    assert rows[AlarmKind.GATEWAYS_DOWN] == (
        "all down with 'streamgate cluster gateway set -dstcluster newyork -gateways <names>'")
