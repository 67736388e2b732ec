"""End to end in Debian's chromium: from the user name in the header to the account page, a
SCRAM password set and listed, then deleted; an API token made, its secret seen once and
used against the API; a second factor set up by scanning its QR code; another browser's
session signed out from the sessions list; a forgotten password reset by the mailed link."""

import json
import re
import time
import urllib.error
import urllib.request

import pytest
from django.core import mail
from playwright.sync_api import Browser, expect

from accounts.models import ScramCredential
from tests.e2e.a11y import assert_accessible
from tests.e2e.test_portal import PASSWORD, sign_in

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_set_and_delete_a_scram_password_on_the_account_page(portal_url, page, owner):
    sign_in(page, portal_url, "alice")
    page.click("#who")
    expect(page.locator("h1")).to_have_text("Account: alice")
    page.select_option("#set-scram select[name=mechanism]", "SCRAM-SHA-512")
    page.fill("#set-scram input[name=password]", "from the browser")
    page.fill("#set-scram input[name=confirm]", "from the browser")
    page.click("#set-scram button[type=submit]")
    row = page.locator("#scram-credentials tr", has_text="SCRAM-SHA-512")
    expect(row).to_contain_text("8192")
    expect(page.locator("#scram-credentials tr", has_text="SCRAM-SHA-256")).to_contain_text(
        "not set")
    assert list(ScramCredential.objects.values_list("mechanism", flat=True)) == ["SCRAM-SHA-512"]
    row.get_by_role("button", name="Delete").click()
    expect(row).to_contain_text("not set")
    assert not ScramCredential.objects.exists()


