"""The admin site is for cluster operators (staff): they see everything, edit clusters,
gateways, tenants and users, and see streams and replication read-only, changing it only
through the services."""

from __future__ import annotations

import pytest
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse

from accounts.models import Role
from replication.models import Cluster, Gateway, ReplicaLink, ReplicaState, StoreGroup
from replication.services import replica_add, topic_create, upstream_add
from replication.services.messages import topic_watermarks
from tests.factories import GatewayFactory, TopicFactory, UserFactory
from tests.replication.services.test_storegroups import group_url, grow

CHANGELISTS = [
    "accounts_tenant",
    "auth_user",
    "replication_cluster",
    "replication_gateway",
    "replication_stream",
    "replication_topic",
    "replication_replicalink",
    "replication_upstream",
    "replication_job",
    "replication_storegroup",
]
READ_ONLY = ["stream", "topic", "replicalink", "upstream"]


@pytest.fixture
def ops_client(operator) -> Client:
    client = Client()
    client.force_login(operator)
    return client


@pytest.fixture
def link(owner, activity, activity_ny) -> ReplicaLink:
    """sanfrancisco/activity -> newyork/activity, agreed at both ends."""
    TopicFactory(stream=activity, name="clicks")
    created = replica_add(actor=owner, source=activity, replica=activity_ny)
    upstream_add(actor=owner, replica=activity_ny, source=activity)
    return created


def run_action(client: Client, action: str, *links: ReplicaLink):
    url = reverse("admin:replication_replicalink_changelist")
    data = {"action": action, "index": 0, "_selected_action": [x.pk for x in links]}
    return client.post(url, data, follow=True)


