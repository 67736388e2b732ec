"""End to end in Debian's chromium, on a 390 px phone in dark mode: a visitor signs up a tenant,
invites a second user by link from the members page, and the second user creates an account
from the link, signs in again and sees the tenant. Every page on the way has no serious
accessibility violation and no sideways scroll."""

import pytest
from playwright.sync_api import Browser, Page, expect

from accounts.models import Membership
from tests.e2e.a11y import assert_accessible
from tests.e2e.conftest import sign_up

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PHONE = {"width": 390, "height": 844}


def readable(page: Page) -> None:
    assert_accessible(page)
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), page.url


def test_sign_up_invite_by_link_and_the_invitee_signs_in_to_the_tenant(portal_url,
                                                                      browser: Browser,
                                                                      settings):
    settings.SIGNUP = "open"
    # Sign-up attempts are counted per address in the cache: this run's own, not the shared one.
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                                   "LOCATION": "e2e-team"}}
    founder = browser.new_context(color_scheme="dark", viewport=PHONE).new_page()
    founder.goto(f"{portal_url}/login/")
    founder.get_by_role("link", name="Create a tenant and its account").click()
    expect(founder.get_by_role("heading", name="Create a tenant")).to_be_visible()
    readable(founder)
    sign_up(founder, "initech", "peter", "tps reports twice")

    founder.get_by_role("link", name="Members").click()
    expect(founder.get_by_role("heading", name="Members of initech")).to_be_visible()
    founder.locator("#invite select[name=role]").select_option("member")
    founder.get_by_role("button", name="Create the link").click()
    link = founder.get_by_label("Invitation link").input_value()
    assert "/join/" in link
    readable(founder)

    invitee = browser.new_context(color_scheme="dark", viewport=PHONE).new_page()
    invitee.goto(link)
    expect(invitee.get_by_role("heading", name="Join initech")).to_be_visible()
    readable(invitee)
    invitee.get_by_label("User name").fill("dana")
    invitee.get_by_label("Email").fill("dana@example.com")
    invitee.get_by_label("Password", exact=True).fill("a long passphrase")
    invitee.get_by_label("Password again").fill("a long passphrase")
    invitee.get_by_role("button", name="Create the account and join").click()
    expect(invitee.locator("#who")).to_have_text("dana")

    invitee.get_by_role("button", name="Sign out").click()
    invitee.goto(f"{portal_url}/login/")
    invitee.fill("#id_username", "dana")
    invitee.fill("#id_password", "a long passphrase")
    invitee.get_by_role("button", name="Sign in").click()
    expect(invitee.locator("#who")).to_have_text("dana")
    expect(invitee.locator("header")).to_contain_text("initech")
    invitee.goto(f"{portal_url}/members/")
    expect(invitee.locator("#members")).to_contain_text("peter")
    expect(invitee.locator("#members")).to_contain_text("dana")
    readable(invitee)
    assert Membership.objects.get(user__username="dana").tenant.name == "initech"
