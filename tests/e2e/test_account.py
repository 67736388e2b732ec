"""End to end in Debian's chromium: from the user name in the header to the account page, a
SCRAM password set and listed, then deleted; an API token made, its secret seen once and
used against the API."""

import json
import urllib.error
import urllib.request

import pytest
from playwright.sync_api import expect

from accounts.models import ScramCredential
from tests.e2e.test_portal import sign_in

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
