"""End to end in Debian's chromium: from the navigation to the usage page, the plan's bars,
a period chosen, and the CSV downloaded with the page's rows."""

import csv
import io
from pathlib import Path

import pytest
from playwright.sync_api import expect

from accounts.models import Plan
from replication.engine import Record
from replication.services import topic_create
from replication.services.messages import messages_produce
from tests.e2e.conftest import off_loop
from tests.e2e.test_portal import sign_in

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_the_usage_page_shows_the_plan_and_downloads_its_rows(portal_url, page, owner,
                                                              activity):
    tenant = owner.memberships.get().tenant
    tenant.plan = Plan.objects.create(name="team", max_streams=2, max_stored_bytes=1000)
    tenant.save()
    off_loop(topic_create, actor=owner, stream=activity, name="clicks", partitions=1)
    off_loop(messages_produce, actor=owner, stream=activity, topic="clicks",
             records=[Record(b"x" * 100)])
    sign_in(page, portal_url, "alice")
    page.get_by_role("link", name="Usage").click()
    expect(page.locator("h2#plan-title")).to_have_text("Plan: team")
    streams = page.locator("#plan-use li[data-limit='Streams']")
    expect(streams.locator("meter")).to_have_attribute("value", "1")
    expect(streams).to_contain_text("1 of 2 (50%)")
    expect(page.locator("#plan-use li[data-limit='Stored bytes']")).to_contain_text("(10%)")
    row = page.locator(f"#usage-rows tr[data-path='{activity.path}']")
    expect(row.locator("[data-field=produced_messages]")).to_have_text("1")
    page.select_option("#usage-days", "7")
    expect(page).to_have_url(f"{portal_url}/usage/?days=7")
    with page.expect_download() as download:
        page.click("#usage-csv")
    rows = list(csv.reader(io.StringIO(Path(download.value.path()).read_text())))
    assert rows[0][:3] == ["day", "path", "produced_messages"]
    assert [(r[1], r[2], r[3]) for r in rows[1:]] == [(activity.path, "1", "100")]
