"""The message browser's paging, start at an offset, permalinks and download in Debian's
chromium: Older and Newer keep the filters and cover every message once, a row's offset
opens that message, the page downloads as JSON lines; readable (axe-core) and within a 390 px
phone."""

import itertools
import json
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from replication.engine.store import Record
from replication.services import topic_create
from replication.services.messages import messages_produce
from tests.e2e.a11y import assert_accessible
from tests.e2e.conftest import off_loop
from tests.e2e.test_portal import sign_in

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def orders(owner, activity):
    off_loop(topic_create, actor=owner, stream=activity, name="orders", partitions=2)
    off_loop(messages_produce, actor=owner, stream=activity, topic="orders", records=[
        Record(f'{{"n": {i}}}'.encode(), key=f"cust-{i % 3}".encode(), partition=i % 2,
               timestamp_ms=1_790_000_000_000 + i * 1000) for i in range(24)])
    off_loop(messages_produce, actor=owner, stream=activity, topic="orders", records=[
        Record(None, key=b"gone", partition=0), Record(b"", key=b"", partition=0)])


def offsets(page: Page) -> list[str]:
    rows = page.locator("#messages tbody tr[data-offset]")
    return [rows.nth(i).get_attribute("data-offset") for i in range(rows.count())]


def test_page_older_and_newer_with_filters_kept(portal_url, page: Page, owner, activity,
                                                orders):
    sign_in(page, portal_url, "alice")
    page.goto(f"{portal_url}/streams/{activity.pk}/messages/")
    page.fill("#browse input[name=key]", "cust-")
    page.select_option("#browse select[name=limit]", "10")
    page.click("#browse button[type=submit]")
    seen = [offsets(page)]
    while page.locator("#page-older").count():
        page.click("#page-older")
        expect(page.locator("#browse input[name=key]")).to_have_value("cust-")
        seen.append(offsets(page))
    assert [len(p) for p in seen] == [10, 10, 4]  # the null and empty ones have other keys
    assert sorted(o for p in seen for o in p) == sorted(f"{i % 2}:{i // 2}" for i in range(24))
    page.click("#page-newer")
    assert offsets(page) == seen[1]


def test_start_at_an_offset_open_a_permalink_and_download(portal_url, browser: Browser,
                                                          tmp_path: Path, owner, activity,
                                                          orders):
    page = browser.new_context(viewport={"width": 390, "height": 844}).new_page()
    sign_in(page, portal_url, "alice")
    page.goto(f"{portal_url}/streams/{activity.pk}/messages/")
    page.fill("#browse input[name=partition]", "0")
    page.fill("#browse input[name=at_offset]", "10")
    page.select_option("#browse select[name=order]", "oldest")
    page.click("#browse button[type=submit]")
    assert offsets(page) == ["0:10", "0:11", "0:12", "0:13"]
    null, empty = (page.locator(f'tr[data-offset="0:{o}"] td.value') for o in (12, 13))
    expect(null).to_have_text("null")
    expect(empty).to_have_text("empty")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    assert_accessible(page)
    with page.expect_download() as download:
        page.click("#download")
    lines = download.value.path().read_text().splitlines()
    got = [json.loads(line) for line in lines]
    assert [(m["offset"], m["value"]) for m in got] == [
        (10, '{"n": 20}'), (11, '{"n": 22}'), (12, None), (13, "")]
    page.locator('tr[data-offset="0:11"] a.permalink').click()
    expect(page).to_have_url(f"{portal_url}/streams/{activity.pk}/messages/orders/0/11/")
    expect(page.locator("#message dd.value")).to_have_text('{"n": 22}')
    assert_accessible(page)
    page.click("#message-context")
    assert offsets(page)[0] == "0:11"


@pytest.mark.parametrize(("width", "scheme", "most_rows"), [(1280, "light", 1), (390, "dark", 4)])
def test_the_filters_are_one_compact_bar(portal_url, browser: Browser, owner, activity, orders,
                                         width, scheme, most_rows):
    """The everyday filters sit in one bar (one line on a desktop, a few on a phone, never
    wider than the screen); the rarer ones fold away and open when in use."""
    page = browser.new_context(color_scheme=scheme, viewport={"width": width, "height": 900}
                               ).new_page()
    sign_in(page, portal_url, "alice")
    page.goto(f"{portal_url}/streams/{activity.pk}/messages/?topic=orders")
    bar = page.locator("#browse > .filterbar")
    bottoms = sorted(box["y"] + box["height"] for box in (
        bar.locator("> *").nth(i).bounding_box() for i in range(bar.locator("> *").count())))
    # A line: the controls whose bottoms lie within half a control's height of each other.
    lines = 1 + sum(1 for a, b in itertools.pairwise(bottoms) if b - a > 20)
    assert lines <= most_rows, f"the filter bar takes {lines} lines at {width}px"
    assert bar.bounding_box()["height"] <= 60 * most_rows
    expect(page.locator("#browse details.more-filters")).not_to_have_attribute("open", "")
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    assert_accessible(page)
    page.goto(f"{portal_url}/streams/{activity.pk}/messages/?topic=orders&from_offset=3")
    expect(page.locator("#browse input[name=from_offset]")).to_be_visible()
    expect(page.locator("#browse input[name=from_offset]")).to_have_value("3")
    assert_accessible(page)
