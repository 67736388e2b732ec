"""End to end with the real engine: the stream page's lag chart rising while a replica is
paused and falling once resumed, the manual set-up wizard, and autosetup's live copy."""


import pytest
from playwright.sync_api import Page, expect

from replication.engine.store import Record
from replication.models import ReplicaLink, ReplicaState, Stream
from replication.services import replica_add, topic_create, upstream_add
from replication.services.messages import messages_produce
from tests.e2e.conftest import off_loop
from tests.e2e.test_portal import sign_in
from tests.factories import GatewayFactory
from tests.workers.conftest import celery_worker_on

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def submit_pair(page: Page, form: str, source: str,
                replica: str = "/mapr/newyork/activity") -> None:
    """Fill a set-up form's source and replica and submit it."""
    page.fill(f"{form} input[name=source]", source)
    page.fill(f"{form} input[name=replica]", replica)
    page.click(f"{form} button[type=submit]")


def produce(owner, stream, count: int) -> None:
    off_loop(messages_produce, actor=owner, stream=stream, topic="clicks",
             records=[Record(f"click-{i}".encode()) for i in range(count)])


def navigations(page: Page) -> int:
    return page.evaluate("performance.getEntriesByType('navigation').length")


@pytest.fixture
def pair(owner, activity, activity_ny, newyork):
    """activity -> activity_ny agreed, with a gateway configured on newyork."""
    GatewayFactory(cluster=newyork, name="gw1")
    off_loop(topic_create, actor=owner, stream=activity, name="clicks", partitions=2)
    link = off_loop(replica_add, actor=owner, source=activity, replica=activity_ny)
    off_loop(upstream_add, actor=owner, replica=activity_ny, source=activity)
    return link


def test_lag_rises_while_paused_and_falls_after_resume_on_the_chart(
    portal_url, page: Page, owner, activity, activity_ny, pair, live_engine
):
    live_engine.gateway("newyork", "gw1")
    live_engine.replicator()
    sign_in(page, portal_url, "alice")
    page.goto(f"{portal_url}/streams/{activity.pk}/")
    row = page.locator(f'#replicas tr[data-lag-link="{pair.pk}"]')
    messages_chart = page.locator(f'.lag-chart[data-link="{pair.pk}"] svg.chart.messages')
    expect(messages_chart).to_be_visible()
    expect(page.locator("#live-status")).to_have_attribute("data-state", "open")

    row.get_by_role("button", name="Pause").click()
    expect(row.locator("td.paused")).to_have_text("yes")
    expect(page.locator("#live-status")).to_have_attribute("data-state", "open")
    loads = navigations(page)
    produce(owner, activity, 300)
    # The lag rises on the chart and in the row, live: no reload.
    expect(messages_chart).to_have_attribute("data-last", "300", timeout=10_000)
    expect(row.locator('[data-field="messages_pending"]')).to_have_text("300")
    time_chart = page.locator(f'.lag-chart[data-link="{pair.pk}"] svg.chart.timelag')
    assert float(time_chart.get_attribute("data-last")) > 0
    assert navigations(page) == loads

    row.get_by_role("button", name="Resume").click()
    expect(row.locator("td.paused")).to_have_text("no")
    # ... and falls once resumed: the history kept the peak, the last point is back to 0.
    expect(messages_chart).to_have_attribute("data-last", "0", timeout=20_000)
    assert float(messages_chart.get_attribute("data-max")) >= 300
    assert int(messages_chart.get_attribute("data-points")) >= 3
    expect(row.locator('[data-field="messages_pending"]')).to_have_text("0")


