"""End to end in Debian's chromium: sign in, create a stream, a replica request approved in
another browser context showing up live on the requester's page, and an outsider denied."""

import re

import pytest
from playwright.sync_api import Browser, Page, expect

from replication.models import ReplicaLink, Stream

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
PASSWORD = "correct horse battery staple"  # tests/factories.py


def sign_in(page: Page, base: str, username: str) -> None:
    page.goto(f"{base}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("#who")).to_have_text(username)


def test_sign_in_and_create_a_stream_with_live_ace_validation(portal_url, page, owner,
                                                             sanfrancisco):
    sign_in(page, portal_url, "alice")
    page.goto(f"{portal_url}/streams/")
    page.fill("input[name=path]", "/mapr/sanfrancisco/clicks")
    page.fill("input[name=consumeperm]", "u:alice |")
    expect(page.locator("#ace-consumeperm .ace-error")).to_contain_text("position")
    page.fill("input[name=consumeperm]", "u:alice | g:analysts")
    expect(page.locator("#ace-consumeperm .ace-ok")).to_contain_text("u:alice | g:analysts")
    page.click("#create-stream button[type=submit]")
    expect(page.locator("h1")).to_have_text("/mapr/sanfrancisco/clicks")
    assert Stream.objects.get(path="/mapr/sanfrancisco/clicks").consumeperm == (
        "u:alice | g:analysts")


def test_approval_in_another_context_shows_live_on_the_requesters_page(
    portal_url, browser: Browser, owner, carol, activity, mirror
):
    carol_page = browser.new_context().new_page()
    sign_in(carol_page, portal_url, "carol")
    carol_page.goto(f"{portal_url}/approvals/")
    expect(carol_page.locator("#approvals-list")).to_contain_text("Nothing waits")
    expect(carol_page.locator("#live-status")).to_have_attribute("data-state", "open")

    alice = browser.new_context().new_page()
    sign_in(alice, portal_url, "alice")
    alice.goto(f"{portal_url}/streams/{activity.pk}/replication/")
    alice.fill("#add-replica input[name=replica]", mirror.path)
    alice.click("#add-replica button[type=submit]")
    state = alice.locator('#replicas tr[data-replica="/mapr/newyork/mirror"] .replica-state')
    expect(state).to_have_text("REPLICA_STATE_WAITING_FOR_UPSTREAM")

    # A dropped socket reconnects (with backoff) before the approval arrives.
    expect(alice.locator("#live-status")).to_have_attribute("data-state", "open")
    alice.evaluate("window.streamgateLive.socket.close()")
    expect(alice.locator("#live-status")).to_have_attribute("data-state", "closed")
    expect(alice.locator("#live-status")).to_have_attribute("data-state", "open")

    # carol's open approvals page received the request live as well.
    card = carol_page.locator(".approval")
    expect(card).to_contain_text("Requested by alice")
    expect(card).to_contain_text("/mapr/sanfrancisco/activity")
    assert carol_page.evaluate("performance.getEntriesByType('navigation').length") == 1
    card.get_by_role("button", name="Approve").click()
    expect(carol_page.locator(".messages")).to_contain_text("approved")

    # No reload on alice's side: the websocket event swaps the fragment within a second.
    expect(state).to_have_text("REPLICA_STATE_REPLICATING", timeout=1000)
    assert alice.evaluate("performance.getEntriesByType('navigation').length") == 1


def test_outsider_is_denied_everywhere(portal_url, page, owner, carol, outsider, activity,
                                       mirror):
    # Straight to the table: a service here would publish from the test thread, where
    # Playwright's loop runs, and only log that it could not.
    link = ReplicaLink.objects.create(source=activity, replica=mirror, idx=1,
                                      networkcompression="lz4", created_by=owner)
    sign_in(page, portal_url, "mallory")
    for path in (f"/streams/{activity.pk}/", f"/streams/{activity.pk}/messages/",
                 f"/approvals/{link.pk}/"):
        assert page.goto(f"{portal_url}{path}").status == 404, path
    for path in ("/", "/streams/", "/approvals/"):
        page.goto(f"{portal_url}{path}")
        expect(page.locator("main")).not_to_contain_text(re.compile("activity|mirror"))
