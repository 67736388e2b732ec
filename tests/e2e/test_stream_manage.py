"""The stream page in Debian's chromium: its tabs followed with the keyboard (ARIA tabs:
arrows move, Enter opens) and without JavaScript; a topic created, given partitions and
deleted after its name is typed; a live consumer group's offset reset refused, then
previewed and applied once the group is gone; each page readable (axe-core) in dark mode on
a 390 px phone."""

import pytest
from django.utils import timezone
from playwright.sync_api import Browser, Page, expect

from replication.engine.store import Record
from replication.groups.board import Placement, group_key, publish, snapshot
from replication.groups.model import GroupView, MemberView
from replication.models import KafkaGroup, Topic
from replication.services import topic_create
from replication.services.cursors import cursor_commit
from replication.services.messages import messages_produce
from tests.e2e.a11y import assert_accessible
from tests.e2e.conftest import off_loop
from tests.e2e.test_portal import sign_in

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
PHONE = {"width": 390, "height": 844}


def test_tabs_follow_the_arrow_keys_and_work_without_javascript(portal_url, browser: Browser,
                                                                owner, activity):
    page = browser.new_context().new_page()
    sign_in(page, portal_url, "alice")
    page.goto(f"{portal_url}/streams/{activity.pk}/")
    overview = page.get_by_role("tab", name="Overview")
    expect(overview).to_have_attribute("aria-selected", "true")
    expect(page.get_by_role("tabpanel")).to_contain_text("Health")
    overview.focus()
    page.keyboard.press("ArrowRight")
    expect(page.get_by_role("tab", name="Topics")).to_be_focused()
    page.keyboard.press("End")
    expect(page.get_by_role("tab", name="Access")).to_be_focused()
    page.keyboard.press("ArrowRight")  # wraps to the first
    expect(overview).to_be_focused()
    page.keyboard.press("ArrowLeft")
    page.keyboard.press("Enter")
    expect(page).to_have_url(f"{portal_url}/streams/{activity.pk}/access/")
    expect(page.get_by_role("tab", name="Access")).to_have_attribute("aria-selected", "true")
    # Only the current tab is in the Tab order; Tab goes on into the panel.
    expect(page.get_by_role("tab", name="Topics")).to_have_attribute("tabindex", "-1")
    assert_accessible(page)

    plain = browser.new_context(java_script_enabled=False).new_page()
    sign_in(plain, portal_url, "alice")
    plain.goto(f"{portal_url}/streams/{activity.pk}/")
    plain.get_by_role("tab", name="Settings").click()
    expect(plain).to_have_url(f"{portal_url}/streams/{activity.pk}/settings/")
    expect(plain.locator("#stream-info")).to_contain_text(activity.path)


def test_a_topic_is_created_given_partitions_and_deleted_from_the_topics_tab(
        portal_url, browser: Browser, owner, activity):
    page = browser.new_context(viewport=PHONE, color_scheme="dark").new_page()
    sign_in(page, portal_url, "alice")
    page.goto(f"{portal_url}/streams/{activity.pk}/topics/")
    form = page.locator("#create-topic")
    form.get_by_label("Name").fill("bad name")
    form.get_by_role("button", name="Create topic").click()
    expect(page.locator("#err-topic")).to_contain_text("invalid topic name")
    expect(page.locator("#create-topic input[name=topic]")).to_have_value("bad name")
    assert_accessible(page)
    page.locator("#create-topic input[name=topic]").fill("orders")
    page.locator("#create-topic input[name=partitions]").fill("2")
    page.locator("#create-topic").get_by_role("button", name="Create topic").click()
    expect(page.locator("ul.messages")).to_contain_text("topic orders created with 2 partitions")
    expect(page.locator('#partitions tr[data-topic="orders"]')).to_be_visible()

    edit = page.locator("#edit-topic")
    edit.locator("select[name=topic]").select_option("orders")
    edit.locator("input[name=partitions]").fill("1")
    edit.get_by_role("button", name="Save topic").click()
    expect(page.locator("#err-edit-partitions")).to_contain_text("can only grow")
    page.locator("#edit-topic input[name=partitions]").fill("3")
    page.locator("#edit-topic").get_by_role("button", name="Save topic").click()
    expect(page.locator("ul.messages")).to_contain_text("orders saved: 3 partitions")
    expect(page.locator("#partitions .hwm")).to_have_count(3)
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], f"the topics tab is {width}px wide"

    page.get_by_role("link", name="Delete topic orders").click()
    page.get_by_label("Type orders to confirm").fill("order")
    page.get_by_role("button", name="Delete the topic").click()
    expect(page.locator("#err-confirm")).to_contain_text("type the topic's name, orders")
    assert_accessible(page)
    page.get_by_label("Type orders to confirm").fill("orders")
    page.get_by_role("button", name="Delete the topic").click()
    expect(page.locator("ul.messages")).to_contain_text("topic orders deleted")
    expect(page.locator('#partitions tr[data-topic="orders"]')).to_have_count(0)
    assert not off_loop(lambda: Topic.objects.filter(name="orders").exists())


