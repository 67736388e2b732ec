"""The one-click repair in Debian's chromium: a replica verification found diverged shows
Repair on its source's stream page; clicking it runs the link's diffstreams -repair (real
Spark, on the portal's side as in the embedded default) and the page then shows it equal."""

import pytest
from playwright.sync_api import Page, expect

from replication.models import ReplicaLink
from tests.e2e.conftest import off_loop
from tests.e2e.test_portal import sign_in
from tests.portal.test_repair import diverge

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_repair_on_the_stream_page_leaves_the_replica_verified_equal(
        portal_url, page: Page, settings, spark, owner, activity, activity_ny):
    off_loop(diverge, owner, activity, activity_ny)
    settings.CELERY_TASK_ALWAYS_EAGER = True  # the job runs on a thread beside the portal
    sign_in(page, portal_url, "alice")
    page.goto(f"{portal_url}/streams/{activity.pk}/replication/")
    row = page.locator("#verification tbody tr", has_text=activity_ny.path)
    expect(row).to_contain_text("differs from")
    expect(row).to_contain_text("partition 1 offset 4")
    row.get_by_role("button", name=f"Repair {activity_ny.path}").click()
    expect(page.locator(".messages")).to_contain_text(f"repair of {activity_ny.path} started")
    card = page.locator("#job-card")
    expect(card.locator('[data-field="state"]')).to_have_text("SUCCEEDED", timeout=120_000)
    page.goto(f"{portal_url}/streams/{activity.pk}/replication/")
    row = page.locator("#verification tbody tr", has_text=activity_ny.path)
    expect(row.locator("td").nth(2)).to_have_text("equal")
    expect(row.get_by_role("button", name=f"Repair {activity_ny.path}")).to_have_count(0)
    assert off_loop(lambda: ReplicaLink.objects.get().verify_error) == ""
