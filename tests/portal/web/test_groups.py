"""Consumer groups on a stream's page: committed offset and lag per partition and in all,
a Kafka group's live members (as the listener's coordinator publishes them) with the
partitions each is assigned and the group's state, the replicas' copies of the cursors (can
the group fail over), and resetting a group's offsets to earliest, latest, a time or an
offset with consumeperm, audited; the outsider from another tenant sees none of it."""

import re
import time

import pytest
from django.utils import timezone

from operations.models import AuditEvent
from replication.engine.store import Record
from replication.groups.board import Placement, group_key, publish, snapshot
from replication.groups.model import GroupView, MemberView
from replication.models import KafkaGroup, Stream
from replication.services import replica_add, topic_create, upstream_add
from replication.services.cursors import cursor_commit
from replication.services.groups import group_offsets_reset
from replication.services.messages import messages_produce
from replication.stores import store_for
from tests.clients import signed_in


@pytest.fixture
def clicks(owner, activity):
    topic_create(actor=owner, stream=activity, name="clicks", partitions=2)
    for partition in (0, 1):
        messages_produce(actor=owner, stream=activity, topic="clicks",
                         records=[Record(f"m{i}".encode(), partition=partition)
                                  for i in range(10)])
    return "clicks"


def group_block(page: str, group: str) -> str:
    return re.search(rf'<article class="group" data-group="{group}">.*?</article>', page,
                     re.S).group(0)


def test_groups_tab_shows_committed_offsets_and_lag_per_partition_and_in_all(
        owner, activity, clicks):
    cursor_commit(actor=owner, stream=activity, group="billing", topic="clicks", partition=0,
                  offset=4)
    cursor_commit(actor=owner, stream=activity, group="billing", topic="clicks", partition=1,
                  offset=10)
    page = signed_in(owner).get(f"/streams/{activity.pk}/groups/").content.decode()
    block = group_block(page, "billing")
    assert 'data-field="total-lag">6 msgs behind<' in block
    p0 = re.search(r'data-partition="clicks:0".*?</tr>', block, re.S).group(0)
    assert 'data-field="committed">4<' in p0 and 'data-field="lag">6<' in p0
    p1 = re.search(r'data-partition="clicks:1".*?</tr>', block, re.S).group(0)
    assert 'data-field="lag">0<' in p1
    assert 'data-members="none"' in block and "Members: none live" in block
    assert 'aria-current="page">Consumer groups<' in page


def test_groups_tab_shows_the_replicas_cursors_and_whether_the_group_can_fail_over(
        owner, activity, activity_ny, clicks):
    replica_add(actor=owner, source=activity, replica=activity_ny)
    upstream_add(actor=owner, replica=activity_ny, source=activity)
    cursor_commit(actor=owner, stream=activity, group="billing", topic="clicks", partition=0,
                  offset=4)
    page = signed_in(owner).get(f"/streams/{activity.pk}/groups/").content.decode()
    block = group_block(page, "billing")
    assert "Not yet</span> to <code>/mapr/newyork/activity</code>: its cursors are 4 msgs" in block
    assert "none yet" in block
    # the cursor as the replicator leaves it on the replica once it has caught up
    store = store_for(activity_ny.cluster)
    store.ensure_topic(activity_ny.uuid, "clicks", 2)
    store.commit_cursor(activity_ny.uuid, "billing", "clicks", 0, 4)
    page = signed_in(owner).get(f"/streams/{activity.pk}/groups/").content.decode()
    assert "Can fail over</span> to <code>/mapr/newyork/activity</code>" in group_block(
        page, "billing")


