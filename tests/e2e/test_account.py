"""End to end in Debian's chromium: from the user name in the header to the account page, a
SCRAM password set and listed, then deleted."""

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
