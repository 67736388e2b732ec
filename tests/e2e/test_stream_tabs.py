"""A stream's consumer groups and messages tabs in Debian's chromium: the group a consumer
committed, with its lag, reset from the form; a Kafka group's live members and their
partitions, readable (axe-core); the message browser's filters, decoding, live
tail and test produce; another tenant denied."""

import pytest
from playwright.sync_api import Page, expect

from replication.engine.store import Record
from replication.groups.board import Placement, group_key, publish, snapshot
from replication.groups.model import GroupView, MemberView
from replication.services import topic_create
from replication.services.cursors import cursor_commit
from replication.services.messages import messages_produce
from tests.e2e.a11y import assert_accessible
from tests.e2e.conftest import off_loop
from tests.e2e.test_portal import sign_in

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def orders(owner, activity):
    off_loop(topic_create, actor=owner, stream=activity, name="orders", partitions=2)
    off_loop(messages_produce, actor=owner, stream=activity, topic="orders", records=[
        Record(f'{{"n": {i}}}'.encode(), key=f"cust-{i % 3}".encode(), partition=i % 2)
        for i in range(12)])


def test_groups_tab_shows_a_committed_group_and_resets_it(portal_url, page: Page, owner,
                                                          activity, orders):
    off_loop(cursor_commit, actor=owner, stream=activity, group="billing", topic="orders",
             partition=0, offset=2)
    sign_in(page, portal_url, "alice")
    page.goto(f"{portal_url}/streams/{activity.pk}/")
    page.get_by_role("tab", name="Consumer groups").click()
    group = page.locator('article[data-group="billing"]')
    expect(group.locator('[data-field="total-lag"]')).to_have_text("4 msgs behind")
    expect(group).to_contain_text("Members: none live")
    page.fill("#reset-offsets input[name=group]", "billing")
    page.check("#reset-offsets input[value=latest]")
    page.click("#reset-offsets button[type=submit]")
    preview = page.locator("#reset-preview")
    expect(preview.locator('tr[data-partition="0"] [data-field="current"]')).to_have_text("2")
    expect(preview.locator('tr[data-partition="0"] [data-field="new"]')).to_have_text("6")
    expect(preview.locator('tr[data-partition="1"] [data-field="lag"]')).to_have_text("0")
    expect(group.locator('[data-field="total-lag"]')).to_have_text("4 msgs behind")  # not yet
    assert_accessible(page)
    preview.get_by_role("button", name="Apply the reset").click()
    expect(page.locator("ul.messages")).to_contain_text("partition 0 to 6, partition 1 to 6")
    expect(group.locator('[data-field="total-lag"]')).to_have_text("0 msgs behind")


def test_message_browser_filters_decodes_and_produces(portal_url, page: Page, owner,
                                                      activity, orders):
    sign_in(page, portal_url, "alice")
    page.goto(f"{portal_url}/streams/{activity.pk}/messages/")
    rows = page.locator("#messages tbody tr[data-offset]")
    expect(rows).to_have_count(12)
    expect(rows.first).to_have_attribute("data-offset", "1:5")  # newest first
    page.fill("#browse input[name=key]", "cust-1")
    page.select_option("#browse select[name=decode]", "json")
    page.click("#browse button[type=submit]")
    expect(rows).to_have_count(4)  # n = 1, 4, 7, 10
    # one batch, one timestamp: newest first is then by partition, offset (n = 7 is 1:3)
    expect(rows.first.locator("td.value pre")).to_have_text('{\n  "n": 7\n}')
    page.fill("#browse input[name=key]", "")
    page.fill("#browse input[name=partition]", "0")
    page.locator("#browse details.more-filters summary").click()
    page.fill("#browse input[name=from_offset]", "1")
    page.fill("#browse input[name=to_offset]", "2")
    page.click("#browse button[type=submit]")
    expect(rows).to_have_count(2)
    page.fill("#produce input[name=key]", "cust-9")
    page.fill("#produce textarea[name=value]", "hello from the portal")
    page.fill("#produce textarea[name=headers]", "trace=t1")
    page.click("#produce button[type=submit]")
    expect(page.locator("ul.messages")).to_contain_text("produced to orders")
    first = page.locator("#messages tbody tr[data-offset]").first
    expect(first).to_contain_text("hello from the portal")
    expect(first).to_contain_text("trace=t1")



def test_groups_tab_shows_a_kafka_groups_live_members_readably(portal_url, page: Page, owner,
                                                              activity, orders):
    off_loop(cursor_commit, actor=owner, stream=activity, group="billing", topic="orders",
             partition=1, offset=5)
    view = GroupView("billing", "Stable", 2, "consumer", "range", "m-1", [
        MemberView("m-1", None, "billing-1", "/10.0.0.1", b"", b""),
        MemberView("m-2", None, "billing-2", "/10.0.0.2", b"", b"")])
    placed = {m: [Placement(str(activity.uuid), activity.path, "orders", p, "orders")]
              for m, p in (("m-1", 0), ("m-2", 1))}
    off_loop(publish, group_key(activity.tenant_id, "billing"), snapshot(view, placed))
    sign_in(page, portal_url, "alice")
    page.goto(f"{portal_url}/streams/{activity.pk}/groups/")
    group = page.locator('article[data-group="billing"]')
    expect(group.locator('[data-field="state"]')).to_have_text("Stable")
    expect(group.locator('tr[data-member="m-2"] [data-field="assigned"]')).to_have_text(
        "orders:1")
    expect(group.locator('tr[data-partition="orders:1"] [data-field="owner"]')).to_have_text(
        "billing-2")
    assert_accessible(page)

@pytest.mark.parametrize("how", ["url", "checkbox"])
def test_live_tail_shows_new_messages_without_a_reload(portal_url, page: Page, owner,
                                                       activity, orders, how):
    """Opened with tail=on, or by ticking Live tail: no Show needed."""
    sign_in(page, portal_url, "alice")
    if how == "url":
        page.goto(f"{portal_url}/streams/{activity.pk}/messages/?topic=orders&tail=on")
    else:
        page.goto(f"{portal_url}/streams/{activity.pk}/messages/?topic=orders")
        page.get_by_label("Live tail").check()
        expect(page.locator('#message-results[data-tail="on"]')).to_have_count(1)
    loads = page.evaluate("performance.getEntriesByType('navigation').length")
    off_loop(messages_produce, actor=owner, stream=activity, topic="orders",
             records=[Record(b"tail-me", partition=0)])
    expect(page.locator("#messages tbody tr").first).to_contain_text("tail-me", timeout=10_000)
    assert page.evaluate("performance.getEntriesByType('navigation').length") == loads


def test_another_tenant_gets_neither_tab(portal_url, page: Page, outsider, activity, orders):
    sign_in(page, portal_url, "mallory")
    for tab in ("groups", "messages"):
        response = page.goto(f"{portal_url}/streams/{activity.pk}/{tab}/")
        assert response.status == 404