@pytest.mark.parametrize(("to", "extra", "expected"), [
    ("earliest", {}, {0: 0, 1: 0}),
    ("latest", {}, {0: 10, 1: 10}),
    ("offset", {"offset": "3"}, {0: 3, 1: 3}),
])
def test_reset_offsets_from_the_form_moves_every_partition_and_is_audited(
        owner, activity, clicks, to, extra, expected):
    cursor_commit(actor=owner, stream=activity, group="billing", topic="clicks", partition=0,
                  offset=5)
    response = signed_in(owner).post(f"/streams/{activity.pk}/groups/", {
        "group": "billing", "topic": "clicks", "to": to, "action": "apply", **extra})
    assert response.status_code == 302
    store = store_for(activity.cluster)
    assert {p: store.fetch_cursor(activity.uuid, "billing", "clicks", p)
            for p in (0, 1)} == expected
    event = AuditEvent.objects.get(action="reset")
    assert event.object_repr == activity.path and event.actor_name == "alice"
    assert event.before["offsets"] == {"0": 5, "1": None}
    assert event.after["offsets"] == {str(p): o for p, o in expected.items()}
    assert event.after["group"] == "billing" and event.interface == "web"


def test_reset_to_a_time_finds_the_first_message_at_or_after_it(owner, activity):
    topic_create(actor=owner, stream=activity, name="clicks", partitions=1)
    base = int(time.time() * 1000) - 100_000
    messages_produce(actor=owner, stream=activity, topic="clicks", records=[
        Record(b"x", timestamp_ms=base + i * 1000) for i in range(10)])
    moved = group_offsets_reset(actor=owner, stream=activity, group="g", topic="clicks",
                                to="timestamp", timestamp_ms=base + 6500)
    assert [(r.partition, r.new) for r in moved] == [(0, 7)]
    moved = group_offsets_reset(actor=owner, stream=activity, group="g", topic="clicks",
                                to="timestamp", timestamp_ms=base + 10**9)
    assert [(r.partition, r.new) for r in moved] == [(0, 10)]


def test_reset_form_shows_a_bad_offset_beside_the_field_and_keeps_the_input(owner, activity,
                                                                          clicks):
    response = signed_in(owner).post(f"/streams/{activity.pk}/groups/", {
        "group": "billing", "topic": "clicks", "to": "offset", "offset": "99"})
    assert response.status_code == 400
    page = response.content.decode()
    error = re.search(r'id="err-offset" role="alert">([^<]+)<', page).group(1)
    assert "outside what the topic holds" in error and "0 to 10" in error
    assert 'name="group" list="group-names" value="billing"' in page
    assert 'value="99"' in page and 'value="offset" checked' in page
    assert store_for(activity.cluster).fetch_cursor(activity.uuid, "billing", "clicks", 0) is None
    assert not AuditEvent.objects.filter(action="reset").exists()


def test_reset_needs_consumeperm(member, activity, clicks):
    response = signed_in(member).post(f"/streams/{activity.pk}/groups/", {
        "group": "billing", "topic": "clicks", "to": "earliest", "action": "apply"})
    assert response.status_code == 400
    assert "may not reset consumer group offsets" in response.content.decode()
    assert store_for(activity.cluster).fetch_cursor(activity.uuid, "billing", "clicks", 0) is None


def test_another_tenant_sees_no_groups(outsider, owner, activity, clicks):
    cursor_commit(actor=owner, stream=activity, group="billing", topic="clicks", partition=0,
                  offset=1)
    client = signed_in(outsider)
    assert client.get(f"/streams/{activity.pk}/groups/").status_code == 404
    for action in ("preview", "apply"):
        assert client.post(f"/streams/{activity.pk}/groups/", {
            "group": "billing", "topic": "clicks", "to": "latest",
            "action": action}).status_code == 404
    assert store_for(activity.cluster).fetch_cursor(activity.uuid, "billing", "clicks", 0) == 1