def texts(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


@pytest.mark.parametrize("model", CHANGELISTS)
def test_operator_sees_every_changelist(ops_client, link, model):
    GatewayFactory(cluster=link.replica.cluster, name="gw1")
    response = ops_client.get(reverse(f"admin:{model}_changelist"))
    assert response.status_code == 200


def test_operator_sees_every_model_on_the_index(ops_client, db):
    body = ops_client.get(reverse("admin:index")).content.decode()
    for model in CHANGELISTS:
        assert reverse(f"admin:{model}_changelist") in body


def test_operator_opens_change_pages_with_inlines(ops_client, owner, link):
    tenant = owner.memberships.get().tenant
    pages = [
        reverse("admin:accounts_tenant_change", args=[tenant.pk]),
        reverse("admin:auth_user_change", args=[owner.pk]),
        reverse("admin:replication_cluster_change", args=[link.source.cluster.pk]),
        reverse("admin:replication_stream_change", args=[link.source.pk]),
        reverse("admin:replication_replicalink_change", args=[link.pk]),
    ]
    for page in pages:
        assert ops_client.get(page).status_code == 200, page


def test_replica_state_column_shows_the_agreement(ops_client, owner, activity, activity_ny):
    replica_add(actor=owner, source=activity, replica=activity_ny)
    response = ops_client.get(reverse("admin:replication_replicalink_changelist"))
    assert ReplicaState.WAITING_FOR_UPSTREAM.value in response.content.decode()
    upstream_add(actor=owner, replica=activity_ny, source=activity)
    response = ops_client.get(reverse("admin:replication_replicalink_changelist"))
    assert ReplicaState.REPLICATING.value in response.content.decode()


def test_non_staff_is_redirected_to_login(client, owner):
    client.force_login(owner)
    url = reverse("admin:replication_cluster_changelist")
    response = client.get(url)
    assert response.status_code == 302
    assert response.url.startswith(reverse("admin:login"))


def test_anonymous_is_redirected_to_login(client, db):
    response = client.get(reverse("admin:index"))
    assert response.status_code == 302
    assert response.url.startswith(reverse("admin:login"))


@pytest.mark.parametrize("model", READ_ONLY)
def test_read_only_models_refuse_add(ops_client, model):
    assert ops_client.get(reverse(f"admin:replication_{model}_add")).status_code == 403


def test_read_only_models_refuse_change_and_delete(ops_client, link):
    change = reverse("admin:replication_replicalink_change", args=[link.pk])
    assert ops_client.post(change, {"paused": "on"}).status_code == 403
    delete = reverse("admin:replication_replicalink_delete", args=[link.pk])
    assert ops_client.post(delete, {"post": "yes"}).status_code == 403
    assert ReplicaLink.objects.filter(pk=link.pk, paused=False).exists()


def test_pause_and_resume_actions_change_the_link(ops_client, link):
    # The services check adminperm on the source, for operators too.
    link.source.adminperm = "u:alice | u:ops"
    link.source.save()
    response = run_action(ops_client, "pause_replication", link)
    assert "Paused 1 replica link(s)." in texts(response)
    link.refresh_from_db()
    assert link.paused
    response = run_action(ops_client, "resume_replication", link)
    assert "Resumed 1 replica link(s)." in texts(response)
    link.refresh_from_db()
    assert not link.paused


def test_pause_action_reports_service_errors(ops_client, link):
    response = run_action(ops_client, "pause_replication", link)
    assert response.status_code == 200
    [message] = texts(response)
    assert "ops may not pause replicas on /mapr/sanfrancisco/activity" in message
    assert "adminperm" in message
    link.refresh_from_db()
    assert not link.paused


def test_cluster_add_validates_the_name_like_cluster_create(ops_client):
    url = reverse("admin:replication_cluster_add")
    data = {"name": "bad name!", "store_url": "", "state": "ONLINE",
            "gateways-TOTAL_FORMS": 0, "gateways-INITIAL_FORMS": 0}
    response = ops_client.post(url, data)
    assert response.status_code == 200
    assert "invalid cluster name" in response.content.decode()
    assert not Cluster.objects.exists()
    response = ops_client.post(url, {**data, "name": "london"})
    assert response.status_code == 302
    assert Cluster.objects.filter(name="london").exists()


def test_gateway_actions_disable_and_enable(ops_client, newyork):
    gateway = GatewayFactory(cluster=newyork, name="gw1")
    url = reverse("admin:replication_gateway_changelist")
    ops_client.post(url, {"action": "disable_gateways", "index": 0,
                          "_selected_action": [gateway.pk]})
    gateway.refresh_from_db()
    assert gateway.status == Gateway.Status.DISABLED
    ops_client.post(url, {"action": "enable_gateways", "index": 0,
                          "_selected_action": [gateway.pk]})
    gateway.refresh_from_db()
    assert gateway.enabled


def test_gateway_status_filter(ops_client, newyork):
    GatewayFactory(cluster=newyork, name="gw-off", enabled=False)
    GatewayFactory(cluster=newyork, name="gw-new")
    url = reverse("admin:replication_gateway_changelist")
    body = ops_client.get(url, {"status": "DISABLED"}).content.decode()
    assert "gw-off" in body
    assert "gw-new" not in body


def test_user_page_edits_memberships(ops_client, owner):
    tenant = owner.memberships.get().tenant
    body = ops_client.get(reverse("admin:auth_user_change", args=[owner.pk])).content.decode()
    assert "memberships-TOTAL_FORMS" in body
    assert f"{tenant.name}" in body
    assert owner.memberships.get().role == Role.MEMBER


def test_operator_cannot_change_a_superuser(ops_client, db):
    root = UserFactory(username="root", is_staff=True, is_superuser=True)
    url = reverse("admin:auth_user_change", args=[root.pk])
    assert ops_client.get(url).status_code == 200  # shown, read-only
    assert ops_client.post(url, {"username": "root2"}).status_code == 403
    password = reverse("admin:auth_user_password_change", args=[root.pk])
    assert ops_client.post(password, {"password1": "x" * 20, "password2": "x" * 20}
                           ).status_code == 403


def remove_groups(client: Client, *groups: StoreGroup):
    return client.post(reverse("admin:replication_storegroup_changelist"), {
        "action": "remove_groups", "index": 0, "_selected_action": [g.pk for g in groups]},
        follow=True)


def test_store_groups_are_added_and_removed_through_the_services_checks(ops_client, operator,
                                                                         owner, activity):
    """The admin's store group page adds through `cluster store add` (a bad URL shows the
    service's error and changes nothing) and removes with an action that refuses a group
    holding partitions, naming the fix; groups are shown, never edited."""
    grow(operator, activity.cluster)  # a store of its own: adding a group fences it
    add = reverse("admin:replication_storegroup_add")
    bad = ops_client.post(add, {"cluster": activity.cluster.pk, "name": "s2",
                                "url": "http://example/x"})
    assert bad.status_code == 200 and "is not a message store URL" in bad.content.decode()
    assert list(activity.cluster.store_groups.values_list("name", flat=True)) == ["s1"]
    for name in ("s2", "s3"):
        made = ops_client.post(add, {"cluster": activity.cluster.pk, "name": name,
                                     "url": group_url(activity.cluster, name)})
        assert made.status_code == 302, made.content.decode()
    s2, s3 = (StoreGroup.objects.get(cluster=activity.cluster, name=n) for n in ("s2", "s3"))
    activity.cluster.store_groups.filter(name="s3").update(state=StoreGroup.State.DRAINING)
    topic_watermarks(topic_create(actor=owner, stream=activity, name="clicks", partitions=4))
    assert s2.placements.count() == 2 and s3.placements.count() == 0  # s3 takes none
    listed = ops_client.get(reverse("admin:replication_storegroup_changelist")).content.decode()
    assert "Remove selected store groups" in listed and "s2" in listed
    messages_shown = texts(remove_groups(ops_client, s2, s3))
    assert any("still holds 2 partition(s)" in t and "move them" in t for t in messages_shown)
    assert f"Removed store group s3 of cluster {activity.cluster.name}." in messages_shown
    assert sorted(activity.cluster.store_groups.values_list("name", flat=True)) == ["s1", "s2"]
    change = reverse("admin:replication_storegroup_change", args=[s2.pk])
    assert ops_client.get(change).status_code == 200
    assert ops_client.post(change, {"name": "x"}).status_code == 403
    assert StoreGroup.objects.get(pk=s2.pk).name == "s2"
