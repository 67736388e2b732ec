"""Sign-up in the browser (Django's test client): a visitor creates a tenant and becomes its
administrator, as STREAMGATE_SIGNUP allows (open, approval, off); bad input is refused beside
its field and creates nothing; a tenant waiting for approval shows its members a waiting page
and creates no stream on any interface; an operator approves it in the admin site."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from accounts.models import Membership, Role, Tenant
from operations.models import AuditEvent
from replication.errors import PermissionDenied
from replication.services import stream_create
from tests.clients import signed_in

pytestmark = pytest.mark.usefixtures("private_cache")

GOOD = {"tenant": "initech", "username": "peter", "email": "peter@initech.example",
        "password": "tps reports twice", "confirm": "tps reports twice"}


def sign_up(client: Client | None = None, **changes: str):  # type: ignore[no-untyped-def]
    return (client or Client()).post("/signup/", {**GOOD, **changes})


def nothing_created() -> bool:
    return (not get_user_model().objects.filter(username="peter").exists()
            and not Tenant.objects.filter(name="initech").exists())


@pytest.fixture
def signup_open(settings):  # type: ignore[no-untyped-def]
    settings.SIGNUP = "open"


@pytest.mark.usefixtures("signup_open")
def test_a_visitor_creates_a_tenant_and_becomes_its_signed_in_administrator(db):
    client = Client()
    done = sign_up(client)
    assert done.status_code == 302 and done["Location"] == "/"
    membership = Membership.objects.get(user__username="peter")
    assert (membership.tenant.name, membership.role, membership.tenant.approved) == (
        "initech", Role.ADMIN, True)
    assert membership.user.email == "peter@initech.example"
    assert membership.user.check_password("tps reports twice")
    page = client.get("/").content.decode()
    assert 'id="who"' in page and "peter" in page and "initech" in page


@pytest.mark.usefixtures("signup_open")
def test_the_audit_trail_names_the_newcomer_as_who_created_the_tenant(db):
    sign_up()
    created = AuditEvent.objects.filter(action="create", object_type__in=["tenant",
                                                                         "membership"])
    assert sorted(created.values_list("object_type", "actor_name", "tenant_name")) == [
        ("membership", "peter", "initech"), ("tenant", "peter", "initech")]


@pytest.mark.usefixtures("signup_open")
@pytest.mark.parametrize(("changes", "field", "says"), [
    ({"tenant": "bad name!"}, "tenant", "invalid tenant name"),
    ({"tenant": ""}, "tenant", "invalid tenant name"),
    ({"username": "pe ter"}, "username", "cannot be used"),
    ({"username": "a+b"}, "username", "cannot be used"),
    ({"email": "not-an-address"}, "email", "is not an email address"),
    ({"password": "short", "confirm": "short"}, "password", "too short"),
    ({"password": "password123", "confirm": "password123"}, "password", "too common"),
    ({"confirm": "something else"}, "password", "the two passwords differ"),
])
def test_bad_input_is_refused_beside_its_field_and_creates_nothing(db, changes, field, says):
    refused = sign_up(**changes)
    assert refused.status_code == 400
    body = refused.content.decode()
    error = body.split(f'id="err-{field}"')[1].split("</span>")[0]
    assert says in error
    assert 'value="initech"' in body or field == "tenant"  # what was typed comes back
    assert "tps reports" not in body  # never the password
    assert nothing_created()


@pytest.mark.usefixtures("signup_open")
def test_a_taken_tenant_name_in_any_case_is_refused_and_leaves_no_account(owner):
    refused = sign_up(tenant="ACME")
    assert refused.status_code == 409
    assert "tenant ACME exists already" in refused.content.decode()
    assert not get_user_model().objects.filter(username="peter").exists()
    assert Tenant.objects.filter(name__iexact="acme").count() == 1


@pytest.mark.usefixtures("signup_open")
def test_a_taken_user_name_is_refused_and_creates_no_tenant(owner):
    refused = sign_up(username="Alice")
    assert refused.status_code == 409
    assert "user name Alice is taken" in refused.content.decode()
    assert not Tenant.objects.filter(name="initech").exists()


def test_with_sign_up_off_the_page_is_not_there_and_sign_in_does_not_offer_it(db, settings):
    settings.SIGNUP = "off"
    assert Client().get("/signup/").status_code == 404
    assert sign_up().status_code == 404
    assert nothing_created()
    assert "/signup/" not in Client().get("/login/").content.decode()


@pytest.mark.usefixtures("signup_open")
def test_sign_in_offers_sign_up_and_the_password_reset(db):
    page = Client().get("/login/").content.decode()
    assert 'href="/signup/"' in page and 'href="/password-reset/"' in page


@pytest.mark.usefixtures("signup_open")
def test_sign_up_needs_the_csrf_token(db):
    refused = sign_up(Client(enforce_csrf_checks=True))
    assert refused.status_code == 403
    assert nothing_created()


@pytest.mark.usefixtures("signup_open")
def test_sign_ups_from_one_address_are_limited(db, settings):
    settings.SIGNUP_LIMIT = 2
    assert sign_up(tenant="one", username="one").status_code == 302
    assert sign_up(tenant="two", username="two").status_code == 302
    refused = sign_up()
    assert refused.status_code == 429 and "too many attempts" in refused.content.decode()
    assert nothing_created()
    other = Client(REMOTE_ADDR="10.0.0.9")
    assert sign_up(other).status_code == 302  # another address is not held back


# --- approval -------------------------------------------------------------------------------------


@pytest.fixture
def pending(db, settings):  # type: ignore[no-untyped-def]
    """peter signed up with STREAMGATE_SIGNUP=approval: initech waits for an operator."""
    settings.SIGNUP = "approval"
    client = Client()
    assert sign_up(client).status_code == 302
    return client


def test_with_approval_the_tenant_waits_and_its_admin_sees_only_the_waiting_page(pending):
    tenant = Tenant.objects.get(name="initech")
    assert tenant.approved is False
    for path in ("/", "/streams/", "/members/", "/topology/"):
        page = pending.get(path)
        assert page.status_code == 403, path
        assert "Waiting for approval" in page.content.decode()
    assert pending.get("/account/").status_code == 200  # their account stays theirs
    refused = pending.post("/streams/", {"path": "/mapr/sanfrancisco/x"})
    assert refused.status_code == 403 and "Waiting for approval" in refused.content.decode()


def test_a_waiting_tenant_creates_no_stream_through_the_service_either(pending, sanfrancisco):
    peter = get_user_model().objects.get(username="peter")
    with pytest.raises(PermissionDenied, match="waiting for an operator's approval"):
        stream_create(actor=peter, path="/mapr/sanfrancisco/reports")
    with pytest.raises(PermissionDenied, match="waiting for an operator's approval"):
        stream_create(actor=peter, path="/mapr/sanfrancisco/reports", tenant="initech")


def test_an_operator_approves_the_tenant_in_the_admin_and_its_pages_open(pending, operator,
                                                                         sanfrancisco):
    tenant = Tenant.objects.get(name="initech")
    done = signed_in(operator).post("/admin/accounts/tenant/", {
        "action": "approve", "_selected_action": [tenant.pk]}, follow=True)
    assert "1 tenant(s) approved" in done.content.decode()
    tenant.refresh_from_db()
    assert tenant.approved is True
    approval = AuditEvent.objects.get(object_type="tenant", action="approve")
    assert (approval.actor_name, approval.interface, approval.after) == (
        "ops", "admin", {"approved": True})
    assert pending.get("/streams/").status_code == 200
    peter = get_user_model().objects.get(username="peter")
    assert stream_create(actor=peter, path="/mapr/sanfrancisco/reports").tenant == tenant


def test_an_approved_tenant_beside_a_waiting_one_still_creates_streams(pending, owner,
                                                                       sanfrancisco):
    peter = get_user_model().objects.get(username="peter")
    Membership.objects.create(user=peter, tenant=owner.memberships.get().tenant)
    assert stream_create(actor=peter, path="/mapr/sanfrancisco/reports").tenant.name == "acme"
