"""The audit trail: every control-plane change recorded with who, tenant, what, before/after,
when and the interface, whichever path made it; browsable through the API, /rest, the admin
site and a page, each scoped by tenant (operators see all, outsiders nothing of others)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from accounts.models import Role
from operations.audit import audit_context
from operations.models import AuditEvent
from replication import services
from replication.models import Gateway, ReplicaLink, Stream
from replication.services.gateway_status import gateway_flush
from replication.services.linknotes import link_error, link_progress
from tests.factories import GatewayFactory, MembershipFactory
from workers.celery import app

pytestmark = pytest.mark.django_db
SF = "/mapr/sanfrancisco/activity"


def last(**filters) -> AuditEvent:  # type: ignore[no-untyped-def]
    return AuditEvent.objects.filter(**filters).order_by("-pk").first()


def test_api_changes_are_recorded_with_actor_tenant_interface_and_the_changed_fields(
        api, owner, sanfrancisco):
    client = api(owner)
    created = client.post("/api/v1/streams/", {"path": SF, "ttl": 3600}, format="json")
    assert created.status_code == 201, created.json()
    uuid = created.json()["uuid"]
    event = last(object_type="stream")
    stream = Stream.objects.get(path=SF)
    assert (event.action, event.interface, event.actor_id, event.actor_name) == (
        "create", "api", owner.pk, "alice")
    assert (event.tenant_id, event.tenant_name) == (stream.tenant_id, "acme")
    assert (event.object_id, event.object_repr) == (str(stream.pk), SF)
    assert event.before is None and event.after["ttl"] == 3600 and event.after["path"] == SF

    assert client.patch(f"/api/v1/streams/{uuid}/", {"ttl": 60}, format="json").status_code == 200
    event = last(object_type="stream")
    assert (event.action, event.before, event.after) == ("edit", {"ttl": 3600}, {"ttl": 60})

    assert client.delete(f"/api/v1/streams/{uuid}/").status_code == 204
    event = last(object_type="stream")
    assert event.action == "delete" and event.after is None and event.before["path"] == SF


def test_pause_resume_and_approve_are_named_as_such(api, owner, activity, activity_ny):
    client = api(owner)
    services.replica_add(actor=owner, source=activity, replica=activity_ny)
    response = client.post(f"/api/v1/streams/{activity_ny.uuid}/upstreams/",
                           {"upstream": activity.path}, format="json")
    assert response.status_code == 201
    approve = last(object_type="upstream")
    assert (approve.action, approve.interface, approve.actor_name) == ("approve", "api", "alice")
    assert approve.object_repr == f"{activity.path} -> {activity_ny.path}"

    base = f"/api/v1/streams/{activity.uuid}/replicas/{activity_ny.uuid}"
    assert client.post(f"{base}/pause/").status_code == 200
    pause = last(object_type="replicalink")
    assert (pause.action, pause.before, pause.after) == ("pause", {"paused": False},
                                                         {"paused": True})
    assert client.post(f"{base}/resume/").status_code == 200
    assert last(object_type="replicalink").action == "resume"


def test_an_upstream_added_before_its_link_is_a_create(owner, activity, activity_ny):
    services.upstream_add(actor=owner, replica=activity_ny, source=activity)
    assert last(object_type="upstream").action == "create"


def test_rest_changes_are_recorded_as_the_rest_interface(api, owner, sanfrancisco):
    response = api(owner).post(f"/rest/stream/create?path={SF}")
    assert response.json()["status"] == "OK"
    event = last(object_type="stream")
    assert (event.interface, event.actor_name, event.action) == ("rest", "alice", "create")


def test_web_changes_are_recorded_as_the_web_interface(owner, activity, activity_ny):
    link = services.replica_add(actor=owner, source=activity, replica=activity_ny)
    client = Client()
    client.force_login(owner)
    target = reverse("replica-action", args=[activity.pk, link.pk, "pause"])
    assert client.post(target).status_code in (200, 302)
    event = last(object_type="replicalink")
    assert (event.interface, event.actor_name, event.action) == ("web", "alice", "pause")


def test_admin_changes_are_recorded_as_the_admin_interface(operator):
    client = Client()
    client.force_login(operator)
    response = client.post(reverse("admin:replication_cluster_add"),
                           {"name": "tokyo", "store_url": "", "state": "ONLINE",
                            "gateways-TOTAL_FORMS": "0", "gateways-INITIAL_FORMS": "0"})
    assert response.status_code == 302, response.content.decode()[:2000]
    event = last(object_type="cluster")
    assert (event.interface, event.actor_name, event.action) == ("admin", "ops", "create")
    assert event.tenant_id is None and event.after["name"] == "tokyo"


def test_changes_outside_a_request_are_the_systems(owner, activity):
    services.stream_edit(actor=owner, stream=activity, ttl=10)
    event = last(object_type="stream")
    assert (event.interface, event.actor_id, event.actor_name) == ("system", None, "")


def test_a_celery_task_run_inside_a_request_is_audited_as_the_system(rf, owner, activity):
    @app.task(name="tests.operations.edit_ttl_task")
    def edit_ttl_task(stream_id: int) -> None:
        stream = Stream.objects.get(pk=stream_id)
        stream.ttl = 99
        stream.save()

    request = rf.post("/api/v1/streams/")
    request.user = owner
    with audit_context("api", request):
        edit_ttl_task.apply(args=[activity.pk])
        services.stream_edit(actor=owner, stream=activity, ttl=5)
    task_event, request_event = AuditEvent.objects.filter(object_type="stream",
                                                          action="edit").order_by("pk")
    assert (task_event.interface, task_event.actor_name, task_event.after) == (
        "system", "", {"ttl": 99})
    assert (request_event.interface, request_event.actor_name) == ("api", "alice")


def test_memberships_topics_and_gateways_are_recorded(operator, owner, activity, newyork):
    membership = MembershipFactory(user__username="carol", tenant=activity.tenant)
    assert last(object_type="membership").object_repr == "carol in acme (member)"
    assert last(object_type="membership").tenant_id == membership.tenant_id
    services.topic_create(actor=owner, stream=activity, name="clicks", partitions=2)
    topic = last(object_type="topic")
    assert topic.object_repr == f"{activity.path}:clicks" and topic.after["partitions"] == 2
    services.cluster_gateway_set(actor=operator, dstcluster="newyork", gateways="gw1 gw2")
    assert sorted(AuditEvent.objects.filter(object_type="gateway", action="create")
                  .values_list("object_repr", flat=True)) == ["gw1@newyork", "gw2@newyork"]


def test_engine_runtime_updates_are_not_control_plane_changes(owner, activity, activity_ny,
                                                              newyork):
    link = services.replica_add(actor=owner, source=activity, replica=activity_ny)
    GatewayFactory(cluster=newyork, name="gw1")
    before = AuditEvent.objects.count()
    link_error(link_id=link.pk, error="boom")
    link_progress(link_ids=[link.pk])
    gateway_flush(cluster="newyork", name="gw1", batches=3, messages=30)
    gateway = Gateway.objects.get(name="gw1")
    gateway.announced_status = "UP"
    gateway.save()
    link = ReplicaLink.objects.get(pk=link.pk)
    link.copy_percentage = 50
    link.save()
    assert AuditEvent.objects.count() == before


def test_the_record_outlives_the_user_and_the_object(api, owner, activity):
    services.stream_delete(actor=owner, stream=activity)
    get_user_model().objects.filter(pk=owner.pk).delete()
    event = last(object_type="stream", action="delete")
    assert event.before["path"] == activity.path
    operator = get_user_model().objects.create(username="ops2", is_staff=True)
    rows = api(operator).get("/api/v1/audit/", {"object_type": "stream"}).json()["results"]
    assert rows[0]["object"] == activity.path


def test_the_request_id_ties_the_record_to_the_log_line(api, owner, sanfrancisco):
    response = api(owner).post("/api/v1/streams/", {"path": SF}, format="json",
                               HTTP_X_REQUEST_ID="req-42")
    assert response["X-Request-ID"] == "req-42"
    assert last(object_type="stream").request_id == "req-42"


# --- browsing, by tenant ----------------------------------------------------------------------


@pytest.fixture
def trail(owner, outsider, operator, activity, newyork):
    services.stream_edit(actor=owner, stream=activity, ttl=123)
    services.cluster_gateway_set(actor=operator, dstcluster="newyork", gateways="gw1")
    return last(object_type="stream")


def test_api_lists_a_tenants_changes_to_its_members_and_everything_to_operators(
        api, owner, operator, trail):
    mine = api(owner).get("/api/v1/audit/").json()["results"]
    assert trail.pk in {row["id"] for row in mine}
    assert all(row["tenant"] == "acme" for row in mine)  # no cluster or gateway rows
    everything = api(operator).get("/api/v1/audit/", {"object_type": "gateway"}).json()
    assert [row["object"] for row in everything["results"]] == ["gw1@newyork"]
    row = api(owner).get(f"/api/v1/audit/{trail.pk}/").json()
    assert (row["action"], row["before"], row["after"]) == ("edit", {"ttl": 604800},
                                                            {"ttl": 123})


def test_outsider_sees_nothing_of_another_tenants_trail(api, outsider, trail, activity):
    client = api(outsider)
    body = client.get("/api/v1/audit/").content.decode()
    assert activity.path not in body and "acme" not in body
    assert client.get(f"/api/v1/audit/{trail.pk}/").status_code == 404
    response = client.get("/rest/audit/list", {"path": activity.path})
    assert response.status_code == 404 and response.json()["errors"][0]["id"] == 2
    assert activity.path not in client.get("/rest/audit/list").content.decode()
    page = Client()
    page.force_login(outsider)
    assert activity.path not in page.get(reverse("audit")).content.decode()


def test_a_viewer_reads_no_ace_of_the_trail_through_any_interface(api, owner, activity):
    # `stream info` shows a stream's ACEs to holders of its adminperm only; so does the trail.
    secret = "u:alice | g:payroll-admins"
    services.stream_edit(actor=owner, stream=activity, produceperm=secret, ttl=99)
    viewer = MembershipFactory(user__username="bob", tenant=activity.tenant,
                               role=Role.VIEWER).user
    client, page = api(viewer), Client()
    page.force_login(viewer)
    shown = [client.get("/api/v1/audit/").content.decode(),
             client.get("/rest/audit/list", {"path": activity.path}).content.decode(),
             page.get(reverse("audit")).content.decode()]
    for body in shown:
        assert "payroll-admins" not in body and "produceperm" not in body
        assert "99" in body  # the rest of the change is there
    edit = last(object_type="stream", action="edit")
    assert client.get(f"/api/v1/audit/{edit.pk}/").json()["after"] == {"ttl": 99}
    # The stream's administrator still reads them.
    assert api(owner).get(f"/api/v1/audit/{edit.pk}/").json()["after"]["produceperm"] == secret
    assert AuditEvent.objects.get(pk=edit.pk).after["produceperm"] == secret  # nothing saved


def test_api_audit_is_read_only(api, owner, trail):
    client = api(owner)
    assert client.post("/api/v1/audit/", {}, format="json").status_code == 405
    assert client.delete(f"/api/v1/audit/{trail.pk}/").status_code == 405


def test_rest_audit_list_filters_by_path_type_action_and_user(api, owner, trail, activity):
    client = api(owner)
    rows = client.get("/rest/audit/list", {"path": activity.path, "action": "edit"}).json()
    assert [(r["object"], r["user"], r["before"], r["after"]) for r in rows["data"]] == [
        (activity.path, "system", {"ttl": 604800}, {"ttl": 123})]
    assert client.get("/rest/audit/list", {"user": "nobody"}).json()["data"] == []
    bad = client.get("/rest/audit/list", {"type": "volume"}).json()
    assert bad["status"] == "ERROR" and "-type" in bad["errors"][0]["desc"]


def test_audit_page_lists_changes_and_filters(owner, trail, activity):
    client = Client()
    client.force_login(owner)
    page = client.get(reverse("audit"), {"action": "edit"}).content.decode()
    assert activity.path in page and "{&quot;ttl&quot;: 123}" in page
    assert "gw1@newyork" not in page


def test_audit_pages_keep_the_filter(owner, activity):
    for ttl in range(1, 56):  # 55 edits: two pages of 50
        services.stream_edit(actor=owner, stream=activity, ttl=ttl)
    services.stream_edit(actor=owner, stream=activity, compression="off")
    client = Client()
    client.force_login(owner)
    first = client.get(reverse("audit"), {"action": "edit"}).content.decode()
    assert '<a href="?action=edit&amp;page=2">older</a>' in first
    second = client.get(reverse("audit"), {"action": "edit", "page": 2}).content.decode()
    assert '<a href="?action=edit&amp;page=1">newer</a>' in second and "page 2 of 2" in second


def test_admin_shows_the_trail_read_only(operator, owner, trail):
    client = Client()
    client.force_login(operator)
    assert client.get(reverse("admin:operations_auditevent_changelist")).status_code == 200
    change = reverse("admin:operations_auditevent_change", args=[trail.pk])
    assert client.get(change).status_code == 200
    assert client.post(reverse("admin:operations_auditevent_delete", args=[trail.pk]),
                       {"post": "yes"}).status_code == 403
    client.force_login(owner)
    assert client.get(reverse("admin:operations_auditevent_changelist")).status_code == 302


def test_admin_bulk_actions_are_recorded_row_by_row(operator, newyork):
    gateways = [GatewayFactory(cluster=newyork, name=name) for name in ("gw1", "gw2")]
    client = Client()
    client.force_login(operator)
    response = client.post(reverse("admin:replication_gateway_changelist"),
                           {"action": "disable_gateways",
                            "_selected_action": [g.pk for g in gateways]})
    assert response.status_code == 302
    events = AuditEvent.objects.filter(object_type="gateway", action="edit")
    assert sorted((e.object_repr, e.interface, e.actor_name, e.after["enabled"])
                  for e in events) == [("gw1@newyork", "admin", "ops", False),
                                       ("gw2@newyork", "admin", "ops", False)]
    assert not Gateway.objects.filter(enabled=True).exists()


def test_removals_through_querysets_are_recorded_too(owner, activity, activity_ny):
    services.replica_add(actor=owner, source=activity, replica=activity_ny)
    services.upstream_add(actor=owner, replica=activity_ny, source=activity)
    services.topic_create(actor=owner, stream=activity, name="clicks")
    services.topic_delete(actor=owner, stream=activity, name="clicks")
    services.upstream_remove(actor=owner, replica=activity_ny, source=activity)
    services.replica_remove(actor=owner, source=activity, replica=activity_ny)
    deleted = set(AuditEvent.objects.filter(action="delete")
                  .values_list("object_type", "object_repr"))
    assert {("topic", f"{activity.path}:clicks"),
            ("upstream", f"{activity.path} -> {activity_ny.path}"),
            ("replicalink", f"{activity.path} -> {activity_ny.path}")} <= deleted


def test_a_deleted_tenant_keeps_its_name_in_the_trail(db):
    from accounts.models import Tenant

    tenant = Tenant.objects.create(name="initech")
    tenant.delete()
    event = last(object_type="tenant", action="delete")
    assert (event.tenant_name, event.object_repr) == ("initech", "initech")
