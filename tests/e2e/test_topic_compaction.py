"""A topic's compaction set from the stream page's Topics tab in Debian's chromium (issue 31):
a changelog created compacted with its own lag, retention and dirty ratio, a bad ratio refused
beside its field in the CLI's words with what was typed kept, then the topic sent back to the
stream's policy; readable (axe-core) in dark mode on a 390 px phone."""

import pytest
from playwright.sync_api import Browser, expect

from replication.models import Topic
from tests.e2e.a11y import assert_accessible
from tests.e2e.conftest import off_loop
from tests.e2e.test_portal import sign_in
from tests.factories import ClusterFactory, StreamFactory

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
PHONE = {"width": 390, "height": 844}


def test_a_topics_compaction_is_set_refused_and_sent_back_from_the_topics_tab(
        portal_url, browser: Browser, owner, settings):
    settings.STORE_LAYOUT = "batches"  # a compacted topic needs a batch store
    stream = off_loop(lambda: StreamFactory(cluster=ClusterFactory(name="e2ecompact"),
                                            name="app", created_by=owner))
    page = browser.new_context(viewport=PHONE, color_scheme="dark").new_page()
    sign_in(page, portal_url, "alice")
    page.goto(f"{portal_url}/streams/{stream.pk}/topics/")
    create = page.locator("#create-topic")
    create.get_by_label("Name").fill("changelog")
    create.get_by_label("Cleanup policy").select_option("compact")
    create.get_by_label("Min compaction lag (ms)").fill("1000")
    create.get_by_label("Delete retention (ms)").fill("5000")
    create.get_by_label("Min cleanable dirty ratio").fill("2")
    create.get_by_role("button", name="Create topic").click()
    expect(page.locator("#err-mincleanabledirtyratio")).to_have_text(
        "the mincleanabledirtyratio field '2' is not a number from 0 to 1")
    expect(page.locator("#create-topic input[name=deleteretention]")).to_have_value("5000")
    expect(page.locator("#create-topic select[name=cleanuppolicy]")).to_have_value("compact")
    assert not off_loop(lambda: Topic.objects.filter(name="changelog").exists())
    assert_accessible(page)

    page.locator("#create-topic").get_by_label("Min cleanable dirty ratio").fill("0.25")
    page.locator("#create-topic").get_by_role("button", name="Create topic").click()
    expect(page.locator("ul.messages")).to_contain_text(
        "topic changelog created with 1 partitions, cleanup policy compact")
    topic = off_loop(lambda: Topic.objects.get(name="changelog"))
    assert (topic.cleanuppolicy, topic.mincompactionlag, topic.deleteretention,
            topic.mincleanabledirtyratio) == ("compact", 1000, 5000, 0.25)

    edit = page.locator("#edit-topic")
    edit.locator("select[name=topic]").select_option("changelog")
    edit.get_by_label("Cleanup policy").select_option("stream")
    edit.get_by_label("Delete retention (ms)").fill("-1")
    edit.get_by_role("button", name="Save topic").click()
    expect(page.locator("ul.messages")).to_contain_text("changelog saved")
    expect(page.locator("ul.messages")).to_contain_text("cleanup policy delete")
    topic = off_loop(lambda: Topic.objects.get(name="changelog"))
    assert (topic.cleanuppolicy, topic.mincompactionlag, topic.deleteretention) == (
        "", 1000, None)
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], f"the topics tab is {width}px wide"
    assert_accessible(page)
