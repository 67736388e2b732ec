"""/api/v1: every resource through the services, tenant scoping (outsiders get 404 and no
data), permissions, bad input, pagination, filters, query counts, schema and docs."""

from __future__ import annotations

import base64
import io
import re
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.models import Membership, Role, Tenant
from operations.alarms import alarms_evaluate
from operations.models import Alarm, AuditEvent
from portal.api.viewsets import TenantScopedViewSet
from replication import placement, services
from replication.models import (
    Cluster,
    Gateway,
    Job,
    ReplicaLink,
    ReplicaState,
    Stream,
    Topic,
    Upstream,
)
from replication.services.jobs import diffstreams_start
from tests.factories import GatewayFactory, MembershipFactory, StreamFactory, UserFactory

pytestmark = pytest.mark.django_db

PASSWORD = "correct horse battery staple"  # tests/factories.py UserFactory
TOPIC = "page.views"  # a dot, as Kafka topic names often have: it must route as a lookup


def url(route: str, /, **kwargs: Any) -> str:
    return reverse(f"api:{route}", kwargs=kwargs)


def snapshot() -> dict[str, list[dict]]:
    """Every control-plane row, to prove a refused request changed nothing."""
    models = (Stream, Topic, ReplicaLink, Upstream, Cluster, Gateway, Tenant, Membership)
    return {m.__name__: list(m.objects.order_by("pk").values()) for m in models}




@pytest.fixture
def clicks(owner, activity) -> Topic:
    return services.topic_create(actor=owner, stream=activity, name=TOPIC, partitions=2)


@pytest.fixture
def pair(owner, activity, activity_ny, clicks) -> ReplicaLink:
    """activity -> activity_ny, agreed at both ends; page.views reaches the replica."""
    link = services.replica_add(actor=owner, source=activity, replica=activity_ny)
    services.upstream_add(actor=owner, replica=activity_ny, source=activity)
    return link


@pytest.fixture
def world(owner, member, outsider, operator, activity, activity_ny, pair) -> dict[str, Any]:
    """A multi-master pair in acme, so every nested route has a row to hit."""
    services.replica_add(actor=owner, source=activity_ny, replica=activity)
    services.upstream_add(actor=owner, replica=activity, source=activity_ny)
    GatewayFactory(cluster=activity_ny.cluster, name="gw1")
    alarms_evaluate()  # no live gateway where the replicas are: acme sees the alarms
    acme = owner.memberships.get().tenant
    return {"owner": owner, "member": member, "outsider": outsider, "operator": operator,
            "activity": activity, "activity_ny": activity_ny, "acme": acme,
            "alarm": Alarm.objects.restrict(owner).open().first(),
            "event": AuditEvent.objects.filter(tenant=acme).first(),
            "job": diffstreams_start(actor=owner, source_path=activity.path,
                                     destination_path=activity_ny.path)}


# --- the URL conf: every route is scoped ---------------------------------------------------

# Infrastructure every signed-in user reads (tests below check their writes are operator-only).
SHARED_ROUTES = ("cluster-", "gateway-")
# Views over no tenant rows at all.
UNSCOPED_VIEWS = ("login", "logout", "schema", "docs")


def api_routes() -> Iterator[tuple[str, URLPattern, list[str]]]:
    """(url name, pattern, HTTP methods) for every route under /api/v1/."""

    def walk(patterns: list, prefix: str) -> Iterator[tuple[str, URLPattern]]:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                yield from walk(pattern.url_patterns, prefix + str(pattern.pattern))
            elif (prefix + str(pattern.pattern)).startswith("api/v1/"):
                yield prefix, pattern

    for _, pattern in walk(get_resolver().url_patterns, ""):
        callback = pattern.callback
        if hasattr(callback, "actions"):
            methods = list(callback.actions)
        else:
            view = callback.view_class
            methods = [m for m in ("get", "post", "put", "patch", "delete") if hasattr(view, m)]
        yield pattern.name, pattern, methods


def _route_kwargs(pattern: URLPattern, world: dict[str, Any]) -> dict[str, Any]:
    # One acme object per URL keyword; with the multi-master pair each nested uuid hits a row.
    values = {"stream_uuid": world["activity"].uuid, "uuid": world["activity_ny"].uuid,
              "name": TOPIC, "pk": world["acme"].pk, "alarm_id": world["alarm"].pk,
              "event_id": world["event"].pk, "job_id": world["job"].pk}
    names = list(pattern.pattern.converters)
    missing = [n for n in names if n not in values]
    assert not missing, f"{pattern.name}: add a value for {missing} to _route_kwargs"
    return {n: values[n] for n in names}


def _detail_routes() -> list[tuple[str, URLPattern, list[str]]]:
    return [r for r in api_routes()
            if r[1].pattern.converters and not r[0].startswith(SHARED_ROUTES)]


def test_the_route_enumeration_finds_every_resource():
    names = {name for name, _, _ in api_routes()}
    assert {"stream-detail", "stream-topic-detail", "stream-replica-pause",
            "stream-upstream-detail", "tenant-detail", "replica-list", "alarm-detail",
            "audit-detail", "job-detail"} <= names


