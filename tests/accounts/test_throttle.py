import base64
import uuid

import pytest
from django.core.cache import cache
from django.test import Client, RequestFactory
from rest_framework.throttling import ScopedRateThrottle

from accounts.throttle import _key
from replication.services import topic_create
from tests.factories import MembershipFactory

PASSWORD = "correct horse battery staple"
ELSEWHERE = "198.51.100.7"


@pytest.fixture
def victim(db, settings):
    """A user of their own name, so runs sharing one Redis never block each other's users."""
    settings.LOGIN_FAILURE_LIMIT = 3
    user = MembershipFactory(user__username=f"v-{uuid.uuid4().hex[:10]}").user
    yield user
    for address in ("127.0.0.1", ELSEWHERE):
        cache.delete(_key(user.username, RequestFactory().get("/", REMOTE_ADDR=address)))


def sign_in(client, username, password, address="127.0.0.1"):
    return client.post("/login/", {"username": username, "password": password},
                       REMOTE_ADDR=address)


def test_repeated_failed_sign_ins_block_even_the_right_password(client, victim):
    assert [sign_in(client, victim.username, "wrong").status_code for _ in range(3)] == [
        200, 200, 429]  # the third failure reaches the limit
    blocked = sign_in(client, victim.username, PASSWORD)
    assert blocked.status_code == 429
    assert b"Too many failed sign-ins" in blocked.content
    assert "_auth_user_id" not in client.session


def test_the_block_covers_http_basic_on_rest(client, victim):
    for _ in range(3):
        sign_in(client, victim.username, "wrong")
    credentials = base64.b64encode(f"{victim.username}:{PASSWORD}".encode()).decode()
    response = client.get("/rest/stream/list", HTTP_AUTHORIZATION=f"Basic {credentials}")
    assert response.status_code in (401, 403)
    assert response.json()["status"] == "ERROR"


def test_failures_from_one_address_do_not_lock_the_user_out_elsewhere(client, victim):
    for _ in range(3):
        sign_in(client, victim.username, "wrong")
    assert sign_in(client, victim.username, PASSWORD).status_code == 429
    # The user, signing in from their own address, is not the one locked out.
    elsewhere = Client()
    assert sign_in(elsewhere, victim.username, PASSWORD, address=ELSEWHERE).status_code == 302
    credentials = base64.b64encode(f"{victim.username}:{PASSWORD}".encode()).decode()
    response = Client().get("/rest/stream/list", HTTP_AUTHORIZATION=f"Basic {credentials}",
                            REMOTE_ADDR=ELSEWHERE)
    assert response.status_code == 200, response.content


def test_a_successful_sign_in_forgets_earlier_failures(client, victim):
    for _ in range(2):
        sign_in(client, victim.username, "wrong")
    assert sign_in(client, victim.username, PASSWORD).status_code == 302
    client.logout()
    for _ in range(2):
        sign_in(client, victim.username, "wrong")
    assert sign_in(client, victim.username, PASSWORD).status_code == 302


@pytest.mark.django_db(transaction=True)
def test_produce_is_rate_limited_per_user(api, owner, activity, monkeypatch):
    # DRF reads the rates when the throttle class is defined, so the test sets them there.
    monkeypatch.setitem(ScopedRateThrottle.THROTTLE_RATES, "produce", "2/minute")
    topic_create(actor=owner, stream=activity, name="clicks")
    url = f"/api/v1/streams/{activity.uuid}/topics/clicks/messages/"
    body = {"records": [{"value": "x"}]}
    statuses = [api(owner).post(url, body, format="json").status_code for _ in range(3)]
    assert statuses == [201, 201, 429]
    assert api(owner).get(url).status_code == 200  # consuming is not limited
