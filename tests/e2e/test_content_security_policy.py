"""The Content-Security-Policy in Debian's chromium (issue 27): every page arrives with it, the
browser refuses nothing on any page (no inline script, handler or style is left), and what
used inline code still works under it: the tenant switcher, the live socket, the topology
graph and the API's Swagger UI."""

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, expect

from replication.models import ReplicaLink
from tests.e2e.test_portal import sign_in
from tests.e2e.test_readable import PAGES, _job, scene  # noqa: F401  (scene: a fixture)
from tests.factories import MembershipFactory, TenantFactory

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def refusals(page: Page) -> list[str]:
    """The browser's CSP refusals on this page, as it logs them to the console."""
    seen: list[str] = []

    def on_console(message: ConsoleMessage) -> None:
        if "Content Security Policy" in message.text:
            seen.append(f"{page.url}: {message.text}")

    page.on("console", on_console)
    return seen


def test_every_page_carries_the_policy_and_the_browser_refuses_nothing(
        portal_url, browser: Browser, owner, activity, activity_ny, scene):  # noqa: F811
    job = _job(activity)
    waiting = ReplicaLink.objects.get(replica__name="waits").pk
    MembershipFactory(user=owner, tenant=TenantFactory(name="initech"))  # the switcher shows
    page = browser.new_context().new_page()
    refused = refusals(page)
    sign_in(page, portal_url, "alice")
    for path in [*PAGES, "/api/v1/docs/", f"/api/v1/streams/{activity.uuid}/"]:
        response = page.goto(portal_url + path.format(a=activity.pk, ny=activity_ny.pk, job=job,
                                                      link=scene.pk, waiting=waiting,
                                                      cl=activity.cluster.name))
        assert response is not None and response.ok, path
        policy = response.headers.get("content-security-policy", "")
        assert "script-src 'self'" in policy and "'unsafe-inline'" not in policy.split(
            "script-src")[1].split(";")[0], (path, policy)
        if path == "/topology/":
            expect(page.locator("#topology")).to_have_attribute("data-ready", "1")
        if path == "/api/v1/docs/":  # Swagger UI's script, now a file of its own, ran
            expect(page.locator(".swagger-ui .opblock").first).to_be_visible()
        if not path.startswith("/api/"):
            expect(page.locator("#live-status")).to_have_attribute("data-state", "open")
    assert refused == []


def test_the_tenant_switcher_switches_under_the_policy(portal_url, page: Page, owner,
                                                       activity):
    MembershipFactory(user=owner, tenant=TenantFactory(name="initech"))
    refused = refusals(page)
    sign_in(page, portal_url, "alice")
    page.goto(f"{portal_url}/streams/")
    expect(page.get_by_text("/mapr/sanfrancisco/activity")).to_be_visible()
    with page.expect_navigation():
        page.select_option("select[name=tenant]", label="initech")
    expect(page.locator("select[name=tenant] option:checked")).to_have_text("initech")
    expect(page.get_by_text("/mapr/sanfrancisco/activity")).to_have_count(0)
    assert refused == []