def publish_group(stream, tenant_id: int, group: str = "billing",
                  state: str = "Stable") -> None:
    """The group as the listener's board writes it: the coordinator's view and each member's
    placements, through board.publish (a KafkaGroup row with its TTL)."""
    members = [MemberView("m-1", None, "app-1", "/10.0.0.1", b"", b""),
               MemberView("m-2", None, "app-2", "/10.0.0.2", b"", b""),
               MemberView("m-3", None, "app-3", "/10.0.0.3", b"", b"")]
    view = GroupView(group, state, 4, "consumer", "range", "m-1", members)
    publish(group_key(tenant_id, group), snapshot(view, {
        "m-1": [Placement(str(stream.uuid), stream.path, "clicks", 0, "clicks")],
        "m-2": [Placement(str(stream.uuid), stream.path, "clicks", 1, "clicks"),
                Placement("another-stream", "/mapr/x/y", "other", 0, "other")],
    }))


def member_row(block: str, member: str) -> str:
    return re.search(rf'<tr data-member="{member}">.*?</tr>', block, re.S).group(0)


def test_groups_tab_shows_live_members_their_partitions_and_the_group_state(
        owner, activity, clicks):
    cursor_commit(actor=owner, stream=activity, group="billing", topic="clicks", partition=0,
                  offset=4)
    publish_group(activity, activity.tenant_id, state="PreparingRebalance")
    block = group_block(signed_in(owner).get(f"/streams/{activity.pk}/groups/")
                        .content.decode(), "billing")
    assert 'data-field="state">PreparingRebalance<' in block
    assert 'data-field="total-lag">6 msgs behind<' in block  # the offsets stay beside
    m1 = member_row(block, "m-1")
    assert "(leader)" in m1 and 'data-field="client-id">app-1<' in m1
    assert 'data-field="host">/10.0.0.1<' in m1 and 'data-field="assigned">clicks:0<' in m1
    # another stream's partition of the same member is not this stream's business
    assert 'data-field="assigned">clicks:1<' in member_row(block, "m-2")
    assert "none yet" in member_row(block, "m-3")  # joined, not yet assigned
    p0 = re.search(r'data-partition="clicks:0".*?</tr>', block, re.S).group(0)
    assert 'data-field="owner">app-1<' in p0
    assert "other" not in block


def test_a_live_group_that_committed_nothing_yet_shows_its_members(owner, activity, clicks):
    publish_group(activity, activity.tenant_id, group="fresh")
    block = group_block(signed_in(owner).get(f"/streams/{activity.pk}/groups/")
                        .content.decode(), "fresh")
    assert 'data-field="state">Stable<' in block and 'data-member="m-2"' in block
    assert "No offset committed yet." in block and "total-lag" not in block


def test_expired_and_other_streams_groups_are_not_shown(owner, activity, activity_ny,
                                                        clicks):
    publish_group(activity, activity.tenant_id, group="gone")
    KafkaGroup.objects.filter(group_id="gone").update(expires=timezone.now())
    publish_group(activity_ny, activity.tenant_id, group="elsewhere")
    page = signed_in(owner).get(f"/streams/{activity.pk}/groups/").content.decode()
    assert 'data-group="gone"' not in page and 'data-group="elsewhere"' not in page
    assert 'id="no-groups"' in page


def test_another_tenant_sees_no_members_and_its_groups_never_show_here(
        outsider, owner, activity, clicks):
    publish_group(activity, activity.tenant_id, group="billing")
    assert signed_in(outsider).get(f"/streams/{activity.pk}/groups/").status_code == 404
    # a group of globex's whose placements name this stream's uuid stays globex's
    publish_group(activity, outsider.memberships.get().tenant_id, group="globex-spy")
    page = signed_in(owner).get(f"/streams/{activity.pk}/groups/").content.decode()
    assert 'data-group="billing"' in page and 'data-group="globex-spy"' not in page


# -- the tenant's groups, across its streams ----------------------------------------------------

def tenant_row(page: str, group: str) -> str:
    return re.search(rf'<tr data-group="{group}">.*?</tr>', page, re.S).group(0)


