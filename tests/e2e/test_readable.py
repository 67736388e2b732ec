"""Every page in Debian's chromium: no serious or critical accessibility violation (axe-core),
in light and dark mode; the overview fits a 390 px phone with no horizontal scroll; the
replica table's buttons stay inside their card at 1280 px; the overview's to-do item fixes
what it names."""

import pytest
from playwright.sync_api import Browser, Page, expect

from replication import services
from replication.engine.store import Record
from replication.models import ReplicaLink
from replication.services import replica_add, replica_pause, topic_create, upstream_add
from replication.services.messages import messages_produce
from tests.e2e.a11y import assert_accessible
from tests.e2e.conftest import off_loop
from tests.e2e.test_portal import sign_in
from tests.e2e.test_schemas import _register
from tests.factories import StreamFactory
from tests.portal.registry.helpers import USER

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def scene(owner, activity, activity_ny, newyork):
    """A replicated pair, a paused one, and one waiting for approval: every state on a page."""
    off_loop(topic_create, actor=owner, stream=activity, name="clicks", partitions=2)
    off_loop(messages_produce, actor=owner, stream=activity, topic="clicks", records=[
        Record(b'{"page": "/home"}', key=b"u1", partition=0), Record(None, key=b"u2", partition=0),
        Record(b"", key=None, partition=1, headers=(("trace", b"\xff\x00"),))])  # browser rows
    link = off_loop(replica_add, actor=owner, source=activity, replica=activity_ny)
    off_loop(upstream_add, actor=owner, replica=activity_ny, source=activity)
    paused_to = StreamFactory(cluster=newyork, name="archive", created_by=owner)
    off_loop(replica_add, actor=owner, source=activity, replica=paused_to)
    off_loop(upstream_add, actor=owner, replica=paused_to, source=activity)
    off_loop(replica_pause, actor=owner, source=activity, replica=paused_to)
    off_loop(replica_add, actor=owner, source=activity_ny,
             replica=StreamFactory(cluster=newyork, name="waits", created_by=owner))
    off_loop(_register, owner, "clicks-value", USER)  # the schema subject's page
    return link


def reset_link(user) -> str:  # type: ignore[no-untyped-def]
    """The path a password-reset mail links to (it opens the form to choose a password)."""
    from django.contrib.auth.tokens import default_token_generator
    from django.utils.encoding import force_bytes
    from django.utils.http import urlsafe_base64_encode

    uid = urlsafe_base64_encode(force_bytes(user.pk))
    return f"/password-reset/{uid}/{default_token_generator.make_token(user)}/"


def _job(activity) -> int:
    from replication.models import Job

    return Job.objects.create(kind="diffstreams", tenant=activity.tenant, source=activity,
                              source_path=activity.path, destination_path="/mapr/newyork/x",
                              options={"repair": False}).pk


PAGES = ["/", "/topology/", "/streams/", "/streams/{a}/", "/streams/{a}/messages/",
         "/streams/{a}/messages/clicks/0/0/", "/streams/{a}/groups/", "/groups/",
         "/streams/{a}/topics/", "/streams/{a}/replication/",
         "/streams/{a}/settings/", "/streams/{a}/access/?who=alice",
         "/streams/{a}/topics/clicks/delete/",
         "/approvals/", "/audit/", "/setup/", "/jobs/", "/jobs/{job}/",
         "/kafka/", "/setup/manual/", "/setup/manual/{a}/{ny}/3/", "/setup/auto/",
         "/setup/auto/{link}/", "/streams/{ny}/failover/", "/streams/{ny}/failback/",
         "/approvals/{waiting}/", "/account/", "/members/", "/account/tokens/", "/usage/",
         "/schemas/", "/schemas/register/", "/clusters/", "/clusters/{cl}/",
         "/schemas/subjects/clicks-value/"]


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_every_page_has_no_serious_accessibility_violation(portal_url, browser: Browser,
                                                           scheme, owner, activity,
                                                           activity_ny, scene):
    job = _job(activity)
    waiting = ReplicaLink.objects.get(replica__name="waits").pk
    page = browser.new_context(color_scheme=scheme).new_page()
    reset, spent = reset_link(owner), "/password-reset/x/spent-link/"
    for path in ("/login/", "/signup/", "/password-reset/", "/password-reset/sent/", reset,
                 spent, "/password-reset/done/", "/no-such-page/"):  # signed out
        page.goto(portal_url + path)
        if path in (reset, spent):  # the mailed link's form, or why it no longer works
            expect(page.locator("#password-set")).to_have_count(1 if path == reset else 0)
        assert_accessible(page)
    sign_in(page, portal_url, "alice")
    for path in PAGES:
        response = page.goto(portal_url + path.format(a=activity.pk, ny=activity_ny.pk, job=job,
                                                      link=scene.pk, waiting=waiting,
                                                      cl=activity.cluster.name))
        assert response is not None and response.ok, path  # the page itself, not a 404
        if path == "/topology/":
            expect(page.locator("#topology")).to_have_attribute("data-ready", "1")
        if path in ("/", "/streams/{a}/"):  # the throughput charts drawn, axes and all
            svgs = page.locator("[data-throughput-url][data-ready='1'] svg.chart.throughput")
            expect(svgs.first).to_be_visible()
            expect(svgs.locator("line.grid")).to_have_count(3 * svgs.count())
        assert_accessible(page)
    # A refused form: its error beside the field, announced and tied to the input.
    page.goto(f"{portal_url}/streams/")
    page.fill("#create-stream input[name=path]", "nowhere")
    page.click("#create-stream button[type=submit]")
    expect(page.locator("#err-path")).to_contain_text("write it as /mapr/")
    expect(page.locator("#create-stream input[name=path]")).to_have_value("nowhere")
    assert_accessible(page)


