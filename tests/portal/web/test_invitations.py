"""Invitations by one-time link (Django's test client): a tenant administrator creates one
with a role and an expiry and sees its link once; the invitee joins with a new account or an
existing one and gets that role; a link works once, expires, can be revoked, and only its hash
is kept; a viewer cannot invite; another tenant's invitations answer 404."""

from __future__ import annotations

import html
import re
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from accounts.models import Invitation, Membership, Role
from operations.models import AuditEvent
from tests.clients import signed_in
from tests.factories import MembershipFactory

pytestmark = pytest.mark.usefixtures("private_cache")

NEWCOMER = {"username": "dana", "email": "dana@example.com", "password": "a long passphrase",
            "confirm": "a long passphrase"}


@pytest.fixture
def boss(owner):  # type: ignore[no-untyped-def]
    return MembershipFactory(user__username="boss", tenant=owner.memberships.get().tenant,
                             role=Role.ADMIN).user


def invite(client: Client, **form: str) -> str:
    """The invitation link the members page shows once, after creating one."""
    done = client.post("/members/invite/", {"role": "member", "days": "7", **form}, follow=True)
    assert done.status_code == 200, done.content.decode()
    found = re.search(r'id="invitation-link" value="http://testserver(/join/[^/"]+/)"|'
                      r'value="http://testserver(/join/[^/"]+/)"[^>]*id="invitation-link"',
                      done.content.decode())
    assert found, "the new link is on the page"
    return found.group(1) or found.group(2)


def test_the_admin_creates_a_link_shown_once_and_only_its_hash_is_kept(boss):
    client = signed_in(boss)
    link = invite(client, role="viewer", email="dana@example.com", days="3")
    token = link.split("/")[2]
    invitation = Invitation.objects.get()
    assert invitation.token_hash == Invitation.hash_of(token) and token not in (
        invitation.token_hash)
    assert (invitation.role, invitation.email, invitation.created_by) == (
        Role.VIEWER, "dana@example.com", boss)
    assert timedelta(days=3) - (invitation.expires - timezone.now()) < timedelta(minutes=1)
    again = client.get("/members/").content.decode()
    assert token not in again and 'id="invitation-link"' not in again  # shown once
    assert "dana@example.com" in again and ">open<" in again
    event = AuditEvent.objects.get(object_type="invitation", action="create")
    assert event.actor_name == "boss" and "token_hash" not in event.after
    assert token not in str(event.after)


def test_a_newcomer_opens_the_link_creates_an_account_and_joins_with_its_role(boss):
    link = invite(signed_in(boss), role="viewer", email="dana@example.com")
    visitor = Client()
    page = visitor.get(link).content.decode()
    assert "Join acme" in page and "Viewer (read only)" in page
    assert 'value="dana@example.com"' in page  # the invitation's address, filled in
    done = visitor.post(link, NEWCOMER)
    assert done.status_code == 302 and done["Location"] == "/"
    joined = Membership.objects.get(user__username="dana")
    assert (joined.tenant.name, joined.role) == ("acme", Role.VIEWER)
    assert "acme" in visitor.get("/members/").content.decode()  # signed in, in acme
    invitation = Invitation.objects.get()
    assert invitation.used is not None and invitation.used_by == joined.user
    created = AuditEvent.objects.get(object_type="membership", action="create",
                                     object_id=str(joined.pk))
    assert created.actor_name == "dana"


def test_an_existing_user_signs_in_and_joins(boss, outsider):
    link = invite(signed_in(boss), role="member")
    anonymous = Client().get(link).content.decode()
    assert f'href="/login/?next={link}"' in anonymous
    client = signed_in(outsider)
    page = client.get(link).content.decode()
    assert "Join acme as mallory" in page
    assert client.post(link).status_code == 302
    assert set(Membership.objects.filter(user=outsider).values_list("tenant__name", "role")) == {
        ("globex", "member"), ("acme", "member")}


