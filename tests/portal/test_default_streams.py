"""Default streams for plain Kafka names over /api/v1, /rest (the CLI's commands) and the
browser; another tenant's settings are invisible and untouchable."""

from __future__ import annotations

from urllib.parse import urlencode

from django.test import Client

from replication.models import DefaultStream
from replication.services.defaultstreams import default_stream_set


def rest(api, user, command: str, **params: str):  # type: ignore[no-untyped-def]
    return api(user).post(f"/rest/{command}", urlencode(params),
                          content_type="application/x-www-form-urlencoded")


def test_api_sets_lists_and_removes_a_tenant_default_stream(api, owner, sanfrancisco):
    created = api(owner).post("/api/v1/defaultstreams/", {
        "cluster": "sanfrancisco", "path": "/mapr/sanfrancisco/kafka"}, format="json")
    assert created.status_code == 201, created.json()
    assert created.json()["scope"] == "tenant" and created.json()["tenant"] == "acme"
    listed = api(owner).get("/api/v1/defaultstreams/").json()["results"]
    assert [row["path"] for row in listed] == ["/mapr/sanfrancisco/kafka"]
    assert api(owner).delete(f"/api/v1/defaultstreams/{created.json()['id']}/").status_code == 204
    assert not DefaultStream.objects.exists()


def test_api_refuses_a_path_on_another_cluster_with_the_fix(api, owner, sanfrancisco):
    refused = api(owner).post("/api/v1/defaultstreams/", {
        "cluster": "sanfrancisco", "path": "/mapr/newyork/kafka"}, format="json")
    assert refused.status_code == 400
    assert "give a path under /mapr/sanfrancisco/" in str(refused.json())
    assert not DefaultStream.objects.exists()


def test_outsider_neither_sees_nor_removes_another_tenants_setting(api, owner, outsider,
                                                                   sanfrancisco):
    setting = default_stream_set(actor=owner, cluster="sanfrancisco",
                                 path="/mapr/sanfrancisco/kafka")
    assert api(outsider).get("/api/v1/defaultstreams/").json()["results"] == []
    assert api(outsider).delete(f"/api/v1/defaultstreams/{setting.pk}/").status_code == 404
    assert rest(api, outsider, "tenant/defaultstream/list").json()["data"] == []
    assert DefaultStream.objects.count() == 1


def test_rest_sets_a_user_override_and_lists_both(api, owner, sanfrancisco):
    rest(api, owner, "tenant/defaultstream/set", cluster="sanfrancisco",
         path="/mapr/sanfrancisco/kafka")
    body = rest(api, owner, "tenant/defaultstream/set", cluster="sanfrancisco",
                path="/mapr/sanfrancisco/alices", scope="user").json()
    assert body["status"] == "OK" and body["data"][0]["scope"] == "user"
    rows = rest(api, owner, "tenant/defaultstream/list").json()["data"]
    assert {(r["scope"], r["path"]) for r in rows} == {
        ("tenant", "/mapr/sanfrancisco/kafka"), ("user", "/mapr/sanfrancisco/alices")}


def test_rest_refusal_is_in_maprclis_error_shape(api, owner, sanfrancisco):
    body = rest(api, owner, "tenant/defaultstream/set", cluster="nowhere",
                path="/mapr/nowhere/kafka").json()
    assert body["status"] == "ERROR" and "cluster nowhere does not exist" in body["errors"][0][
        "desc"]


def test_browser_form_sets_the_tenant_default_stream(owner, sanfrancisco):
    browser = Client()
    browser.force_login(owner)
    response = browser.post("/kafka/default-stream/", {
        "cluster": "sanfrancisco", "path": "/mapr/sanfrancisco/kafka", "scope": "tenant"})
    assert response.status_code == 302
    page = browser.get("/kafka/").content.decode()
    assert "/mapr/sanfrancisco/kafka" in page and 'id="set-default-stream"' in page


def test_kafka_page_shows_the_live_listeners(owner, sanfrancisco, settings):
    from replication.listeners import Node, beat, leave

    settings.STREAMGATE_NAMESPACE = "sgt-kafka-page:"
    node = Node(7, "kafka.example", 9093)
    beat(node, "sanfrancisco", 30)
    try:
        browser = Client()
        browser.force_login(owner)
        page = browser.get("/kafka/").content.decode()
        assert "kafka.example:9093" in page and "sanfrancisco" in page
    finally:
        leave(node, "sanfrancisco")
