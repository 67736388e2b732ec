"""/api/v1/tokens/: API tokens made, listed and revoked by the API, with the Tokens page's
scopes and expiries (one service); a token cannot make a wider or longer-lived one; bad
input is a DRF error naming the field and changes nothing; another user's token is absent."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone
from knox.models import AuthToken
from rest_framework.test import APIClient

from accounts.tokens import issue_token

TOKENS = "/api/v1/tokens/"


def by_token(secret: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {secret}")
    return client


def test_a_token_is_made_listed_used_and_revoked_by_the_api(owner, api):
    made = api(owner).post(TOKENS, {"name": "ci", "scope": "produce", "expires": "30"},
                           format="json")
    assert made.status_code == 201 and made["Cache-Control"] == "no-store"
    body = made.json()
    assert (body["name"], body["scope"], body["last_used"]) == ("ci", "produce", None)
    token = AuthToken.objects.get(user=owner)
    assert body["id"] == token.digest[:16] and token.info.scope == "produce"
    assert timedelta(days=29) < token.expiry - timezone.now() <= timedelta(days=30)
    assert by_token(body["token"]).get("/api/v1/streams/").status_code == 200
    listed = by_token(body["token"]).get(TOKENS).json()
    assert [(r["id"], r["name"]) for r in listed] == [(body["id"], "ci")]
    assert "token" not in listed[0] and listed[0]["last_used"] is not None
    assert api(owner).delete(f"{TOKENS}{body['id']}/").status_code == 204
    assert not AuthToken.objects.exists()
    assert by_token(body["token"]).get("/api/v1/streams/").status_code == 401


def test_defaults_are_the_pages_read_scope_and_90_days_and_a_date_wins(owner, api):
    body = api(owner).post(TOKENS, {"name": "reader"}, format="json").json()
    assert body["scope"] == "read"
    token = AuthToken.objects.get(user=owner)
    assert timedelta(days=89) < token.expiry - timezone.now() <= timedelta(days=90)
    day = (timezone.localdate() + timedelta(days=3)).isoformat()
    dated = api(owner).post(TOKENS, {"name": "d", "expires": "never", "expires_on": day},
                            format="json").json()
    assert dated["expiry"].startswith(day)
    never = api(owner).post(TOKENS, {"name": "n", "expires": "never"}, format="json").json()
    assert never["expiry"] is None


def test_bad_input_names_the_field_and_makes_nothing(owner, api):
    client = api(owner)
    for data, field, text in (
        ({"name": ""}, "name", "may not be blank"),
        ({"name": "x", "scope": "root"}, "scope", "not a valid choice"),
        ({"name": "x", "expires": "-3"}, "expiry", "is not a number of days"),
        ({"name": "x", "expires": "99999"}, "expiry", "is not a number of days"),
        ({"name": "x", "expires_on": "2020-01-01"}, "expiry", "is in the past"),
        ({"name": "x", "expires_on": "tomorrow"}, "expires_on", "Date has wrong format"),
    ):
        answer = client.post(TOKENS, data, format="json")
        assert answer.status_code == 400, data
        assert text in str(answer.json()[field]), (data, answer.json())
    assert not AuthToken.objects.exists()


def test_a_token_cannot_make_a_wider_or_longer_lived_token(owner):
    _, read = issue_token(owner, name="r", scope="read")
    wider = by_token(read).post(TOKENS, {"name": "w", "scope": "admin"}, format="json")
    assert wider.status_code == 403 and "needs the admin scope" in wider.json()["detail"]
    assert by_token(read).post(TOKENS, {"name": "ok", "scope": "read", "expires": "never"},
                               format="json").status_code == 201
    _, brief = issue_token(owner, name="b", scope="admin",
                           expiry=timezone.now() + timedelta(days=2))
    for data in ({"name": "x", "expires": "never"}, {"name": "x", "expires": "30"}):
        longer = by_token(brief).post(TOKENS, data, format="json")
        assert longer.status_code == 400 and "outlives the token" in longer.json()["expiry"][0]
    assert by_token(brief).post(TOKENS, {"name": "ok", "expires": "1"},
                                format="json").status_code == 201
    assert AuthToken.objects.count() == 4


def test_another_users_token_is_absent_and_stays(owner, outsider, api):
    theirs, _ = issue_token(outsider, name="theirs")
    issue_token(owner, name="mine")
    assert [r["name"] for r in api(owner).get(TOKENS).json()] == ["mine"]
    gone = api(owner).delete(f"{TOKENS}{theirs.digest[:16]}/")
    assert gone.status_code == 404 and gone.json()["code"] == "not_found"
    assert AuthToken.objects.filter(user=outsider).exists()
    assert APIClient().get(TOKENS).status_code in (401, 403)
