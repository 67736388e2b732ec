"""Signed-in browser sessions on the account page: recorded at sign-in with the device and
address, the current one marked, one or every other signed out; another user's answers 404."""

from __future__ import annotations

import base64
from datetime import timedelta

from django.test import Client

from accounts import sessions
from accounts.models import SignInSession

PASSWORD = "correct horse battery staple"  # tests/factories.py


def browser(user, agent: str, ip: str = "203.0.113.7") -> Client:  # type: ignore[no-untyped-def]
    client = Client(HTTP_USER_AGENT=agent, REMOTE_ADDR=ip)
    signed = client.post("/login/", {"username": user.get_username(), "password": PASSWORD})
    assert signed.status_code == 302
    return client


def sessions_table(client: Client) -> str:
    page = client.get("/account/").content.decode()
    return page.split('id="sessions"')[1].split("</table>")[0]


def test_each_sign_in_is_listed_with_device_address_and_the_current_one_marked(owner):
    laptop = browser(owner, "Firefox on the laptop", "203.0.113.7")
    browser(owner, "Safari on the phone", "198.51.100.2")
    table = sessions_table(laptop)
    assert "Firefox on the laptop" in table and "Safari on the phone" in table
    assert "203.0.113.7" in table and "198.51.100.2" in table
    mine = next(row for row in table.split("<tr") if "Firefox" in row)
    assert "(this browser)" in mine and table.count("(this browser)") == 1


def test_signing_one_session_out_ends_it_and_leaves_the_others(owner):
    laptop = browser(owner, "laptop")
    phone = browser(owner, "phone")
    record = SignInSession.objects.get(user_agent="phone")
    done = laptop.post(f"/account/sessions/{record.pk}/end/", follow=True)
    assert "that session is signed out" in done.content.decode()
    assert phone.get("/account/").status_code == 302  # back to the sign-in page
    assert laptop.get("/account/").status_code == 200
    assert list(SignInSession.objects.values_list("user_agent", flat=True)) == ["laptop"]


def test_signing_out_every_other_session_keeps_this_one(owner):
    laptop = browser(owner, "laptop")
    others = [browser(owner, f"tablet {n}") for n in range(2)]
    done = laptop.post("/account/sessions/end-others/", follow=True)
    assert "2 other session(s) signed out" in done.content.decode()
    assert all(other.get("/account/").status_code == 302 for other in others)
    assert laptop.get("/account/").status_code == 200


def test_ending_the_current_session_signs_this_browser_out(owner):
    laptop = browser(owner, "laptop")
    record = SignInSession.objects.get()
    assert laptop.post(f"/account/sessions/{record.pk}/end/")["Location"] == "/login/"
    assert laptop.get("/account/").status_code == 302
    assert not SignInSession.objects.exists()


def test_another_users_session_is_not_found_and_stays(owner, outsider, member):
    browser(owner, "alice's laptop")
    record = SignInSession.objects.get()
    for other in (outsider, member):
        client = browser(other, "theirs")
        assert client.post(f"/account/sessions/{record.pk}/end/").status_code == 404
        assert "alice's laptop" not in sessions_table(client)
    assert SignInSession.objects.filter(pk=record.pk).exists()


def test_signing_out_forgets_the_record_and_last_seen_is_written_once_a_minute(owner):
    laptop = browser(owner, "laptop")
    record = SignInSession.objects.get()
    SignInSession.objects.update(last_seen=record.last_seen - timedelta(minutes=5))
    sessions._seen.clear()
    laptop.get("/account/")
    seen = SignInSession.objects.get().last_seen
    assert seen > record.last_seen - timedelta(minutes=1)
    laptop.get("/account/")
    assert SignInSession.objects.get().last_seen == seen  # no write per request
    laptop.post("/logout/")
    assert not SignInSession.objects.exists()


def test_the_token_login_records_no_browser_session(owner):
    pair = base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
    made = Client().post("/api/v1/auth/login/", HTTP_AUTHORIZATION=f"Basic {pair}")
    assert made.status_code == 200 and made.json()["token"]
    assert not SignInSession.objects.exists()


def test_ending_sessions_needs_a_sign_in(db):
    assert Client().post("/account/sessions/1/end/").status_code == 302
    assert Client().post("/account/sessions/end-others/").status_code == 302