def test_every_detail_route_answers_404_to_an_outsider(api, world):
    """A new route that forgets tenant scoping fails here."""
    outsider, owner = api(world["outsider"]), api(world["owner"])
    before, failures, routes = snapshot(), [], _detail_routes()
    assert len(routes) >= 8
    for name, pattern, methods in routes:
        target = url(name, **_route_kwargs(pattern, world))
        for method in methods:
            response = getattr(outsider, method)(target, {}, format="json")
            if response.status_code != 404 or world["activity"].path in response.content.decode():
                failures.append(f"{method.upper()} {target}: {response.status_code}")
        if "get" in methods:  # the same URL does reach a row, for someone allowed to see it
            assert owner.get(target).status_code == 200, target
    assert failures == []
    assert snapshot() == before


def test_every_list_route_shows_an_outsider_nothing_of_another_tenant(api, world):
    client, checked = api(world["outsider"]), 0
    for name, pattern, methods in api_routes():
        if pattern.pattern.converters or "get" not in methods:
            continue
        body = client.get(url(name)).content.decode()
        for secret in (world["activity"].path, str(world["activity"].uuid), "acme"):
            assert secret not in body, f"{name} shows {secret} to an outsider"
        checked += 1
    assert checked >= 6


def test_every_api_view_goes_through_the_tenant_scoped_base():
    for name, pattern, _ in api_routes():
        view = getattr(pattern.callback, "cls", None) or pattern.callback.view_class
        if name in UNSCOPED_VIEWS:
            continue
        assert issubclass(view, TenantScopedViewSet), name


def test_a_view_over_unscoped_rows_is_a_configuration_error(rf, owner):
    from django.core.exceptions import ImproperlyConfigured

    class Leaky(TenantScopedViewSet):
        queryset = Cluster.objects.all()

    view = Leaky()
    view.request = rf.get("/")
    view.request.user = owner
    with pytest.raises(ImproperlyConfigured):
        view.get_queryset()


@pytest.mark.parametrize("name", ["tenant-list", "cluster-list", "gateway-list", "stream-list",
                                  "replica-list"])
def test_unauthenticated_requests_are_refused(name):
    response = APIClient().get(url(name))
    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"


def test_unauthenticated_writes_are_refused_and_change_nothing(activity):
    before = snapshot()
    client = APIClient()
    assert client.post(url("stream-list"), {"path": "/mapr/sanfrancisco/x"},
                       format="json").status_code == 401
    assert client.delete(url("stream-detail", uuid=activity.uuid)).status_code == 401
    assert snapshot() == before


# --- auth, schema, docs -------------------------------------------------------------------


