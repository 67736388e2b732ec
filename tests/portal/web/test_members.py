"""The members page (Django's test client): the tenant's members with role and joined date;
its administrator changes roles and removes members after a confirmation page, never the last
administrator; others read it; another tenant's memberships answer 404. Every change is in
the audit trail."""

from __future__ import annotations

import html

import pytest

from accounts.models import Membership, Role
from operations.models import AuditEvent
from tests.clients import signed_in
from tests.factories import MembershipFactory

pytestmark = pytest.mark.usefixtures("private_cache")


@pytest.fixture
def boss(owner):  # type: ignore[no-untyped-def]
    """boss: acme's only administrator."""
    return MembershipFactory(user__username="boss", tenant=owner.memberships.get().tenant,
                             role=Role.ADMIN).user


def membership(user) -> Membership:  # type: ignore[no-untyped-def]
    return Membership.objects.get(user=user)


def test_the_page_lists_the_members_with_role_and_joined_date(boss, owner, member, outsider):
    page = signed_in(owner).get("/members/")
    assert page.status_code == 200
    body = page.content.decode()
    rows = body.split('id="members"')[1].split("</table>")[0]
    assert [n for n in ("alice", "bob", "boss") if n in rows] == ["alice", "bob", "boss"]
    assert "mallory" not in body and "globex" not in body
    assert "Tenant administrator" in rows and "Member" in rows
    assert membership(owner).created.strftime("%Y-%m-%d") in rows
    assert "<h1>Members of acme</h1>" in body


def test_a_non_admin_reads_the_list_without_forms(owner, boss):
    body = signed_in(owner).get("/members/").content.decode()
    assert "<select" not in body.split('id="members"')[1] and "Remove" not in body
    assert 'id="invite"' not in body and "Only a tenant administrator" in body


def test_the_admin_changes_a_role(boss, owner):
    done = signed_in(boss).post(f"/members/{membership(owner).pk}/role/", {"role": "viewer"},
                                follow=True)
    assert "alice is now viewer of acme" in done.content.decode()
    assert membership(owner).role == Role.VIEWER
    event = AuditEvent.objects.get(object_type="membership", action="edit")
    assert (event.actor_name, event.before, event.after) == ("boss", {"role": "member"},
                                                             {"role": "viewer"})


def test_an_unknown_role_is_refused_and_changes_nothing(boss, owner):
    refused = signed_in(boss).post(f"/members/{membership(owner).pk}/role/", {"role": "owner"})
    assert refused.status_code == 400
    assert "'owner' is no role: use admin, member, viewer" in html.unescape(
        refused.content.decode())
    assert membership(owner).role == Role.MEMBER


def test_the_last_admin_cannot_be_demoted_nor_removed(boss, owner):
    client = signed_in(boss)
    demoted = client.post(f"/members/{membership(boss).pk}/role/", {"role": "member"})
    assert demoted.status_code == 409
    assert ("boss is the last administrator of acme and cannot be demoted: make another "
            "member an administrator first") in demoted.content.decode()
    removed = client.post(f"/members/{membership(boss).pk}/remove/")
    assert removed.status_code == 409 and "cannot be removed" in removed.content.decode()
    assert membership(boss).role == Role.ADMIN
    assert not AuditEvent.objects.filter(object_type="membership").exclude(
        action="create").exists()


def test_with_a_second_admin_the_first_may_step_down(boss, owner):
    client = signed_in(boss)
    client.post(f"/members/{membership(owner).pk}/role/", {"role": "admin"})
    assert client.post(f"/members/{membership(boss).pk}/role/",
                       {"role": "member"}).status_code == 302
    assert membership(boss).role == Role.MEMBER and membership(owner).role == Role.ADMIN


def test_removing_a_member_asks_first_then_removes(boss, member):
    client = signed_in(boss)
    target = f"/members/{membership(member).pk}/remove/"
    confirm = client.get(target)
    assert confirm.status_code == 200
    assert "Remove bob from acme?" in confirm.content.decode()
    assert Membership.objects.filter(user=member).exists()  # a GET changes nothing
    done = client.post(target, follow=True)
    assert "bob removed from acme" in done.content.decode()
    assert not Membership.objects.filter(user=member).exists()
    event = AuditEvent.objects.get(object_type="membership", action="delete")
    assert (event.actor_name, event.tenant_name) == ("boss", "acme")


def test_a_non_admin_may_neither_change_roles_nor_remove(boss, owner, member):
    client = signed_in(owner)
    refused = client.post(f"/members/{membership(member).pk}/role/", {"role": "admin"})
    assert refused.status_code == 403
    assert ("only a tenant administrator may change roles in acme: ask boss"
            in refused.content.decode())
    assert client.get(f"/members/{membership(member).pk}/remove/").status_code == 403
    assert client.post(f"/members/{membership(member).pk}/remove/").status_code == 403
    assert membership(member).role == Role.MEMBER


def test_another_tenants_members_answer_404_and_change_nothing(boss, outsider):
    theirs = membership(outsider)
    client = signed_in(boss)
    assert client.post(f"/members/{theirs.pk}/role/", {"role": "viewer"}).status_code == 404
    assert client.get(f"/members/{theirs.pk}/remove/").status_code == 404
    assert client.post(f"/members/{theirs.pk}/remove/").status_code == 404
    assert membership(outsider).role == Role.MEMBER
    body = signed_in(outsider).get("/members/").content.decode()
    assert "boss" not in body and "acme" not in body


def test_the_page_needs_a_sign_in(db):
    from django.test import Client

    assert Client().get("/members/").status_code == 302
