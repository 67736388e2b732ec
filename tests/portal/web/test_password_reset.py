"""The password reset, Django's own views with the portal's pages: a mail (the test run's
in-memory outbox; the console on `make run`) carries a one-time link to choose a new password;
the same answer whether an account has the address or not; limited per client address."""

from __future__ import annotations

import re

import pytest
from django.core import mail
from django.test import Client

pytestmark = pytest.mark.usefixtures("private_cache")


@pytest.fixture
def alice(owner):  # type: ignore[no-untyped-def]
    owner.email = "alice@acme.example"
    owner.save()
    return owner


def reset_link() -> str:
    assert len(mail.outbox) == 1
    found = re.search(r"http://testserver(/password-reset/[^\s]+/)", mail.outbox[0].body)
    assert found, mail.outbox[0].body
    return found.group(1)


def test_a_reset_mail_carries_a_link_that_sets_a_new_password_once(alice):
    client = Client()
    sent = client.post("/password-reset/", {"email": "alice@acme.example"}, follow=True)
    assert "Check your mail" in sent.content.decode()
    message = mail.outbox[0]
    assert message.to == ["alice@acme.example"] and "reset your password" in message.subject
    assert "alice" in message.body
    form = client.get(reset_link(), follow=True)
    assert "Choose a new password" in form.content.decode() and 'name="new_password1"' in (
        form.content.decode())
    set_url = form.redirect_chain[-1][0]
    done = client.post(set_url, {"new_password1": "a brand new one", "new_password2":
                                 "a brand new one"}, follow=True)
    assert "Password set" in done.content.decode()
    alice.refresh_from_db()
    assert alice.check_password("a brand new one")
    again = Client().get(reset_link(), follow=True).content.decode()
    assert "This reset link is not valid" in again


def test_a_weak_new_password_is_refused_beside_its_field(alice):
    client = Client()
    client.post("/password-reset/", {"email": "alice@acme.example"})
    set_url = client.get(reset_link(), follow=True).redirect_chain[-1][0]
    refused = client.post(set_url, {"new_password1": "123", "new_password2": "123"})
    assert refused.status_code == 200
    assert 'id="err-new_password2"' in refused.content.decode()
    assert "too short" in refused.content.decode()
    alice.refresh_from_db()
    assert alice.check_password("correct horse battery staple")


def test_an_unknown_address_gets_the_same_answer_and_no_mail(db):
    sent = Client().post("/password-reset/", {"email": "nobody@example.com"}, follow=True)
    assert "Check your mail" in sent.content.decode()
    assert mail.outbox == []


def test_reset_requests_from_one_address_are_limited(alice, settings):
    settings.SIGNUP_LIMIT = 1
    client = Client()
    client.post("/password-reset/", {"email": "alice@acme.example"})
    refused = client.post("/password-reset/", {"email": "alice@acme.example"})
    assert refused.status_code == 429 and "Too many attempts" in refused.content.decode()
    assert len(mail.outbox) == 1


def test_the_sign_in_page_links_to_the_reset(db):
    assert 'href="/password-reset/"' in Client().get("/login/").content.decode()
