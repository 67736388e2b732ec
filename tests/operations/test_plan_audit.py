"""Plans in the audit trail: an operator's plan made, edited and deleted on the admin site, and
a tenant's plan set or changed on the admin site or by `tenant plan set` (/rest), recorded
with who, through which interface, and the plan by name; the tenant's members read their
tenant's plan changes, not another tenant's; bad input changes nothing and records nothing."""

from __future__ import annotations

import errno
from urllib.parse import urlencode

import pytest
from django.test import Client
from django.urls import reverse

from accounts.models import Plan, Tenant
from operations.models import AuditEvent

pytestmark = pytest.mark.django_db


def rest(client: Client, command: str, **params: str):  # type: ignore[no-untyped-def]
    return client.post(f"/rest/{command}", urlencode(params),
                       content_type="application/x-www-form-urlencoded")


def signed_in(user) -> Client:  # type: ignore[no-untyped-def]
    client = Client()
    client.force_login(user)
    return client


def tenant_events() -> list[tuple]:
    return list(AuditEvent.objects.filter(object_type="tenant", action="edit").order_by(
        "pk").values_list(
        "action", "interface", "actor_name", "tenant_name", "before", "after"))


def test_a_tenants_plan_set_changed_and_removed_by_the_cli_is_audited(owner, operator):
    Plan.objects.create(name="free", max_streams=5)
    Plan.objects.create(name="pro", max_streams=50)
    ops = signed_in(operator)
    for plan in ("free", "pro", ""):
        answer = rest(ops, "tenant/plan/set", tenant="acme", plan=plan).json()
        assert answer["status"] == "OK", answer
    assert answer["data"] == [{"tenant": "acme", "plan": "", "maxstreams": 0,
                               "maxpartitions": 0, "maxstoredbytes": 0}]
    assert tenant_events() == [
        ("edit", "rest", "ops", "acme", {"plan": None}, {"plan": "free"}),
        ("edit", "rest", "ops", "acme", {"plan": "free"}, {"plan": "pro"}),
        ("edit", "rest", "ops", "acme", {"plan": "pro"}, {"plan": None})]
    rest(ops, "tenant/plan/set", tenant="acme", plan="")  # no change: nothing recorded
    assert len(tenant_events()) == 3


def test_a_tenants_plan_changed_on_the_admin_site_is_audited(owner, operator):
    plan = Plan.objects.create(name="free", max_streams=5)
    tenant = Tenant.objects.get(name="acme")
    url = reverse("admin:accounts_tenant_change", args=[tenant.pk])
    form = {"name": "acme", "approved": "on", "plan": plan.pk,
            "memberships-TOTAL_FORMS": 0, "memberships-INITIAL_FORMS": 0}
    assert signed_in(operator).post(url, form).status_code == 302
    assert Tenant.objects.get(pk=tenant.pk).plan == plan
    assert tenant_events() == [("edit", "admin", "ops", "acme", {"plan": None},
                                {"plan": "free"})]


def test_plans_made_edited_and_deleted_on_the_admin_site_are_audited(operator):
    ops = signed_in(operator)
    assert ops.post(reverse("admin:accounts_plan_add"),
                    {"name": "free", "max_streams": 5}).status_code == 302
    plan = Plan.objects.get()
    assert ops.post(reverse("admin:accounts_plan_change", args=[plan.pk]),
                    {"name": "free", "max_streams": 10}).status_code == 302
    assert ops.post(reverse("admin:accounts_plan_delete", args=[plan.pk]),
                    {"post": "yes"}).status_code == 302
    events = list(AuditEvent.objects.filter(object_type="plan").order_by("pk"))
    assert [(e.action, e.interface, e.actor_name, e.object_repr) for e in events] == [
        ("create", "admin", "ops", "free"), ("edit", "admin", "ops", "free"),
        ("delete", "admin", "ops", "free")]
    assert (events[1].before, events[1].after) == ({"max_streams": 5}, {"max_streams": 10})
    assert events[0].tenant_id is None  # an operator's catalogue: no tenant reads it


def test_members_read_their_tenants_plan_changes_only(owner, outsider, operator):
    Plan.objects.create(name="free")
    ops = signed_in(operator)
    rest(ops, "tenant/plan/set", tenant="acme", plan="free")
    rest(ops, "tenant/plan/set", tenant="globex", plan="free")
    seen = rest(signed_in(owner), "audit/list", type="tenant", action="edit").json()["data"]
    assert [r["tenant"] for r in seen] == ["acme"]
    assert [r["tenant"] for r in rest(signed_in(outsider), "audit/list",
                                      type="tenant", action="edit").json()["data"]] == ["globex"]
    assert rest(signed_in(owner), "audit/list", type="plan").json()["data"] == []
    assert [r["plan"] for r in rest(signed_in(owner), "tenant/plan/list").json()["data"]] == [
        "free"]


def test_bad_plan_changes_are_refused_and_change_nothing(owner, operator):
    Plan.objects.create(name="free")
    ops = signed_in(operator)
    for client, params, code, text in (
        (signed_in(owner), {"tenant": "acme", "plan": "free"}, errno.EPERM,
         "only operators set plans"),
        (ops, {"tenant": "nobody", "plan": "free"}, errno.ENOENT,
         "tenant 'nobody' does not exist"),
        (ops, {"tenant": "acme", "plan": "gold"}, errno.ENOENT,
         "plan 'gold' does not exist: give one of free"),
    ):
        answer = rest(client, "tenant/plan/set", **params).json()
        assert answer["status"] == "ERROR" and answer["errors"][0]["id"] == code
        assert text in answer["errors"][0]["desc"], answer
    assert Tenant.objects.get(name="acme").plan is None
    assert tenant_events() == []
