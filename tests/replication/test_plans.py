"""Plans: an operator's limits on a tenant's streams, partitions and stored bytes, enforced in
the domain services so every interface refuses alike (the API with a DRF error, /rest with
maprcli's envelope, the pages beside the form), naming the limit, the plan and the fix; and a
plan's quotas as the tenant's default quotas."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import pytest
from django.test import Client

from accounts.models import Plan, Tenant
from replication import quotas
from replication.engine import Record
from replication.models import Stream, Topic
from replication.plans import forget_stored, plan_use
from replication.services import stream_create, topic_create
from replication.services.messages import messages_produce
from replication.stores import store_for

STREAMS = "/api/v1/streams/"


def rest(client: Any, command: str, **params: Any) -> Any:
    return client.post(f"/rest/{command}", urlencode(params),
                       content_type="application/x-www-form-urlencoded")


def assign(owner: Any, **limits: Any) -> Plan:
    """A plan named `free` with these limits, assigned to alice's tenant."""
    plan = Plan.objects.create(name="free", **limits)
    tenant = owner.memberships.get().tenant
    tenant.plan = plan
    tenant.save()
    return plan


@pytest.fixture
def acme(owner) -> Tenant:
    return owner.memberships.get().tenant


# --- streams -----------------------------------------------------------------------------------


def test_the_api_refuses_a_stream_over_the_plan_naming_limit_plan_and_fix(
        api, owner, sanfrancisco, activity):
    assign(owner, max_streams=1)
    response = api(owner).post(STREAMS, {"path": "/mapr/sanfrancisco/two"}, format="json")
    assert response.status_code == 409, response.json()
    body = response.json()
    assert body["code"] == "plan_limit_exceeded"
    assert body["detail"] == ("plan 'free' allows 1 streams: delete one or ask your operator "
                              "for a larger plan")
    assert body["hint"]["action"] == "plan.usage"
    assert list(Stream.objects.values_list("path", flat=True)) == [activity.path]


def test_rest_refuses_a_stream_over_the_plan_in_the_maprcli_envelope(
        api, owner, sanfrancisco, activity):
    assign(owner, max_streams=1)
    response = rest(api(owner), "stream/create", path="/mapr/sanfrancisco/two")
    body = response.json()
    assert response.status_code == 409 and body["status"] == "ERROR", body
    assert body["errors"][0]["id"] == 122  # EDQUOT, as MapR reports a quota
    assert "plan 'free' allows 1 streams" in body["errors"][0]["desc"]
    assert "ask your operator for a larger plan" in body["errors"][0]["desc"]
    assert Stream.objects.count() == 1


def test_the_streams_page_refuses_a_stream_over_the_plan_beside_the_form(
        owner, sanfrancisco, activity):
    assign(owner, max_streams=1)
    client = Client()
    client.force_login(owner)
    response = client.post("/streams/", {"path": "/mapr/sanfrancisco/two"})
    assert response.status_code == 400
    assert "plan &#x27;free&#x27; allows 1 streams" in response.content.decode()
    assert 'href="/usage/"' in response.content.decode()
    assert Stream.objects.count() == 1


def test_a_stream_within_the_plan_and_a_tenant_without_plan_are_created(
        owner, outsider, sanfrancisco):
    assign(owner, max_streams=1)
    stream_create(actor=owner, path="/mapr/sanfrancisco/one")
    for n in range(3):  # globex has no plan: no limit
        stream_create(actor=outsider, path=f"/mapr/sanfrancisco/globex{n}")
    assert Stream.objects.filter(tenant__name="globex").count() == 3


def test_a_replicas_topics_count_but_the_replica_still_receives_them(
        owner, activity, activity_ny):
    """Replication is never refused by a plan (invariant 7); what it brings counts."""
    from replication.services import replica_add, upstream_add

    replica_add(actor=owner, source=activity, replica=activity_ny)
    upstream_add(actor=owner, replica=activity_ny, source=activity)
    assign(owner, max_partitions=4)
    topic_create(actor=owner, stream=activity, name="t", partitions=2)
    assert activity_ny.topics.get(name="t").partitions == 2
    assert plan_use(owner.memberships.get().tenant)[1].used == 4


# --- partitions --------------------------------------------------------------------------------


def test_the_api_refuses_partitions_over_the_plan_and_creates_no_topic(
        api, owner, activity):
    assign(owner, max_partitions=4)
    topics = f"{STREAMS}{activity.uuid}/topics/"
    assert api(owner).post(topics, {"name": "a", "partitions": 3},
                           format="json").status_code == 201
    response = api(owner).post(topics, {"name": "b", "partitions": 2}, format="json")
    assert response.status_code == 409
    assert response.json()["detail"] == (
        "plan 'free' allows 4 partitions over all your topics (3 used, 2 asked for): delete a "
        "topic, ask for fewer partitions or ask your operator for a larger plan")
    assert list(Topic.objects.values_list("name", flat=True)) == ["a"]


def test_rest_refuses_growing_a_topic_past_the_plan_and_keeps_its_partitions(
        api, owner, activity):
    assign(owner, max_partitions=4)
    topic_create(actor=owner, stream=activity, name="a", partitions=3)
    response = rest(api(owner), "stream/topic/edit", path=activity.path, topic="a",
                    partitions="5")
    body = response.json()
    assert body["status"] == "ERROR", body
    assert "plan 'free' allows 4 partitions" in body["errors"][0]["desc"]
    assert Topic.objects.get(name="a").partitions == 3
    ok = rest(api(owner), "stream/topic/edit", path=activity.path, topic="a", partitions="4")
    assert ok.json()["status"] == "OK" and Topic.objects.get(name="a").partitions == 4