def test_the_groups_page_lists_every_group_of_the_tenant_the_most_behind_first(
        owner, outsider, activity, activity_ny, clicks):
    topic_create(actor=owner, stream=activity_ny, name="views", partitions=1)
    messages_produce(actor=owner, stream=activity_ny, topic="views",
                     records=[Record(b"v") for _ in range(7)])
    cursor_commit(actor=owner, stream=activity, group="billing", topic="clicks", partition=0,
                  offset=8)  # 2 behind on clicks:0, 10 on clicks:1 (nothing committed there)
    cursor_commit(actor=owner, stream=activity_ny, group="billing", topic="views", partition=0,
                  offset=2)  # 5 behind
    cursor_commit(actor=owner, stream=activity, group="audit", topic="clicks", partition=1,
                  offset=9)  # 1 behind
    publish_group(activity, activity.tenant_id, group="fresh")  # live, nothing committed
    page = signed_in(owner).get("/groups/").content.decode()
    assert 'href="/groups/"' in page  # in the navigation
    order = re.findall(r'<tr data-group="([^"]+)">', page)
    assert order == ["billing", "audit", "fresh"]
    billing = tenant_row(page, "billing")
    assert 'data-field="lag">7<' in billing  # 2 on activity (one partition committed) + 5
    assert f'href="/streams/{activity.pk}/groups/"' in billing and "(2)" in billing
    assert f'href="/streams/{activity_ny.pk}/groups/"' in billing and "(5)" in billing
    fresh = tenant_row(page, "fresh")
    assert 'data-label="State">Stable<' in fresh and 'data-label="Members">3<' in fresh
    assert "nothing committed yet" in fresh
    theirs = signed_in(outsider).get("/groups/").content.decode()
    assert 'data-group="' not in theirs and "No consumer groups yet" in theirs


# -- offset resets: previewed first, per partition, refused while the group is live ------------

def preview_rows(page: str) -> dict[int, tuple[str, str, str]]:
    block = re.search(r'<div id="reset-preview">.*?</table>', page, re.S).group(0)
    return {int(p): (current, new, lag) for p, current, new, lag in re.findall(
        r'<tr data-partition="(\d+)">.*?data-field="current">(.*?)</td>.*?'
        r'data-field="new">(\d+)</td>.*?data-field="lag">(\d+)</td>', block, re.S)}


def test_a_reset_is_previewed_with_the_new_offsets_and_lag_and_changes_nothing(
        owner, activity, clicks):
    cursor_commit(actor=owner, stream=activity, group="billing", topic="clicks", partition=0,
                  offset=8)
    response = signed_in(owner).post(f"/streams/{activity.pk}/groups/", {
        "group": "billing", "topic": "clicks", "to": "offset", "offset": "3"})
    assert response.status_code == 200
    page = response.content.decode()
    assert preview_rows(page) == {0: ("8", "3", "7"), 1: ('<span class="muted">none</span>',
                                                          "3", "7")}
    assert 'name="action" value="apply"' in page and 'name="offset" value="3"' in page
    store = store_for(activity.cluster)
    assert store.fetch_cursor(activity.uuid, "billing", "clicks", 0) == 8
    assert store.fetch_cursor(activity.uuid, "billing", "clicks", 1) is None
    assert not AuditEvent.objects.filter(action="reset").exists()


def test_a_reset_of_one_partition_moves_that_partition_only(owner, activity, clicks):
    for partition in (0, 1):
        cursor_commit(actor=owner, stream=activity, group="billing", topic="clicks",
                      partition=partition, offset=5)
    client = signed_in(owner)
    data = {"group": "billing", "topic": "clicks", "partition": "1", "to": "earliest"}
    assert list(preview_rows(client.post(f"/streams/{activity.pk}/groups/", data)
                             .content.decode())) == [1]
    response = client.post(f"/streams/{activity.pk}/groups/", {**data, "action": "apply"})
    assert response.status_code == 302
    store = store_for(activity.cluster)
    assert [store.fetch_cursor(activity.uuid, "billing", "clicks", p) for p in (0, 1)] == [5, 0]
    assert AuditEvent.objects.get(action="reset").after["offsets"] == {"1": 0}