def test_manual_wizard_sets_up_a_replicating_pair(portal_url, page: Page, owner, activity,
                                                  newyork):
    sign_in(page, portal_url, "alice")
    page.goto(f"{portal_url}/setup/")
    page.click("#start-manual")
    expect(page.locator(".does")).to_contain_text("metadata")
    submit_pair(page, "#step-form", activity.path)
    expected = [
        (2, "Register the replica, paused", "#step-form button"),
        (3, "Check the replica list", "#next"),
        (4, "Declare the upstream", "#step-form button"),
        (5, "Check the upstream list", "#next"),
        (6, "Copy the messages", "#skip"),
        (7, "Resume replication", "#step-form button"),
    ]
    for number, title, proceed in expected:
        expect(page.locator("#wizard")).to_have_attribute("data-step", str(number))
        expect(page.locator("#wizard h2")).to_contain_text(title)
        expect(page.locator(".does")).to_contain_text("What this step does")
        page.click(proceed)
    expect(page.locator("#wizard h2")).to_contain_text("Done")
    expect(page.locator("#wizard .replica-state")).to_have_text(ReplicaState.REPLICATING)
    link = ReplicaLink.objects.get(source=activity, replica__path="/mapr/newyork/activity")
    assert not link.paused and link.agreed


def test_a_refused_step_shows_the_services_reason(portal_url, page: Page, owner, member,
                                                  activity, newyork):
    sign_in(page, portal_url, "bob")
    page.goto(f"{portal_url}/setup/manual/")
    submit_pair(page, "#step-form", activity.path)
    expect(page.locator(".messages")).to_contain_text("may not copy metadata")


@pytest.fixture
def job_worker(live_engine):  # type: ignore[no-untyped-def]
    """A Celery worker for the jobs (Spark in local mode inside it), on the engine's
    namespace and a queue of the test's own."""
    with celery_worker_on(live_engine.env, live_engine.logs, "sg-e2e", timeout=20) as (_, worker):
        yield worker


def test_autosetup_shows_the_copy_progress_live_until_replicating(
    portal_url, page: Page, owner, activity, newyork, job_worker, live_engine
):
    GatewayFactory(cluster=newyork, name="gw1")
    live_engine.gateway("newyork", "gw1")
    live_engine.replicator()
    off_loop(topic_create, actor=owner, stream=activity, name="clicks", partitions=2)
    produce(owner, activity, 2000)
    sign_in(page, portal_url, "alice")
    page.goto(f"{portal_url}/setup/auto/")
    submit_pair(page, "#autosetup-form", activity.path)
    expect(page.locator(".messages")).to_contain_text("autosetup of /mapr/newyork/activity")
    loads = navigations(page)
    status = page.locator("#autosetup-status")
    expect(status.locator(".job-progress")).to_be_visible()
    # The job's state and bar follow its events; the page ends replicating, without reload.
    expect(status.locator('[data-field="state"]')).to_have_text("SUCCEEDED", timeout=180_000)
    expect(status.locator("progress")).to_have_attribute("value", "100")
    expect(status.locator("#replicating")).to_be_visible(timeout=15_000)
    assert navigations(page) == loads
    replica = Stream.objects.get(path="/mapr/newyork/activity")
    link = ReplicaLink.objects.get(source=activity, replica=replica)
    assert link.replica_state() == ReplicaState.REPLICATING


def test_jobs_page_starts_a_copy_and_follows_it(portal_url, page: Page, owner, activity,
                                                activity_ny, job_worker):
    off_loop(topic_create, actor=owner, stream=activity, name="clicks")
    produce(owner, activity, 500)
    sign_in(page, portal_url, "alice")
    page.goto(f"{portal_url}/jobs/")
    page.select_option("#start-job select[name=kind]", "copystream")
    page.fill("#start-job input[name=source]", activity.path)
    page.fill("#start-job input[name=destination]", activity_ny.path)
    page.click("#start-job button[type=submit]")
    expect(page.locator(".messages")).to_have_text("copystream started")
    expect(page.locator("h1")).to_contain_text("copystream")
    card = page.locator("#job-card")
    expect(card.locator('[data-field="state"]')).to_have_text("SUCCEEDED", timeout=180_000)
    expect(card).to_contain_text("500 / 500 messages")