def test_a_link_works_once(boss, outsider, member):
    link = invite(signed_in(boss))
    assert signed_in(outsider).post(link).status_code == 302
    for client in (signed_in(member), Client()):
        used = client.get(link)
        assert used.status_code == 409 and "has been used already" in used.content.decode()
    refused = Client().post(link, NEWCOMER)
    assert refused.status_code == 409
    assert not get_user_model().objects.filter(username="dana").exists()


def test_an_expired_link_is_refused(boss):
    link = invite(signed_in(boss))
    Invitation.objects.update(expires=timezone.now() - timedelta(minutes=1))
    refused = Client().post(link, NEWCOMER)
    assert refused.status_code == 409 and "expired on" in refused.content.decode()
    assert not get_user_model().objects.filter(username="dana").exists()


def test_a_revoked_link_is_refused_and_revoking_is_audited(boss):
    client = signed_in(boss)
    link = invite(client)
    invitation = Invitation.objects.get()
    done = client.post(f"/invitations/{invitation.pk}/revoke/", follow=True)
    assert "Invitation revoked" in done.content.decode() and ">revoked<" in done.content.decode()
    refused = Client().get(link)
    assert refused.status_code == 409 and "was revoked" in refused.content.decode()
    again = client.post(f"/invitations/{invitation.pk}/revoke/")
    assert again.status_code == 409 and "revoked already" in again.content.decode()
    assert AuditEvent.objects.get(object_type="invitation", action="edit").actor_name == "boss"


def test_an_unknown_link_is_404(db):
    refused = Client().get("/join/not-a-real-token/")
    assert refused.status_code == 404 and "not valid" in refused.content.decode()


def test_a_member_of_the_tenant_already_leaves_the_link_unused(boss, owner):
    link = invite(signed_in(boss))
    refused = signed_in(owner).post(link)
    assert refused.status_code == 409
    assert "you are a member of acme already" in refused.content.decode()
    assert Invitation.objects.get().used is None


def test_a_new_account_with_bad_input_is_refused_and_the_link_stays_usable(boss, owner):
    link = invite(signed_in(boss))
    taken = Client().post(link, {**NEWCOMER, "username": "alice"})
    assert taken.status_code == 409 and "user name alice is taken" in taken.content.decode()
    weak = Client().post(link, {**NEWCOMER, "password": "123", "confirm": "123"})
    assert weak.status_code == 400 and 'id="err-password"' in weak.content.decode()
    assert Invitation.objects.get().used is None
    assert Client().post(link, NEWCOMER).status_code == 302


@pytest.mark.parametrize("role", [Role.VIEWER, Role.MEMBER])
def test_only_an_admin_invites(boss, owner, role):
    Membership.objects.filter(user=owner).update(role=role)
    refused = signed_in(owner).post("/members/invite/", {"role": "admin", "days": "7"})
    assert refused.status_code == 403
    assert ("only a tenant administrator may invite in acme: ask boss"
            in refused.content.decode())
    assert not Invitation.objects.exists()


@pytest.mark.parametrize(("form", "field", "says"), [
    ({"role": "owner"}, "role", "'owner' is no role"),
    ({"email": "nope"}, "email", "is not an email address"),
    ({"days": "365"}, "days", "365 days is not offered"),
    ({"days": "soon"}, "days", "choose how many days"),
])
def test_a_bad_invitation_is_refused_beside_its_field(boss, form, field, says):
    refused = signed_in(boss).post("/members/invite/", {"role": "member", "days": "7", **form})
    assert refused.status_code == 400
    error = refused.content.decode().split(f'id="err-{field}"')[1].split("</span>")[0]
    assert says in html.unescape(error)
    assert not Invitation.objects.exists()


def test_another_tenants_invitations_answer_404(boss, outsider):
    invite(signed_in(boss))
    invitation = Invitation.objects.get()
    refused = signed_in(outsider).post(f"/invitations/{invitation.pk}/revoke/")
    assert refused.status_code == 404
    assert Invitation.objects.get().revoked is None
    assert 'id="invitations"' not in signed_in(outsider).get("/members/").content.decode()