def test_a_partition_the_topic_lacks_is_refused_beside_the_field(owner, activity, clicks):
    response = signed_in(owner).post(f"/streams/{activity.pk}/groups/", {
        "group": "billing", "topic": "clicks", "partition": "7", "to": "earliest",
        "action": "apply"})
    assert response.status_code == 400
    error = re.search(r'id="err-partition" role="alert">([^<]+)<', response.content.decode())
    assert "partitions 0 to 1, not 7" in error.group(1)
    assert store_for(activity.cluster).fetch_cursor(activity.uuid, "billing", "clicks", 0) is None


@pytest.mark.parametrize("action", ["preview", "apply"])
def test_a_group_with_live_members_is_refused_until_it_is_inactive(owner, activity, clicks,
                                                                    action):
    cursor_commit(actor=owner, stream=activity, group="billing", topic="clicks", partition=0,
                  offset=5)
    publish_group(activity, activity.tenant_id, group="billing")
    data = {"group": "billing", "topic": "clicks", "to": "earliest", "action": action}
    response = signed_in(owner).post(f"/streams/{activity.pk}/groups/", data)
    assert response.status_code == 400
    error = re.search(r'id="err-group" role="alert">([^<]+)<', response.content.decode())
    assert "group billing has 3 live members (state Stable)" in error.group(1)
    assert "stop its consumers" in error.group(1)
    assert 'id="reset-preview"' not in response.content.decode()
    store = store_for(activity.cluster)
    assert store.fetch_cursor(activity.uuid, "billing", "clicks", 0) == 5
    KafkaGroup.objects.filter(group_id="billing").update(expires=timezone.now())  # gone
    response = signed_in(owner).post(f"/streams/{activity.pk}/groups/", data)
    assert response.status_code == (200 if action == "preview" else 302)
    assert store.fetch_cursor(activity.uuid, "billing", "clicks", 0) == (
        5 if action == "preview" else 0)


def test_the_groups_page_links_each_stream_to_its_reset_form_with_the_group_filled(
        owner, activity, clicks):
    cursor_commit(actor=owner, stream=activity, group="billing", topic="clicks", partition=0,
                  offset=8)
    client = signed_in(owner)
    row = tenant_row(client.get("/groups/").content.decode(), "billing")
    link = f"/streams/{activity.pk}/groups/?group=billing#reset-offsets"
    assert f'href="{link}"' in row
    page = client.get(link.split("#")[0]).content.decode()
    assert 'name="group" list="group-names" value="billing"' in page


def test_the_groups_page_queries_do_not_grow_with_the_tenants_streams(
        owner, activity, sanfrancisco, clicks, django_assert_max_num_queries, monkeypatch):
    """Issue 34: 200 more streams without cursors add no query (the streams are read once,
    the clusters once, and only a stream with cursors is read further). The caches that are
    read again after a second or two (authorization, placement) are kept for the test: on a
    loaded machine the requests can be further apart than that, and that is not a stream."""
    from replication import grants, placement

    monkeypatch.setattr(grants, "GRANT_SECONDS", 60.0)
    monkeypatch.setattr(placement, "REFRESH_SECONDS", 60.0)
    cursor_commit(actor=owner, stream=activity, group="billing", topic="clicks", partition=0,
                  offset=8)
    client = signed_in(owner)
    client.get("/groups/")  # the session and the caches warm
    with django_assert_max_num_queries(20) as few:
        client.get("/groups/")
    Stream.objects.bulk_create(
        Stream(path=f"/mapr/{sanfrancisco.name}/s{i:03d}", cluster=sanfrancisco,
               name=f"s{i:03d}", tenant=activity.tenant, created_by=owner,
               adminperm="u:alice") for i in range(200))
    with django_assert_max_num_queries(len(few.captured_queries)):
        page = client.get("/groups/").content.decode()
    billing = tenant_row(page, "billing")
    assert 'data-field="lag">2<' in billing  # clicks:0, the one partition committed
    assert f'href="/streams/{activity.pk}/groups/"' in billing and "/s000/" not in page