def test_every_page_fits_a_phone_with_no_horizontal_scroll(portal_url, browser: Browser, owner,
                                                           activity, activity_ny, scene):
    job = _job(activity)
    waiting = ReplicaLink.objects.get(replica__name="waits").pk
    off_loop(services.stream_edit, actor=owner, stream=activity, ttl=604800)  # audit JSON
    page = browser.new_context(viewport={"width": 390, "height": 844}).new_page()
    sign_in(page, portal_url, "alice")
    wide = []
    for path in PAGES:
        page.goto(portal_url + path.format(a=activity.pk, ny=activity_ny.pk, job=job,
                                           link=scene.pk, waiting=waiting,
                                           cl=activity.cluster.name))
        width = page.evaluate("document.documentElement.scrollWidth")
        if width > 390:
            wide.append(f"{path}: {width}px")
    assert wide == [], f"pages that scroll sideways at 390 px: {wide}"
    page.goto(portal_url + "/")
    nav = page.locator("header nav").bounding_box()
    assert nav["height"] <= 60, f"the navigation is {nav['height']}px tall"
    expect(page.locator("#todo")).to_be_in_viewport()  # what needs you, above the fold


@pytest.mark.parametrize("width", [1280, 390, 1920])
def test_replica_buttons_stay_inside_their_card(portal_url, browser: Browser, width, owner,
                                                activity, scene):
    page = browser.new_context(viewport={"width": width, "height": 900}).new_page()
    sign_in(page, portal_url, "alice")
    page.goto(f"{portal_url}/streams/{activity.pk}/")
    card = page.locator("section.card", has=page.locator("#replicas")).bounding_box()
    buttons = page.locator("#replicas td.actions :is(button, a.button)")
    assert buttons.count() == 4
    for i in range(buttons.count()):
        box = buttons.nth(i).bounding_box()
        assert card["x"] <= box["x"] and box["x"] + box["width"] <= card["x"] + card["width"], (
            f"button {i} at {box} outside the card {card}")


def test_keyboard_focus_is_visible(portal_url, page: Page, owner, activity, scene):
    sign_in(page, portal_url, "alice")
    page.goto(f"{portal_url}/")
    page.keyboard.press("Tab")
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline == "solid"


def test_todo_resume_button_resumes_the_paused_replica(portal_url, page: Page, owner,
                                                       activity, scene):
    sign_in(page, portal_url, "alice")
    page.goto(f"{portal_url}/")
    item = page.locator('#todo li[data-kind="paused"]')
    expect(item).to_contain_text("/mapr/newyork/archive")
    item.get_by_role("button", name="Resume").click()
    # Back on the overview (not the stream's page), the message styled as the portal's.
    expect(page).to_have_url(f"{portal_url}/")
    message = page.locator("ul.messages li.success")
    expect(message).to_contain_text("/mapr/newyork/archive: replica resumed")
    expect(page.locator('#todo li[data-kind="paused"]')).to_have_count(0)


def test_the_accessibility_check_catches_a_violation(page: Page):
    # The check itself: an unlabelled input and low-contrast text are reported.
    page.set_content('<html lang="en"><title>t</title><main><input type="text">'
                     '<p style="color:#ccc;background:#fff">faint</p></main></html>')
    from tests.e2e.a11y import violations

    assert {v["id"] for v in violations(page)} >= {"label", "color-contrast"}


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_api_documentation_has_no_serious_accessibility_violation(portal_url,
                                                                      browser: Browser, scheme):
    page = browser.new_context(color_scheme=scheme).new_page()
    page.goto(f"{portal_url}/api/v1/docs/")
    expect(page.locator(".swagger-ui .opblock").first).to_be_visible()  # Swagger UI drawn
    # Swagger UI's operation summary is a button holding its path's copy button: its markup,
    # served unchanged; each control is still reachable by keyboard. Every other rule holds.
    assert_accessible(page, widget_rules=("nested-interactive",))