def _basic(username: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()


def test_login_with_basic_auth_returns_a_token_that_authenticates(owner, activity):
    response = APIClient().post(url("login"), HTTP_AUTHORIZATION=_basic("alice", PASSWORD))
    assert response.status_code == 200
    client = APIClient(HTTP_AUTHORIZATION=f"Token {response.json()['token']}")
    assert client.get(url("stream-list")).json()["results"][0]["path"] == activity.path


def test_login_with_a_wrong_password_is_refused(owner):
    response = APIClient().post(url("login"), HTTP_AUTHORIZATION=_basic("alice", "nope"))
    assert response.status_code == 401
    assert "token" not in response.json()


def test_logout_revokes_the_token(owner):
    token = APIClient().post(url("login"),
                             HTTP_AUTHORIZATION=_basic("alice", PASSWORD)).json()["token"]
    client = APIClient(HTTP_AUTHORIZATION=f"Token {token}")
    assert client.post(url("logout")).status_code == 204
    assert client.get(url("stream-list")).status_code == 401


def test_schema_endpoint_returns_the_openapi_document(api, owner):
    response = api(None).get(url("schema"), {"format": "json"})
    assert response.status_code == 200
    paths = response.json()["paths"]
    assert "/api/v1/streams/{stream_uuid}/replicas/{uuid}/pause/" in paths


def test_schema_command_validates_without_warnings_for_the_api():
    call_command("spectacular", "--validate", "--fail-on-warn", stdout=io.StringIO())


def test_served_schema_describes_only_the_api(api):
    paths = api(None).get(url("schema"), {"format": "json"}).json()["paths"]
    assert paths and all(p.startswith("/api/v1/") for p in paths)


def test_docs_page_serves_swagger_from_local_static_files_not_a_cdn(api):
    response = api(None).get(url("docs"))
    assert response.status_code == 200
    html = response.content.decode()
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/" in html
    assert re.findall(r"https?://", html) == []
    # The portal's way back, and the reader's colour scheme.
    assert '<a class="back" href="/" id="back-to-portal">' in html
    assert '<meta name="color-scheme" content="light dark">' in html
    assert "/static/css/apidocs.css" in html  # the dark mode's rules, no inline style


# --- tenants ------------------------------------------------------------------------------


def test_tenants_lists_your_tenants_with_your_role(api, owner, outsider):
    MembershipFactory(user=owner, tenant__name="initech", role=Role.ADMIN)
    body = api(owner).get(url("tenant-list")).json()
    assert body["count"] == 2
    assert [(t["name"], t["role"]) for t in body["results"]] == [("acme", "member"),
                                                                  ("initech", "admin")]


def test_outsider_cannot_read_another_tenant(api, owner, outsider):
    acme = owner.memberships.get().tenant
    response = api(outsider).get(url("tenant-detail", pk=acme.pk))
    assert response.status_code == 404
    assert "acme" not in response.content.decode()


# --- clusters and gateways ----------------------------------------------------------------


def test_clusters_show_state_and_gateways_with_status(api, owner, sanfrancisco):
    GatewayFactory(cluster=sanfrancisco, name="gw1", last_heartbeat=timezone.now())
    GatewayFactory(cluster=sanfrancisco, name="gw2")
    body = api(owner).get(url("cluster-detail", name="sanfrancisco")).json()
    assert body["state"] == "ONLINE"
    assert [(g["name"], g["status"]) for g in body["gateways"]] == [("gw1", "UP"),
                                                                    ("gw2", "UNKNOWN")]


def test_every_user_lists_clusters(api, outsider, sanfrancisco, newyork):
    body = api(outsider).get(url("cluster-list")).json()
    assert [c["name"] for c in body["results"]] == ["newyork", "sanfrancisco"]


def test_operator_creates_a_cluster(api, operator):
    response = api(operator).post(url("cluster-list"), {"name": "tokyo"}, format="json")
    assert response.status_code == 201
    assert response.json() | {"created": None} == {"name": "tokyo", "state": "ONLINE",
                                                   "created": None, "required_copies": 1,
                                                   "gateways": []}


def test_a_cluster_requiring_more_copies_than_its_store_has_is_refused(api, operator):
    response = api(operator).post(url("cluster-list"), {"name": "tokyo", "required_copies": 2},
                                  format="json")
    assert response.status_code == 400
    assert "group has 1 member(s)" in str(response.json())
    assert not Cluster.objects.filter(name="tokyo").exists()


def test_a_cluster_whose_store_cannot_be_created_is_refused(api, operator):
    response = api(operator).post(
        url("cluster-list"), {"name": "tokyo", "store_url": "postgres://nohost.invalid/tokyo"},
        format="json",
    )
    assert response.status_code == 400
    assert "cannot create the message store" in response.json()["detail"]
    assert not Cluster.objects.filter(name="tokyo").exists()


def test_member_may_not_create_a_cluster(api, owner):
    response = api(owner).post(url("cluster-list"), {"name": "tokyo"}, format="json")
    assert response.status_code == 403
    assert response.json()["code"] == "permission_denied"
    assert not Cluster.objects.filter(name="tokyo").exists()


def test_operator_replaces_lists_and_deletes_a_clusters_gateways(api, operator, newyork):
    client, target = api(operator), url("cluster-gateways", name="newyork")
    GatewayFactory(cluster=newyork, name="old")
    response = client.put(target, {"gateways": "gw1 gw2:7660"}, format="json")
    assert response.status_code == 200
    assert [g["name"] for g in response.json()["gateways"]] == ["gw1", "gw2:7660"]
    listed = client.get(target).json()
    assert listed["count"] == 2
    assert client.delete(target).status_code == 204
    assert not newyork.gateways.exists()


def test_member_may_not_configure_gateways(api, owner, newyork):
    GatewayFactory(cluster=newyork, name="gw1")
    before, client = snapshot(), api(owner)
    target = url("cluster-gateways", name="newyork")
    assert client.put(target, {"gateways": "gw9"}, format="json").status_code == 403
    assert client.delete(target).status_code == 403
    assert client.get(target).json()["count"] == 1
    assert snapshot() == before


def test_unknown_cluster_answers_404(api, operator):
    assert api(operator).get(url("cluster-detail", name="tokyo")).status_code == 404
    response = api(operator).put(url("cluster-gateways", name="tokyo"), {"gateways": "gw1"},
                                 format="json")
    assert response.status_code == 404


def test_gateways_filter_by_cluster_and_status(api, owner, sanfrancisco, newyork):
    now = timezone.now()
    GatewayFactory(cluster=sanfrancisco, name="up", last_heartbeat=now)
    GatewayFactory(cluster=sanfrancisco, name="down", last_heartbeat=now - timedelta(hours=1))
    GatewayFactory(cluster=newyork, name="off", enabled=False, last_heartbeat=now)
    GatewayFactory(cluster=newyork, name="new")
    client = api(owner)

    def names(**query: str) -> list[str]:
        return [g["name"] for g in client.get(url("gateway-list"), query).json()["results"]]

    assert names(cluster="sanfrancisco") == ["down", "up"]
    assert names(status="UP") == ["up"]
    assert names(status="DOWN") == ["down"]
    assert names(status="DISABLED") == ["off"]
    assert names(status="UNKNOWN", cluster="newyork") == ["new"]
    assert client.get(url("gateway-list"), {"status": "SLEEPY"}).status_code == 400


# --- streams ------------------------------------------------------------------------------


def test_create_stream_applies_metadata_and_aces(api, owner, sanfrancisco):
    response = api(owner).post(url("stream-list"), {
        "path": "/mapr/sanfrancisco/orders", "ttl": 3600, "compression": "zlib",
        "defaultpartitions": 3, "autocreate": False, "consumeperm": "u:alice | r:member",
    }, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["cluster"], body["tenant"], body["numtopics"]) == ("sanfrancisco", "acme", 0)
    assert (body["ttl"], body["compression"], body["defaultpartitions"]) == (3600, "zlib", 3)
    assert body["consumeperm"] == "u:alice | r:member"
    assert Stream.objects.get(uuid=body["uuid"]).autocreate is False


def test_create_stream_copies_metadata_from_another_stream(api, owner, activity, newyork):
    services.stream_edit(actor=owner, stream=activity, ttl=99, compression="off")
    response = api(owner).post(url("stream-list"), {
        "path": "/mapr/newyork/activity", "copymetafrom": activity.path}, format="json")
    assert response.status_code == 201
    assert (response.json()["ttl"], response.json()["compression"]) == (99, "off")


def test_viewer_may_not_create_streams(api, sanfrancisco):
    viewer = MembershipFactory(user__username="vic", tenant__name="acme", role=Role.VIEWER).user
    response = api(viewer).post(url("stream-list"), {"path": "/mapr/sanfrancisco/x"},
                                format="json")
    assert response.status_code == 403
    assert not Stream.objects.exists()


def test_stream_shows_numtopics_cluster_and_tenant(api, owner, activity, clicks):
    body = api(owner).get(url("stream-detail", uuid=activity.uuid)).json()
    assert {k: body[k] for k in ("path", "cluster", "tenant", "numtopics", "uuid")} == {
        "path": activity.path, "cluster": "sanfrancisco", "tenant": "acme", "numtopics": 1,
        "uuid": str(activity.uuid)}
    assert "created" in body


def test_stream_aces_are_shown_to_its_administrators_only(api, owner, member, activity):
    assert api(owner).get(url("stream-detail", uuid=activity.uuid)).json()["adminperm"] == \
        "u:alice"
    shown = api(member).get(url("stream-detail", uuid=activity.uuid)).json()
    assert not {"produceperm", "consumeperm", "topicperm", "copyperm", "adminperm"} & set(shown)
    listed = api(member).get(url("stream-list")).json()["results"][0]
    assert "adminperm" not in listed


def test_stream_list_filters_by_cluster_tenant_and_path_prefix(api, owner, sanfrancisco,
                                                               newyork):
    for cluster, name in [(sanfrancisco, "web/a"), (sanfrancisco, "web/b"),
                          (sanfrancisco, "iot"), (newyork, "web/a")]:
        StreamFactory(cluster=cluster, name=name, created_by=owner)
    client = api(owner)

    def paths(**query: str) -> list[str]:
        return [s["path"] for s in client.get(url("stream-list"), query).json()["results"]]

    assert paths(cluster="newyork") == ["/mapr/newyork/web/a"]
    assert paths(path__startswith="/mapr/sanfrancisco/web/") == [
        "/mapr/sanfrancisco/web/a", "/mapr/sanfrancisco/web/b"]
    assert len(paths(tenant="acme")) == 4
    assert paths(tenant="globex") == []


def test_stream_list_paginates_with_limit_and_offset(api, owner, sanfrancisco):
    for i in range(5):
        StreamFactory(cluster=sanfrancisco, name=f"s{i}", created_by=owner)
    body = api(owner).get(url("stream-list"), {"limit": 2, "offset": 2}).json()
    assert body["count"] == 5
    assert [s["path"] for s in body["results"]] == ["/mapr/sanfrancisco/s2",
                                                   "/mapr/sanfrancisco/s3"]
    assert "offset=4" in body["next"] and body["previous"]


def test_edit_stream_changes_metadata(api, owner, activity):
    response = api(owner).patch(url("stream-detail", uuid=activity.uuid),
                                {"ttl": 60, "produceperm": "r:member"}, format="json")
    assert response.status_code == 200
    activity.refresh_from_db()
    assert (activity.ttl, activity.produceperm) == (60, "r:member")


def test_delete_stream(api, owner, activity):
    assert api(owner).delete(url("stream-detail", uuid=activity.uuid)).status_code == 204
    assert not Stream.objects.filter(pk=activity.pk).exists()


def test_member_without_adminperm_may_not_edit_or_delete_a_stream(api, member, activity):
    before, client = snapshot(), api(member)
    target = url("stream-detail", uuid=activity.uuid)
    response = client.patch(target, {"ttl": 1}, format="json")
    assert response.status_code == 403
    assert "adminperm" in response.json()["detail"]
    assert client.delete(target).status_code == 403
    assert snapshot() == before


def test_outsider_cannot_see_or_change_a_stream(api, outsider, activity):
    before, client = snapshot(), api(outsider)
    target = url("stream-detail", uuid=activity.uuid)
    assert client.get(url("stream-list")).json()["count"] == 0
    for response in (client.get(target), client.patch(target, {"ttl": 1}, format="json"),
                     client.delete(target)):
        assert response.status_code == 404
        assert activity.path not in response.content.decode()
    assert snapshot() == before


def test_outsider_cannot_name_another_tenants_stream_by_path(api, outsider, activity,
                                                             newyork):
    theirs = StreamFactory(cluster=newyork, name="mine", created_by=outsider)
    before, client = snapshot(), api(outsider)
    attempts = [
        (url("stream-list"), {"path": "/mapr/newyork/copy", "copymetafrom": activity.path}),
        (url("stream-replica-list", stream_uuid=theirs.uuid), {"replica": activity.path}),
        (url("stream-upstream-list", stream_uuid=theirs.uuid), {"upstream": activity.path}),
    ]
    for target, body in attempts:
        response = client.post(target, body, format="json")
        assert response.status_code == 404, target
        assert response.json()["code"] == "not_found"
    assert snapshot() == before


# --- topics -------------------------------------------------------------------------------


def test_topic_create_list_retrieve_edit_and_delete(api, owner, activity):
    client = api(owner)
    topics = url("stream-topic-list", stream_uuid=activity.uuid)
    created = client.post(topics, {"name": TOPIC, "partitions": 2}, format="json")
    assert created.status_code == 201
    assert created.json() | {"created": None} == {
        "name": TOPIC, "stream": activity.path, "partitions": 2, "timestamptype": "createtime",
        "created": None, "origin": activity.path, "origin_uuid": str(activity.uuid),
        "is_origin": True, "policy": "delete", "cleanuppolicy": "", "mincompactionlag": None,
        "deleteretention": None, "mincleanabledirtyratio": None}
    assert [t["name"] for t in client.get(topics).json()["results"]] == [TOPIC]
    detail = url("stream-topic-detail", stream_uuid=activity.uuid, name=TOPIC)
    assert client.get(detail).json()["partitions"] == 2
    edited = client.patch(detail, {"partitions": 4, "timestamptype": "logappendtime"},
                          format="json")
    assert (edited.json()["partitions"], edited.json()["timestamptype"]) == (4, "logappendtime")
    assert client.delete(detail).status_code == 204
    assert not activity.topics.exists()


def test_replica_topics_show_their_origin_and_are_changed_only_there(api, owner, activity,
                                                                     activity_ny, pair):
    before, client = snapshot(), api(owner)
    detail = url("stream-topic-detail", stream_uuid=activity_ny.uuid, name=TOPIC)
    body = client.get(detail).json()
    assert (body["is_origin"], body["origin"]) == (False, activity.path)
    response = client.patch(detail, {"partitions": 8}, format="json")
    assert response.status_code == 400
    assert activity.path in response.json()["detail"]
    assert snapshot() == before


def test_member_without_topicperm_may_not_change_topics(api, member, activity, clicks):
    before, client = snapshot(), api(member)
    topics = url("stream-topic-list", stream_uuid=activity.uuid)
    detail = url("stream-topic-detail", stream_uuid=activity.uuid, name=TOPIC)
    assert client.get(topics).json()["count"] == 1
    assert client.post(topics, {"name": "other"}, format="json").status_code == 403
    assert client.patch(detail, {"partitions": 3}, format="json").status_code == 403
    assert client.delete(detail).status_code == 403
    assert snapshot() == before


def test_unknown_topic_answers_404(api, owner, activity):
    detail = url("stream-topic-detail", stream_uuid=activity.uuid, name="nope")
    assert api(owner).get(detail).status_code == 404


# --- replicas -----------------------------------------------------------------------------


def test_replica_waits_for_upstream_until_the_replica_owner_agrees(api, owner, activity,
                                                                   activity_ny):
    client = api(owner)
    replicas = url("stream-replica-list", stream_uuid=activity.uuid)
    added = client.post(replicas, {"replica": activity_ny.path}, format="json")
    assert added.status_code == 201
    assert added.json()["replicaState"] == ReplicaState.WAITING_FOR_UPSTREAM
    assert added.json()["isUptodate"] is False
    upstreams = url("stream-upstream-list", stream_uuid=activity_ny.uuid)
    assert client.post(upstreams, {"upstream": activity.path}, format="json").status_code == 201
    row = client.get(replicas).json()["results"][0]
    assert (row["replicaState"], row["isUptodate"]) == (ReplicaState.REPLICATING, True)


def test_replica_list_uses_maprs_field_names(api, owner, activity, activity_ny, pair):
    row = api(owner).get(url("stream-replica-list", stream_uuid=activity.uuid)).json()
    assert row["results"] == [{
        "sourcePath": activity.path, "replicaPath": activity_ny.path,
        "replicaState": "REPLICA_STATE_REPLICATING", "paused": False, "throttle": False,
        "idx": 1, "networkencryption": False, "synchronous": False,
        "networkcompression": "off", "isUptodate": True, "messagesPending": 0,
        "bytesPending": 0, "minPendingTS": 0, "maxPendingTS": 0, "timeLag": 0.0,
        "stalled": False, "copyTableCompletionPercentage": 100, "mode": "async",
        "modeSince": None, "modeReason": "", "uuid": str(activity_ny.uuid), "errors": []}]


def test_pause_and_resume_a_replica(api, owner, activity, activity_ny, pair):
    client = api(owner)
    kwargs = {"stream_uuid": activity.uuid, "uuid": activity_ny.uuid}
    paused = client.post(url("stream-replica-pause", **kwargs)).json()
    assert (paused["paused"], paused["isUptodate"]) == (True, False)
    assert client.post(url("stream-replica-resume", **kwargs)).json()["paused"] is False


def test_edit_replica_options(api, owner, activity, activity_ny, pair):
    detail = url("stream-replica-detail", stream_uuid=activity.uuid, uuid=activity_ny.uuid)
    response = api(owner).patch(detail, {"throttle": True, "networkcompression": "off"},
                                format="json")
    assert (response.json()["throttle"], response.json()["networkcompression"]) == (True, "off")


def test_remove_replica(api, owner, activity, activity_ny, pair):
    detail = url("stream-replica-detail", stream_uuid=activity.uuid, uuid=activity_ny.uuid)
    assert api(owner).delete(detail).status_code == 204
    assert not ReplicaLink.objects.exists()


@pytest.mark.parametrize("method,route,body", [
    ("post", "stream-replica-list", {"replica": "/mapr/newyork/other"}),
    ("patch", "stream-replica-detail", {"throttle": True}),
    ("post", "stream-replica-pause", None),
    ("post", "stream-replica-resume", None),
    ("delete", "stream-replica-detail", None),
    ("post", "stream-replica-autosetup", {"replica": "/mapr/newyork/fresh"}),
])
def test_member_without_adminperm_may_not_change_replicas(api, owner, member, activity,
                                                          activity_ny, pair, method, route,
                                                          body):
    StreamFactory(cluster=activity_ny.cluster, name="other", created_by=owner)
    kwargs = {"stream_uuid": activity.uuid}
    if route != "stream-replica-list" and route != "stream-replica-autosetup":
        kwargs["uuid"] = activity_ny.uuid
    before = snapshot()
    response = getattr(api(member), method)(url(route, **kwargs), body, format="json")
    assert response.status_code == 403
    assert response.json()["code"] == "permission_denied"
    assert snapshot() == before


def test_autosetup_answers_with_the_link_copying_and_its_job(api, owner, activity, newyork):
    response = api(owner).post(url("stream-replica-autosetup", stream_uuid=activity.uuid),
                               {"replica": "/mapr/newyork/activity", "multimaster": True},
                               format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["replicaState"] == ReplicaState.COPY_IN_PROGRESS
    job = Job.objects.get()
    assert (job.kind, job.destination_path) == ("copystream", "/mapr/newyork/activity")
    assert api(owner).get(f"/api/v1/jobs/{job.pk}/").json()["state"] == "QUEUED"


def test_replicas_inbox_lists_links_waiting_for_upstream(api, owner, activity, activity_ny,
                                                         pair, newyork):
    pending = StreamFactory(cluster=newyork, name="pending", created_by=owner)
    services.replica_add(actor=owner, source=activity, replica=pending)
    client = api(owner)

    def replicas(**query: str) -> list[str]:
        return [r["replicaPath"] for r in client.get(url("replica-list"), query).json()["results"]]

    assert replicas(waiting_for_upstream="true") == [pending.path]
    assert replicas(waiting_for_upstream="false") == [activity_ny.path]
    assert replicas() == [activity_ny.path, pending.path]


def test_replicas_filter_by_source_and_replica_path(api, owner, activity, activity_ny, pair):
    client = api(owner)
    listed = client.get(url("replica-list"), {"replica": "mapr/newyork/activity"}).json()
    assert [r["sourcePath"] for r in listed["results"]] == [activity.path]
    assert client.get(url("replica-list"),
                      {"source": activity_ny.path}).json()["results"] == []


# --- upstreams ----------------------------------------------------------------------------


def test_upstream_add_list_and_remove(api, owner, activity, activity_ny):
    client = api(owner)
    upstreams = url("stream-upstream-list", stream_uuid=activity_ny.uuid)
    added = client.post(upstreams, {"upstream": activity.path}, format="json")
    assert added.status_code == 201
    assert added.json() | {"created": None} == {
        "upstreamPath": activity.path, "uuid": str(activity.uuid), "idx": 1, "created": None}
    assert client.get(upstreams).json()["count"] == 1
    detail = url("stream-upstream-detail", stream_uuid=activity_ny.uuid, uuid=activity.uuid)
    assert client.delete(detail).status_code == 204
    assert not Upstream.objects.exists()


def test_member_without_adminperm_may_not_change_upstreams(api, member, activity,
                                                           activity_ny, pair):
    before, client = snapshot(), api(member)
    upstreams = url("stream-upstream-list", stream_uuid=activity.uuid)
    response = client.post(upstreams, {"upstream": activity_ny.path}, format="json")
    assert response.status_code == 403
    detail = url("stream-upstream-detail", stream_uuid=activity_ny.uuid, uuid=activity.uuid)
    assert client.delete(detail).status_code == 403
    assert snapshot() == before


# --- bad input: clear errors, nothing changed ----------------------------------------------

NEW = "/mapr/sanfrancisco/new"


def create_stream(body: Any, status: int, code: str | None, field: str | None) -> tuple:
    """A BAD_INPUTS row: the owner's `POST /streams/` with `body`."""
    return ("owner", "post", lambda w: url("stream-list"), body, status, code, field)


def under(stream: str, route: str) -> Callable[[dict], str]:
    """The URL of `route` nested under the world's `stream` ("activity", "activity_ny")."""
    return lambda w: url(route, stream_uuid=w[stream].uuid)


BAD_INPUTS: list[tuple[str, str, Callable[[dict], str], Any, int, str | None, str | None]] = [
    # (who, method, url, body, status, code, field)
    create_stream({}, 400, None, "path"),
    create_stream({"path": "sanfrancisco/new"}, 400, "invalid_input", "path"),
    create_stream({"path": "/mapr/tokyo/new"}, 404, "not_found", "path"),
    create_stream({"path": NEW, "ttl": "soon"}, 400, None, "ttl"),
    create_stream({"path": NEW, "ttl": -1}, 400, "invalid_input", "ttl"),
    create_stream({"path": NEW, "compression": "gzip"}, 400, None, "compression"),
    create_stream({"path": NEW, "defaultpartitions": 0}, 400, "invalid_input", "defaultpartitions"),
    create_stream({"path": NEW, "adminperm": "u:alice |"}, 400, "invalid_input", "adminperm"),
    create_stream({"path": "/mapr/sanfrancisco/activity"}, 409, "already_exists", "path"),
    create_stream({"path": "/mapr/sanfrancisco/activity/x"}, 400, "invalid_input", "path"),
    create_stream({"path": NEW, "colour": "red"}, 400, None, "colour"),
    create_stream({"path": NEW, "autocreate": "maybe"}, 400, None, "autocreate"),
    create_stream({"path": NEW, "tenant": "globex"}, 404, "not_found", "tenant"),
    create_stream({"path": NEW, "copymetafrom": "/mapr/a/b"}, 404, "not_found", "copymetafrom"),
    create_stream([NEW], 400, None, "non_field_errors"),
    ("owner", "patch", lambda w: url("stream-detail", uuid=w["activity"].uuid), {},
     400, "invalid_input", None),
    ("owner", "patch", lambda w: url("stream-detail", uuid=w["activity"].uuid),
     {"path": "/mapr/newyork/moved"}, 400, None, "path"),
    ("owner", "post", under("activity", "stream-topic-list"),
     {"name": "bad name!"}, 400, "invalid_input", "name"),
    ("owner", "post", under("activity", "stream-topic-list"),
     {"name": "t", "partitions": "many"}, 400, None, "partitions"),
    ("owner", "post", under("activity", "stream-topic-list"),
     {"name": "t", "partitions": 0}, 400, "invalid_input", "partitions"),
    ("owner", "post", under("activity", "stream-topic-list"),
     {"name": TOPIC}, 409, "already_exists", "name"),
    ("owner", "patch",
     lambda w: url("stream-topic-detail", stream_uuid=w["activity"].uuid, name=TOPIC),
     {"partitions": 1}, 400, "invalid_input", "partitions"),
    ("owner", "post", under("activity", "stream-replica-list"),
     {"replica": "/mapr/newyork/nothing"}, 404, "not_found", "replica"),
    ("owner", "post", under("activity", "stream-replica-list"),
     {"replica": "/mapr/sanfrancisco/activity"}, 400, "invalid_input", "replica"),
    ("owner", "post", under("activity", "stream-replica-list"),
     {"replica": "/mapr/newyork/activity"}, 409, "already_exists", "replica"),
    ("owner", "post", under("activity", "stream-replica-list"),
     {"replica": "/mapr/newyork/spare", "networkcompression": "gzip"},
     400, None, "networkcompression"),
    ("owner", "patch", lambda w: url("stream-replica-detail", stream_uuid=w["activity"].uuid,
                                     uuid=w["activity_ny"].uuid),
     {"newreplica": "/mapr/newyork/other"}, 501, "not_supported", "newreplica"),
    ("owner", "patch", lambda w: url("stream-replica-detail", stream_uuid=w["activity"].uuid,
                                     uuid=w["activity_ny"].uuid),
     {}, 400, "invalid_input", None),
    ("owner", "post", under("activity_ny", "stream-upstream-list"),
     {"upstream": ""}, 400, None, "upstream"),
    ("owner", "post", under("activity_ny", "stream-upstream-list"),
     {"upstream": "/mapr/newyork/activity"}, 400, "invalid_input", "upstream"),
    ("operator", "post", lambda w: url("cluster-list"), {"name": "bad name"},
     400, "invalid_input", "name"),
    ("operator", "post", lambda w: url("cluster-list"), {"name": "newyork"},
     409, "already_exists", "name"),
    ("operator", "put", lambda w: url("cluster-gateways", name="newyork"),
     {"gateways": "gw1 bad_host!"}, 400, "invalid_input", "gateways"),
    ("operator", "put", lambda w: url("cluster-gateways", name="newyork"),
     {"gateways": "  "}, 400, "invalid_input", "gateways"),
    ("owner", "get", lambda w: url("replica-list"), {"source": "/tmp/x"},
     400, "invalid_input", "source"),
]


@pytest.fixture
def bad_input_world(owner, operator, activity, activity_ny, clicks, pair, newyork):
    StreamFactory(cluster=newyork, name="spare", created_by=owner)
    return {"owner": owner, "operator": operator, "activity": activity,
            "activity_ny": activity_ny}


@pytest.mark.parametrize("who,method,target,body,status,code,field", BAD_INPUTS,
                         ids=[f"{c[1]}-{i}-{c[6] or c[5]}" for i, c in enumerate(BAD_INPUTS)])
def test_bad_input_is_refused_with_a_clear_error_and_changes_nothing(
    api, bad_input_world, who, method, target, body, status, code, field
):
    before = snapshot()
    client = api(bad_input_world[who])
    if method == "get":
        response = client.get(target(bad_input_world), body)
    else:
        response = getattr(client, method)(target(bad_input_world), body, format="json")
    assert response.status_code == status, response.content
    data = response.json()
    if code:
        assert data["code"] == code
        assert data["detail"]
    if field:
        assert data[field] and all(isinstance(m, str) and m for m in data[field])
    assert "Traceback" not in response.content.decode()
    assert snapshot() == before


def test_malformed_json_is_a_parse_error(api, owner, sanfrancisco):
    response = api(owner).post(url("stream-list"), data="{", content_type="application/json")
    assert response.status_code == 400
    assert response.json()["code"] == "parse_error"
    assert not Stream.objects.exists()


def test_an_unexpected_error_answers_500_without_a_traceback(api, owner, activity,
                                                             monkeypatch):
    def boom(**kwargs: Any) -> None:
        raise RuntimeError("secret internals")

    monkeypatch.setattr(services, "stream_delete", boom)
    response = api(owner).delete(url("stream-detail", uuid=activity.uuid))
    assert response.status_code == 500
    assert response.json() == {"detail": "internal error; it has been logged",
                               "code": "server_error"}


# --- query counts -------------------------------------------------------------------------


def _grow(owner, activity, start: int, count: int) -> None:
    """More rows of every kind each list shows."""
    for i in range(start, start + count):
        replica = StreamFactory(cluster=activity.cluster, name=f"r{i}", created_by=owner)
        services.replica_add(actor=owner, source=activity, replica=replica)
        services.upstream_add(actor=owner, replica=replica, source=activity)
        source = StreamFactory(cluster=activity.cluster, name=f"s{i}", created_by=owner)
        services.upstream_add(actor=owner, replica=activity, source=source)
        services.topic_create(actor=owner, stream=activity, name=f"t{i}")
        GatewayFactory(cluster=activity.cluster)
        MembershipFactory(user=owner, tenant__name=f"tenant{i}")


def test_lists_cost_the_same_queries_for_few_and_many_rows(api, owner, activity):
    client = api(owner)
    lists = [url(n) for n in ("tenant-list", "cluster-list", "gateway-list", "stream-list",
                              "replica-list")]
    lists += [url(n, stream_uuid=activity.uuid) for n in
              ("stream-topic-list", "stream-replica-list", "stream-upstream-list")]

    def costs() -> list[int]:
        # Whether a cluster has several store groups is looked at once a process every
        # REFRESH_SECONDS: looked at afresh in both counts, as the tenants' rates are.
        placement.forget()
        counts = []
        for target in lists:
            with CaptureQueriesContext(connection) as queries:
                assert client.get(target).status_code == 200
            counts.append(len(queries))
        return counts

    _grow(owner, activity, 0, 1)
    few = costs()
    _grow(owner, activity, 1, 4)
    assert costs() == few


def test_many_users_stream_list_is_scoped_per_user(api, owner, outsider, sanfrancisco):
    StreamFactory(cluster=sanfrancisco, name="a", created_by=owner)
    StreamFactory(cluster=sanfrancisco, name="b", created_by=outsider)
    other = UserFactory(username="carol")
    assert api(outsider).get(url("stream-list")).json()["count"] == 1
    assert api(other).get(url("stream-list")).json()["count"] == 0