def test_a_live_groups_reset_is_refused_then_previewed_and_applied_once_it_is_gone(
        portal_url, page: Page, owner, activity):
    off_loop(topic_create, actor=owner, stream=activity, name="orders", partitions=1)
    off_loop(messages_produce, actor=owner, stream=activity, topic="orders",
             records=[Record(b"m") for _ in range(5)])
    off_loop(cursor_commit, actor=owner, stream=activity, group="billing", topic="orders",
             partition=0, offset=1)
    view = GroupView("billing", "Stable", 1, "consumer", "range", "m-1",
                     [MemberView("m-1", None, "billing-1", "/10.0.0.1", b"", b"")])
    placed = {"m-1": [Placement(str(activity.uuid), activity.path, "orders", 0, "orders")]}
    off_loop(publish, group_key(activity.tenant_id, "billing"), snapshot(view, placed))
    sign_in(page, portal_url, "alice")
    page.goto(f"{portal_url}/streams/{activity.pk}/groups/")
    form = page.locator("#reset-offsets")
    form.locator("input[name=group]").fill("billing")
    form.locator("input[value=earliest]").check()
    form.get_by_role("button", name="Preview the reset").click()
    expect(page.locator("#err-group")).to_contain_text("group billing has 1 live member")
    expect(page.locator("#reset-preview")).to_have_count(0)

    off_loop(lambda: KafkaGroup.objects.update(expires=timezone.now()))  # its consumers left
    page.locator("#reset-offsets").get_by_role("button", name="Preview the reset").click()
    row = page.locator('#reset-preview tr[data-partition="0"]')
    expect(row.locator('[data-field="current"]')).to_have_text("1")
    expect(row.locator('[data-field="new"]')).to_have_text("0")
    expect(row.locator('[data-field="lag"]')).to_have_text("5")
    page.get_by_role("button", name="Apply the reset").click()
    expect(page.locator("ul.messages")).to_contain_text("offsets of group billing on orders "
                                                        "reset: partition 0 to 0")
    group = page.locator('article[data-group="billing"]')
    expect(group.locator('[data-field="total-lag"]')).to_have_text("5 msgs behind")


def test_settings_and_access_tabs_change_the_stream_and_check_a_member(
        portal_url, browser: Browser, owner, member, activity):
    page = browser.new_context(viewport=PHONE, color_scheme="dark").new_page()
    sign_in(page, portal_url, "alice")
    page.goto(f"{portal_url}/streams/{activity.pk}/settings/")
    form = page.locator("#edit-settings")
    form.get_by_label("Messages kept for, in seconds (0: forever)").fill("86400")
    form.get_by_label("Create topics on first use (autocreate)").uncheck()
    form.get_by_role("button", name="Save settings").click()
    expect(page.locator("ul.messages")).to_contain_text("settings saved")
    expect(page.locator("#stream-info")).to_contain_text("1 d")
    assert off_loop(lambda: type(activity).objects.get(pk=activity.pk).ttl) == 86400

    page.get_by_role("tab", name="Access").click()
    page.locator("#edit-aces input[name=consumeperm]").fill("u:alice | u:bob")
    page.get_by_role("button", name="Save ACEs").click()
    expect(page.locator("ul.messages")).to_contain_text("ACEs saved")
    page.get_by_label("A member of acme").fill("bob")
    page.get_by_role("button", name="Check").click()
    expect(page.locator('#perms-theirs tr[data-perm="consumeperm"] [data-field="held"]')
           ).to_have_text("yes")
    expect(page.locator('#perms-theirs tr[data-perm="adminperm"] [data-field="held"]')
           ).to_have_text("no")
    assert_accessible(page)
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], f"the access tab is {width}px wide"