def test_autocreate_on_first_produce_is_refused_past_the_plan(owner, activity):
    assign(owner, max_partitions=0)
    with pytest.raises(Exception, match="plan 'free' allows 0 partitions"):
        messages_produce(actor=owner, stream=activity, topic="auto", records=[Record(b"x")])
    assert not Topic.objects.exists()


# --- stored bytes ------------------------------------------------------------------------------


@pytest.fixture
def full(owner, activity):
    """activity:clicks holding 100 bytes, then the plan `free` allowing 100 stored bytes."""
    store_for(activity.cluster)
    topic_create(actor=owner, stream=activity, name="clicks", partitions=1)
    messages_produce(actor=owner, stream=activity, topic="clicks",
                     records=[Record(b"v" * 50), Record(b"w" * 50)])
    forget_stored()
    return assign(owner, max_stored_bytes=100)


def test_the_api_refuses_a_produce_when_stored_bytes_reach_the_plan(api, owner, activity, full):
    url = f"{STREAMS}{activity.uuid}/topics/clicks/messages/"
    response = api(owner).post(url, {"records": [{"value": "more"}]}, format="json")
    assert response.status_code == 409, response.json()
    stored = sum(p.bytes for p in store_for(activity.cluster).partition_stats(activity.uuid,
                                                                              "clicks"))
    assert stored >= 100 and response.json()["detail"] == (
        f"plan 'free' allows 100 stored bytes ({stored} stored): delete messages (a topic, or a "
        "shorter -ttl) or ask your operator for a larger plan")
    assert store_for(activity.cluster).watermarks(activity.uuid, "clicks") == {0: (0, 2)}


def test_the_produce_form_refuses_when_stored_bytes_reach_the_plan(owner, activity, full):
    client = Client()
    client.force_login(owner)
    response = client.post(f"/streams/{activity.pk}/messages/produce/",
                           {"topic": "clicks", "value": "more"})
    assert response.status_code == 400
    assert "allows 100 stored bytes" in response.content.decode()
    assert store_for(activity.cluster).watermarks(activity.uuid, "clicks") == {0: (0, 2)}


def test_a_larger_plan_lets_the_produce_through(api, owner, activity, full):
    full.max_stored_bytes = 1000
    full.save()
    messages_produce(actor=owner, stream=activity, topic="clicks", records=[Record(b"ok")])
    assert store_for(activity.cluster).watermarks(activity.uuid, "clicks") == {0: (0, 3)}


# --- quotas, admin and bad input -------------------------------------------------------------


def test_a_plans_quota_holds_unless_the_tenant_has_its_own(owner, acme):
    plan = assign(owner, produce_bytes_rate=1000, request_rate=7)
    quotas.forget_limits()
    assert quotas.quota_charge(acme.pk, quotas.PRODUCE, 3000) > 0  # the plan's 1000 B/s
    assert quotas.request_rates(owner.pk) == {acme.pk: 7}
    acme.refresh_from_db()
    acme.produce_bytes_rate = 10**9  # the operator's exception for this tenant
    acme.save()
    assert quotas.effective_quota(acme, quotas.PRODUCE) == 10**9
    assert quotas.effective_quota(acme, quotas.FETCH) is None
    assert plan.tenants.get() == acme


def test_the_admin_refuses_a_negative_limit_and_saves_no_plan(operator):
    operator.is_superuser = True
    operator.save()
    client = Client()
    client.force_login(operator)
    response = client.post("/admin/accounts/plan/add/", {"name": "bad", "max_streams": "-1"})
    assert response.status_code == 200
    assert "Ensure this value is greater than or equal to 0" in response.content.decode()
    assert not Plan.objects.exists()


def test_a_plan_a_tenant_has_cannot_be_deleted_and_the_admin_names_the_tenant(owner, operator):
    plan = assign(owner, max_streams=3)
    client = Client()
    client.force_login(operator)
    response = client.post(f"/admin/accounts/plan/{plan.pk}/delete/", {"post": "yes"})
    page = response.content.decode()
    assert "Cannot delete plan" in page and "acme" in page
    assert Plan.objects.filter(pk=plan.pk).exists()


def test_the_admin_offers_plans_on_the_tenant_and_counts_their_tenants(owner, operator):
    assign(owner, max_streams=3)
    Plan.objects.create(name="team", max_streams=10)
    tenant = owner.memberships.get().tenant
    client = Client()
    client.force_login(operator)
    page = client.get(f"/admin/accounts/tenant/{tenant.pk}/change/").content.decode()
    assert 'name="plan"' in page and ">team<" in page
    plans = client.get("/admin/accounts/plan/").content.decode()
    assert 'class="field-tenant_count">1<' in plans and 'class="field-tenant_count">0<' in plans


def test_the_api_and_rest_show_the_plan_and_the_quotas_that_hold(api, owner, acme):
    assign(owner, produce_bytes_rate=1000, request_rate=7)
    acme.refresh_from_db()
    acme.request_rate = 50  # the tenant's own: it holds over the plan's 7
    acme.save()
    [tenant] = api(owner).get("/api/v1/tenants/").json()["results"]
    assert (tenant["name"], tenant["plan"]) == ("acme", "free")
    rows = api(owner).get("/rest/tenant/quota/list").json()["data"]
    assert rows == [{"tenant": "acme", "producebytes": 1000, "fetchbytes": 0, "requests": 50}]
