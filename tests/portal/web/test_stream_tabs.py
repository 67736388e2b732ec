"""The stream page's tabs: each its own URL (so linkable and working without JavaScript) in an
ARIA tablist, the overview leading with the stream's health and what needs attention, each
other part on its tab; another tenant gets none of them."""

import re

import pytest

from operations.models import Alarm, AlarmKind
from replication.models import ReplicaLink
from tests.clients import signed_in

pytestmark = pytest.mark.django_db

TABS = {"": "Overview", "topics/": "Topics", "replication/": "Replication",
        "groups/": "Consumer groups", "messages/": "Messages", "settings/": "Settings",
        "access/": "Access"}


@pytest.mark.parametrize("tab", list(TABS))
def test_every_tab_has_its_own_url_and_is_the_selected_tab_there(owner, activity, tab):
    page = signed_in(owner).get(f"/streams/{activity.pk}/{tab}").content.decode()
    tablist = re.search(r'<div class="tabs" role="tablist".*?</div>', page, re.S).group(0)
    tabs = re.findall(r'<a role="tab" id="tab-\w+" href="([^"]+)" aria-selected="(\w+)"',
                      tablist)
    assert [href for href, _ in tabs] == [f"/streams/{activity.pk}/{t}" for t in TABS]
    assert [selected for _, selected in tabs].count("true") == 1
    assert f'aria-selected="true" aria-current="page">{TABS[tab]}</a>' in tablist
    assert "js/tabs.js" in page


def test_the_overview_leads_with_health_and_what_needs_attention(owner, activity, agreed):
    client = signed_in(owner)
    page = client.get(f"/streams/{activity.pk}/").content.decode()
    assert 'id="attention-none"' in page
    assert page.index('id="health-title"') < page.index('id="replicas"')
    assert 'id="lag-charts"' in page and "data-throughput-url" in page
    ReplicaLink.objects.filter(pk=agreed.pk).update(last_error="gateway gw1: connection refused")
    Alarm.objects.create(kind=AlarmKind.STALLED, key=f"link:{agreed.pk}", link=agreed,
                         entity=f"{activity.path} -> /mapr/newyork/activity",
                         description="no progress for 5 min")
    page = client.get(f"/streams/{activity.pk}/").content.decode()
    items = re.search(r'<ul class="attention" id="attention">(.*?)</ul>', page, re.S).group(1)
    assert "no progress for 5 min" in items
    assert "/mapr/newyork/activity: broken</strong>: gateway gw1: connection refused" in items


def test_a_diverged_replica_needs_attention_with_a_way_to_repair(owner, activity, agreed):
    ReplicaLink.objects.filter(pk=agreed.pk).update(verify_error="partition 1 offset 4 differs")
    page = signed_in(owner).get(f"/streams/{activity.pk}/").content.decode()
    item = re.search(r'id="attention">(.*?)</ul>', page, re.S).group(1)
    assert "differs from its source</strong>: partition 1 offset 4 differs" in item
    assert f'href="/streams/{activity.pk}/replication/#verification"' in item


def test_each_part_is_on_its_own_tab(owner, activity, agreed):
    client = signed_in(owner)
    overview = client.get(f"/streams/{activity.pk}/").content.decode()
    assert 'id="stream-info"' not in overview and 'id="edit-aces"' not in overview
    assert 'id="stream-info"' in client.get(f"/streams/{activity.pk}/settings/").content.decode()
    assert 'id="edit-aces"' in client.get(f"/streams/{activity.pk}/access/").content.decode()
    replication = client.get(f"/streams/{activity.pk}/replication/").content.decode()
    assert 'id="add-replica"' in replication and 'id="verification"' in replication


def test_a_refused_replica_is_shown_on_the_replication_tab_and_a_registered_one_on_the_overview(
        owner, activity, activity_ny):
    client = signed_in(owner)
    response = client.post(f"/streams/{activity.pk}/replicas/add/", {"replica": "nowhere"})
    assert response.status_code == 400
    assert 'aria-current="page">Replication<' in response.content.decode()
    response = client.post(f"/streams/{activity.pk}/replicas/add/",
                           {"replica": activity_ny.path})
    assert response["Location"] == f"/streams/{activity.pk}/"


