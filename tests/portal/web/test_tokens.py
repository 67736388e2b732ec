"""The Tokens page (Django's test client): tokens made with a name, a scope and an expiry,
the secret shown once, listed with their last use, revoked after a confirmation; bad input
changes nothing; another user's token is absent (404)."""

from __future__ import annotations

import html
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from knox.models import AuthToken
from rest_framework.test import APIClient

from accounts.models import TokenInfo
from accounts.tokens import issue_token
from replication.services.tokens import tokens_of


def signed_in(user) -> Client:  # type: ignore[no-untyped-def]
    client = Client()
    client.force_login(user)
    return client


def make(client: Client, **form: str):  # type: ignore[no-untyped-def]
    return client.post("/account/tokens/new/", {"name": "ci", "scope": "read",
                                                "expires": "30", **form})


def secret_in(page: str) -> str:
    return page.split('id="token-secret"')[1].split('value="')[1].split('"')[0]


def test_a_token_is_made_with_its_name_scope_and_expiry_and_its_secret_shown_once(owner):
    client = signed_in(owner)
    made = make(client, name="deploy bot", scope="produce", expires="90")
    assert made.status_code == 200 and "no-store" in made["Cache-Control"]
    secret = secret_in(made.content.decode())
    token = AuthToken.objects.get(user=owner)
    assert (token.info.name, token.info.scope) == ("deploy bot", "produce")
    assert timedelta(days=89) < token.expiry - timezone.now() <= timedelta(days=90)
    later = client.get("/account/tokens/").content.decode()
    assert secret not in later and "deploy bot" in later and "produce" in later
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {secret}")
    assert api.get("/api/v1/streams/").status_code == 200


def test_a_token_that_never_expires_or_expires_on_a_date(owner):
    client = signed_in(owner)
    make(client, name="forever", expires="never")
    day = (timezone.localdate() + timedelta(days=10)).isoformat()
    make(client, name="dated", expires="never", expires_on=day)
    tokens = {t.name: t for t in tokens_of(actor=owner)}
    assert tokens["forever"].expiry is None
    assert timezone.localtime(tokens["dated"].expiry).date().isoformat() == day


@pytest.mark.parametrize("form,field,words", [
    ({"scope": "superuser"}, "scope", "unknown scope 'superuser': use read (consume"),
    ({"expires_on": "2020-01-01"}, "expiry", "is in the past"),
    ({"expires_on": "next week"}, "expiry", "is not a date: use YYYY-MM-DD"),
    ({"expires": "-3"}, "expiry", "is not a number of days"),
    ({"name": "  "}, "name", "a token needs a name"),
])
def test_bad_input_is_refused_beside_its_field_and_makes_nothing(owner, form, field, words):
    refused = make(signed_in(owner), **form)
    page = html.unescape(refused.content.decode())
    assert refused.status_code == 400
    assert f'id="err-{field}"' in page and words in page
    assert not AuthToken.objects.exists()


def test_the_list_shows_created_expiry_and_last_use_written_at_most_once_a_minute(owner):
    _, secret = issue_token(owner, name="metrics", scope="read")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {secret}")
    assert api.get("/api/v1/streams/").status_code == 200
    first = TokenInfo.objects.get().last_used
    assert first is not None
    api.get("/api/v1/streams/")
    assert TokenInfo.objects.get().last_used == first  # not a write per request
    TokenInfo.objects.update(last_used=first - timedelta(minutes=2))
    from accounts import tokens
    tokens._noted.clear()  # another process, as far as this one's memory goes
    api.get("/api/v1/streams/")
    assert TokenInfo.objects.get().last_used > first - timedelta(minutes=1)
    row = signed_in(owner).get("/account/tokens/").content.decode().split('id="tokens"')[1]
    assert "metrics" in row and "read" in row and "never" in row  # no expiry


def test_revoking_asks_first_then_the_token_stops_working(owner):
    _, secret = issue_token(owner, name="old", scope="admin")
    [row] = tokens_of(actor=owner)
    client = signed_in(owner)
    confirm = client.get(f"/account/tokens/{row.id}/revoke/")
    assert confirm.status_code == 200 and "Revoke the token" in confirm.content.decode()
    assert AuthToken.objects.exists()  # the GET changed nothing
    done = client.post(f"/account/tokens/{row.id}/revoke/", follow=True)
    assert "token old revoked" in done.content.decode()
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {secret}")
    assert api.get("/api/v1/streams/").status_code == 401


def test_another_users_token_is_not_found_for_the_outsider_or_a_member(owner, member, outsider):
    issue_token(owner, name="alices", scope="admin")
    [row] = tokens_of(actor=owner)
    for other in (outsider, member):
        client = signed_in(other)
        assert client.get(f"/account/tokens/{row.id}/revoke/").status_code == 404
        assert client.post(f"/account/tokens/{row.id}/revoke/").status_code == 404
        assert "alices" not in client.get("/account/tokens/").content.decode()
    assert client.post("/account/tokens/0123456789abcdef/revoke/").status_code == 404
    assert AuthToken.objects.filter(user=owner).exists()


def test_the_token_login_and_the_command_line_make_tokens_through_the_same_service(owner):
    owner.set_password("pw-for-login")
    owner.save()
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION="Basic YWxpY2U6cHctZm9yLWxvZ2lu")  # alice:pw-for-login
    assert api.post("/api/v1/auth/login/").status_code == 200
    info = TokenInfo.objects.get()
    assert (info.name, info.scope) == ("api login", "admin")


def test_the_tokens_page_needs_a_sign_in(db):
    assert Client().get("/account/tokens/").status_code == 302
    assert Client().post("/account/tokens/new/", {"name": "x"}).status_code == 302
