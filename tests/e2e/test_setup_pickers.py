"""End to end in Debian's chromium: autosetup's fields offer the user's streams and a path on
each cluster as searchable lists; another tenant's stream is refused beside the field as not
the user's, in the page's words; axe-core in both themes, within a 390 px phone."""

import pytest
from playwright.sync_api import Browser, expect

from tests.e2e.a11y import assert_accessible
from tests.e2e.test_portal import sign_in
from tests.factories import StreamFactory

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_autosetup_picks_from_the_users_streams_and_says_whose_a_stream_is(
        portal_url, browser: Browser, scheme, owner, outsider, activity, newyork):
    theirs = StreamFactory(path="/mapr/sanfrancisco/secret", cluster=activity.cluster,
                           tenant=outsider.memberships.get().tenant, created_by=outsider)
    page = browser.new_context(color_scheme=scheme, viewport={"width": 390, "height": 844}
                               ).new_page()
    sign_in(page, portal_url, "alice")
    page.goto(f"{portal_url}/setup/auto/")
    source = page.locator("#autosetup-form input[name=source]")
    expect(source).to_have_attribute("list", "source-choices")
    expect(page.locator("#source-choices option")).to_have_count(1)
    assert page.locator("#source-choices option").get_attribute("value") == activity.path
    source.fill(theirs.path)
    page.fill("#autosetup-form input[name=replica]", "/mapr/newyork/mine")
    page.click("#autosetup-form button[type=submit]")
    expect(page.locator("#err-source")).to_have_text(
        "stream /mapr/sanfrancisco/secret is not yours (another tenant's): pick one of your "
        "streams as the source")
    expect(source).to_have_attribute("aria-invalid", "true")
    replicas = page.locator("#replica-choices option")
    expect(replicas).to_have_count(2)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    assert_accessible(page)