@pytest.mark.parametrize("tab", list(TABS))
def test_another_tenant_gets_no_tab(outsider, activity, tab):
    assert signed_in(outsider).get(f"/streams/{activity.pk}/{tab}").status_code == 404


def held(page: str, table: str) -> dict[str, str]:
    block = re.search(rf'<table class="stack" id="{table}">.*?</table>', page, re.S).group(0)
    return dict(re.findall(r'<tr data-perm="(\w+)">.*?data-field="held">(\w+)<', block, re.S))


def test_the_access_tab_checks_who_may_do_what(owner, member, outsider, activity):
    from replication.services import stream_edit

    stream_edit(actor=owner, stream=activity, consumeperm="u:alice | u:bob")
    client = signed_in(owner)
    page = client.get(f"/streams/{activity.pk}/access/").content.decode()
    assert set(held(page, "perms-mine").values()) == {"yes"}
    page = client.get(f"/streams/{activity.pk}/access/", {"who": "bob"}).content.decode()
    assert held(page, "perms-theirs") == {"produceperm": "no", "consumeperm": "yes",
                                          "topicperm": "no", "copyperm": "no",
                                          "adminperm": "no"}
    # another tenant's user is not this tenant's to confirm
    page = client.get(f"/streams/{activity.pk}/access/", {"who": "mallory"}).content.decode()
    assert "acme has no member called mallory" in page and 'id="perms-theirs"' not in page
    # bob, no admin, sees what he may do, and checks nobody else
    page = signed_in(member).get(f"/streams/{activity.pk}/access/",
                                 {"who": "alice"}).content.decode()
    assert held(page, "perms-mine")["consumeperm"] == "yes"
    assert held(page, "perms-mine")["adminperm"] == "no"
    assert 'id="who-check"' not in page and 'id="perms-theirs"' not in page


def test_the_settings_tab_changes_the_streams_settings_audited(owner, member, activity):
    from operations.models import AuditEvent

    client = signed_in(owner)
    response = client.post(f"/streams/{activity.pk}/settings/edit/", {
        "ttl": "3600", "defaultpartitions": "4", "compression": "lz4",
        "defaulttimestamptype": "logappendtime"})
    assert response.status_code == 302
    assert response["Location"] == f"/streams/{activity.pk}/settings/"
    activity.refresh_from_db()
    assert (activity.ttl, activity.defaultpartitions, activity.compression,
            activity.autocreate, activity.defaulttimestamptype) == (
        3600, 4, "lz4", False, "logappendtime")
    event = AuditEvent.objects.filter(object_type="stream", action="edit").latest("pk")
    assert event.interface == "web" and event.after["ttl"] == 3600
    # bad input beside its field, nothing changed; no form and a refusal without adminperm
    response = client.post(f"/streams/{activity.pk}/settings/edit/", {
        "ttl": "an hour", "defaultpartitions": "4", "compression": "lz4",
        "defaulttimestamptype": "createtime"})
    assert response.status_code == 400
    assert re.search(r'id="err-ttl" role="alert">the time messages are kept is a whole number',
                     response.content.decode())
    response = client.post(f"/streams/{activity.pk}/settings/edit/", {
        "ttl": "0", "defaultpartitions": "0", "compression": "lz4",
        "defaulttimestamptype": "createtime"})
    assert re.search(r'id="err-defaultpartitions" role="alert">', response.content.decode())
    page = signed_in(member).get(f"/streams/{activity.pk}/settings/").content.decode()
    assert 'id="edit-settings"' not in page
    response = signed_in(member).post(f"/streams/{activity.pk}/settings/edit/", {
        "ttl": "1", "defaultpartitions": "1", "compression": "off",
        "defaulttimestamptype": "createtime"})
    assert response.status_code == 400 and "needs adminperm" in response.content.decode()
    activity.refresh_from_db()
    assert (activity.ttl, activity.defaultpartitions) == (3600, 4)
