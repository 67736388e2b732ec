"""createtenantuser and ensureoperator: accounts from the command line."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from knox.auth import TokenAuthentication

from accounts.models import Membership, Role, Tenant

User = get_user_model()
STRONG = "blue-giraffe-orbit-42"


def run(name: str, *args: str) -> list[str]:
    out = StringIO()
    call_command(name, *args, stdout=out)
    return out.getvalue().splitlines()


def token_user(token: str):
    user, _ = TokenAuthentication().authenticate_credentials(token.encode())
    return user


def test_createtenantuser_prints_a_working_token_last(db):
    lines = run("createtenantuser", "--tenant", "acme", "--username", "carol")
    carol = User.objects.get(username="carol")
    assert token_user(lines[-1]) == carol
    assert not carol.has_usable_password()
    assert not carol.is_staff


def test_createtenantuser_creates_tenant_membership_and_groups(db):
    run("createtenantuser", "--tenant", "acme", "--username", "carol",
        "--group", "analysts", "--group", "ops", "--role", "admin")
    carol = User.objects.get(username="carol")
    assert Tenant.objects.filter(name="acme").exists()
    assert Membership.objects.get(user=carol, tenant__name="acme").role == Role.ADMIN
    assert set(carol.groups.values_list("name", flat=True)) == {"analysts", "ops"}


def test_createtenantuser_operator_flag_makes_staff(db):
    run("createtenantuser", "--tenant", "acme", "--username", "dave", "--operator")
    assert User.objects.get(username="dave").is_staff


def test_createtenantuser_sets_password_from_flag_or_env(db, monkeypatch):
    run("createtenantuser", "--tenant", "acme", "--username", "carol", "--password", STRONG)
    assert User.objects.get(username="carol").check_password(STRONG)
    monkeypatch.setenv("STREAMGATE_PASSWORD", STRONG + "-env")
    run("createtenantuser", "--tenant", "acme", "--username", "erin")
    assert User.objects.get(username="erin").check_password(STRONG + "-env")


def test_createtenantuser_is_idempotent_and_issues_new_tokens(owner):
    first = run("createtenantuser", "--tenant", "acme", "--username", "alice")[-1]
    second = run("createtenantuser", "--tenant", "globex", "--username", "alice",
                 "--group", "analysts")[-1]
    assert first != second
    assert token_user(first) == token_user(second) == owner
    assert set(owner.memberships.values_list("tenant__name", flat=True)) == {"acme", "globex"}
    assert owner.groups.filter(name="analysts").exists()
    assert User.objects.filter(username="alice").count() == 1


def test_createtenantuser_keeps_an_existing_role_unless_told(owner):
    run("createtenantuser", "--tenant", "acme", "--username", "alice", "--role", "admin")
    run("createtenantuser", "--tenant", "acme", "--username", "alice")
    assert owner.memberships.get(tenant__name="acme").role == Role.ADMIN


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tenant", "bad tenant!", "--username", "carol"], "invalid tenant name"),
        (["--tenant=-acme", "--username", "carol"], "invalid tenant name"),
        (["--tenant", "acme\n", "--username", "carol"], "invalid tenant name"),
        (["--tenant", "acme", "--username", "carol\n"], "invalid user name"),
        (["--tenant", "acme", "--username", "carol", "--group", "ops\n"], "invalid group name"),
        (["--tenant", "acme", "--username", "car ol"], "invalid user name"),
        (["--tenant", "acme", "--username", "carol", "--group", "a:b"], "invalid group name"),
        (["--tenant", "acme", "--username", "carol", "--password", "short"], "too short"),
    ],
)
def test_createtenantuser_refuses_bad_input(db, args, message):
    with pytest.raises(CommandError, match=message):
        run("createtenantuser", *args)
    assert not User.objects.filter(username="carol").exists()
    assert not Tenant.objects.exists()


def test_ensureoperator_prints_the_password_once(db, monkeypatch):
    monkeypatch.delenv("STREAMGATE_ADMIN_USER", raising=False)
    monkeypatch.delenv("STREAMGATE_ADMIN_PASSWORD", raising=False)
    monkeypatch.setenv("PORT", "8123")
    first = "\n".join(run("ensureoperator"))
    password = first.split("password: ", 1)[1].split()[0]
    admin = User.objects.get(username="admin")
    assert admin.is_staff and admin.check_password(password)
    assert Membership.objects.get(user=admin, tenant__name="default").role == Role.ADMIN
    assert "http://127.0.0.1:8123/admin/" in first
    assert "http://127.0.0.1:8123/" in first
    assert run("ensureoperator") == ["operator account exists: admin"]


def test_ensureoperator_takes_name_and_password_from_env(db, monkeypatch):
    monkeypatch.setenv("STREAMGATE_ADMIN_USER", "root")
    monkeypatch.setenv("STREAMGATE_ADMIN_PASSWORD", STRONG)
    output = "\n".join(run("ensureoperator"))
    assert STRONG not in output
    assert User.objects.get(username="root").check_password(STRONG)


def test_ensureoperator_refuses_an_existing_non_operator(owner, monkeypatch):
    monkeypatch.setenv("STREAMGATE_ADMIN_USER", "alice")
    with pytest.raises(CommandError, match="not an operator"):
        run("ensureoperator")