def test_make_a_read_only_token_in_the_browser_see_its_secret_once_and_use_it(
        portal_url, page, owner, activity):
    sign_in(page, portal_url, "alice")
    page.goto(f"{portal_url}/account/")
    page.get_by_role("link", name="Manage API tokens").click()
    page.fill("#make-token input[name=name]", "from the browser")
    page.select_option("#make-token select[name=scope]", "read")
    page.select_option("#make-token select[name=expires]", "30")
    page.click("#make-token button[type=submit]")
    secret = page.locator("#token-secret").input_value()
    copy = page.locator("#new-token button[data-copy]")
    copy.click()
    expect(copy).to_have_text("Copied")  # the static copy.js ran under the CSP
    expect(page.locator("#tokens tr", has_text="from the browser")).to_contain_text("read")

    def call(method: str, path: str, body: bytes | None = None) -> tuple[int, dict]:
        request = urllib.request.Request(
            f"{portal_url}{path}", data=body, method=method,
            headers={"Authorization": f"Token {secret}", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as refused:
            return refused.code, json.loads(refused.read())

    status, listed = call("GET", "/api/v1/streams/")
    assert status == 200 and [s["path"] for s in listed["results"]] == [activity.path]
    status, refused = call("POST", f"/api/v1/streams/{activity.uuid}/topics/",
                           json.dumps({"name": "new", "partitions": 1}).encode())
    assert status == 403 and "scope is read-only" in refused["detail"]
    page.goto(f"{portal_url}/account/tokens/")
    assert secret not in page.content()
    # Its expiry and its last use (just now) are dates: no "never" in its row.
    expect(page.locator("#tokens tr", has_text="from the browser")).not_to_contain_text("never")


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_a_second_factor_set_up_by_scanning_its_qr_code(portal_url, browser, scheme, owner):
    """The QR code as the browser draws it (a screenshot, read by OpenCV's QR reader) is the
    setup URI; the code it yields turns the second factor on. Accessible in both themes, and
    within a 390 px phone."""
    import cv2
    import numpy

    from accounts import totp

    page = browser.new_context(color_scheme=scheme, viewport={"width": 390, "height": 844}
                               ).new_page()
    sign_in(page, portal_url, "alice")
    page.goto(f"{portal_url}/account/")
    page.get_by_role("button", name="Set up a second factor").click()
    qr = page.get_by_role("img", name="QR code of the setup URI")
    expect(qr).to_be_visible()
    shot = numpy.frombuffer(qr.screenshot(), dtype=numpy.uint8)
    uri, _, _ = cv2.QRCodeDetector().detectAndDecode(cv2.imdecode(shot, cv2.IMREAD_GRAYSCALE))
    assert uri == page.locator("#otpauth-uri").inner_text()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    assert_accessible(page)
    secret = uri.split("secret=")[1].split("&")[0]
    page.fill("#totp-confirm input[name=code]", totp.code_at(secret, time.time()))
    page.click("#totp-confirm button[type=submit]")
    expect(page.locator("#recovery-codes li")).to_have_count(10)
    expect(qr).to_have_count(0)


def test_signing_out_another_session_signs_that_browser_out(portal_url, browser: Browser,
                                                             owner):
    here = browser.new_context(user_agent="streamgate-e2e laptop").new_page()
    there = browser.new_context(user_agent="streamgate-e2e phone").new_page()
    sign_in(here, portal_url, "alice")
    sign_in(there, portal_url, "alice")
    here.goto(f"{portal_url}/account/")
    sessions = here.locator("#sessions tbody tr")
    expect(sessions).to_have_count(2)
    expect(here.locator("#sessions tr.current")).to_contain_text(
        "streamgate-e2e laptop (this browser)")
    assert_accessible(here)
    phone = here.locator("#sessions tbody tr", has_text="streamgate-e2e phone")
    phone.get_by_role("button", name="Sign out").click()
    expect(here.locator("ul.messages")).to_contain_text("that session is signed out")
    expect(sessions).to_have_count(1)
    expect(here.locator("#who")).to_have_text("alice")  # this one stays signed in

    there.goto(f"{portal_url}/account/")
    expect(there).to_have_url(re.compile(r"/login/\?next=/account/$"))
    expect(there.locator("#who")).to_have_count(0)
    here.reload()
    expect(here.locator("#sessions tbody tr")).to_have_count(1)


@pytest.mark.usefixtures("private_cache")  # the reset's per-address limit: this test's
def test_a_forgotten_password_is_reset_by_the_mailed_link(portal_url, page, owner):
    owner.email = "alice@acme.example"
    owner.save()
    page.goto(f"{portal_url}/login/")
    page.get_by_role("link", name="Forgot your password?").click()
    page.get_by_label("Email").fill("alice@acme.example")
    page.get_by_role("button", name="Send the link").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Check your mail")
    assert len(mail.outbox) == 1 and mail.outbox[0].to == ["alice@acme.example"]
    link = re.search(r"http://\S+/password-reset/\S+/", mail.outbox[0].body)
    assert link and link.group(0).startswith(portal_url), mail.outbox[0].body

    page.goto(link.group(0))
    expect(page.get_by_role("heading", level=1)).to_have_text("Choose a new password")
    page.get_by_label("New password", exact=True).fill("short")
    page.get_by_label("New password again").fill("short")
    page.get_by_role("button", name="Set the password").click()
    expect(page.locator("#err-new_password2")).to_contain_text("too short")
    assert_accessible(page)
    page.get_by_label("New password", exact=True).fill("a brand new passphrase")
    page.get_by_label("New password again").fill("a brand new passphrase")
    page.get_by_role("button", name="Set the password").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Password set")

    page.get_by_role("link", name="Sign in").click()
    page.fill("#id_username", "alice")
    page.fill("#id_password", PASSWORD)  # the old one no longer works
    page.click("button[type=submit]")
    expect(page.locator("p.error")).to_contain_text("didn't match")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "a brand new passphrase")
    page.click("button[type=submit]")
    expect(page.locator("#who")).to_have_text("alice")
    page.goto(link.group(0))  # the link worked once
    expect(page.locator("main")).to_contain_text("This reset link is not valid")
