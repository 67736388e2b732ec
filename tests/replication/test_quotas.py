"""Tenant quotas (replication/quotas.py, replication/services/quotas.py): the meter, who sets
them, and the HTTP interfaces refusing a tenant over its quota with 429 and Retry-After while
another tenant goes on."""

from __future__ import annotations

import pytest

from accounts.models import Tenant
from replication.errors import InvalidInput, NotFound, PermissionDenied
from replication.quotas import (
    BURST_SECONDS,
    FETCH,
    PRODUCE,
    forget_limits,
    quota_charge,
    quota_wait,
)
from replication.services.quotas import tenant_quota_set
from replication.services.topics import topic_create
from tests.factories import MembershipFactory, StreamFactory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh_meters():
    from replication import quotas

    forget_limits()
    quotas._arrival.clear()
    yield
    quotas._arrival.clear()


def acme(owner) -> Tenant:  # type: ignore[no-untyped-def]
    return owner.memberships.get().tenant


def test_the_meter_lets_a_seconds_worth_through_then_counts_the_excess(owner, outsider,
                                                                       operator):
    tenant, other = acme(owner), outsider.memberships.get().tenant
    tenant_quota_set(actor=operator, tenant=tenant.name, produce=1000)
    assert quota_charge(tenant.pk, PRODUCE, 800) == 0.0  # within the burst
    over = quota_charge(tenant.pk, PRODUCE, 2200)  # 3 s of quota in about no time
    assert 1.9 < over <= 3.0 - BURST_SECONDS
    assert 1.8 < quota_wait(tenant.pk, PRODUCE) <= over
    assert quota_wait(tenant.pk, FETCH) == 0.0  # no fetch quota: never held back
    assert quota_charge(other.pk, PRODUCE, 10**9) == 0.0  # another tenant has no quota
    tenant_quota_set(actor=operator, tenant=tenant.name, produce=0)  # 0 removes the limit
    assert quota_wait(tenant.pk, PRODUCE) == 0.0


def test_only_operators_set_quotas_and_bad_ones_change_nothing(owner, operator):
    tenant = acme(owner)
    with pytest.raises(PermissionDenied, match="only operators set quotas"):
        tenant_quota_set(actor=owner, tenant=tenant.name, produce=10**9)
    with pytest.raises(InvalidInput, match=r"give 0 \(no limit\) to"):
        tenant_quota_set(actor=operator, tenant=tenant.name, requests=1 << 31)
    with pytest.raises(InvalidInput, match=r"give 0 \(no limit\) to"):
        tenant_quota_set(actor=operator, tenant=tenant.name, fetch=-1)
    with pytest.raises(InvalidInput, match="nothing to set"):
        tenant_quota_set(actor=operator, tenant=tenant.name)
    with pytest.raises(NotFound, match="tenant 'nosuch' does not exist"):
        tenant_quota_set(actor=operator, tenant="nosuch", produce=5)
    tenant.refresh_from_db()
    assert (tenant.produce_bytes_rate, tenant.fetch_bytes_rate, tenant.request_rate) == (
        None, None, None)


def test_api_sets_and_shows_quotas_to_operators_and_members(api, owner, operator):
    tenant = acme(owner)
    url = f"/api/v1/tenants/{tenant.pk}/quota/"
    refused = api(owner).put(url, {"produce_bytes_rate": 5}, format="json")
    assert refused.status_code == 403 and "only operators" in refused.json()["detail"]
    bad = api(operator).put(url, {"request_rate": -1}, format="json")
    assert bad.status_code == 400 and "request_rate" in bad.json()
    done = api(operator).put(url, {"produce_bytes_rate": 5000, "request_rate": 50},
                             format="json")
    assert done.status_code == 200, done.content
    shown = api(owner).get(f"/api/v1/tenants/{tenant.pk}/").json()
    assert (shown["produce_bytes_rate"], shown["fetch_bytes_rate"], shown["request_rate"]) == (
        5000, None, 50)


def test_a_tenant_over_its_produce_quota_gets_429_and_another_tenant_goes_on(
        api, owner, outsider, operator, activity, sanfrancisco):
    topic_create(actor=owner, stream=activity, name="clicks", partitions=1)
    theirs = StreamFactory(cluster=sanfrancisco, name="theirs", created_by=outsider)
    topic_create(actor=outsider, stream=theirs, name="clicks", partitions=1)
    tenant_quota_set(actor=operator, tenant=acme(owner).name, produce=100)
    big = {"records": [{"value": "x" * 150}]}
    mine = f"/api/v1/streams/{activity.uuid}/topics/clicks/messages/"
    assert api(owner).post(mine, big, format="json").status_code == 201  # the burst
    refused = api(owner).post(mine, big, format="json")
    assert refused.status_code == 429, refused.content
    assert int(refused["Retry-After"]) >= 1
    assert "over its quota of 100 bytes a second produced" in str(refused.json())
    other = f"/api/v1/streams/{theirs.uuid}/topics/clicks/messages/"
    for _ in range(3):  # globex has no quota: acme's excess costs it nothing
        assert api(outsider).post(other, big, format="json").status_code == 201
    # Reading is metered on its own quota: none is set, so acme still consumes.
    assert api(owner).get(mine).status_code == 200


def test_a_tenant_over_its_fetch_quota_is_refused_reading_over_rest(
        api, owner, operator, activity):
    topic_create(actor=owner, stream=activity, name="clicks", partitions=1)
    mine = f"/api/v1/streams/{activity.uuid}/topics/clicks/messages/"
    assert api(owner).post(mine, {"records": [{"value": "y" * 400}] * 5},
                           format="json").status_code == 201
    tenant_quota_set(actor=operator, tenant=acme(owner).name, fetch=500)
    assert api(owner).get(mine).status_code == 200  # 2,000 bytes read: 3 s over
    refused = api(owner).get(mine)
    assert refused.status_code == 429 and int(refused["Retry-After"]) >= 2


def test_a_tenants_request_quota_answers_429_on_the_api_and_rest(api, owner, operator):
    member = MembershipFactory(user__username="dave", tenant=acme(owner)).user
    tenant_quota_set(actor=operator, tenant=acme(owner).name, requests=2)
    codes = [api(member).get("/api/v1/streams/").status_code for _ in range(6)]
    assert codes[:2] == [200, 200] and 429 in codes
    refused = api(member).get("/rest/stream/list")
    assert refused.status_code == 429 and int(refused["Retry-After"]) >= 1
    # An operator in no tenant is not held back by acme's quota.
    assert all(api(operator).get("/api/v1/streams/").status_code == 200 for _ in range(6))
