"""The topology page in Debian's chromium: clusters as regions, streams as nodes, links as
arrows coloured by health, following pause/resume and lag events live, a link's lag chart
and a stream's page on click, filters, and another tenant seeing none of it."""

import pytest
from playwright.sync_api import Page, expect

from replication.events import publish_after_commit
from replication.services import (
    replica_add,
    replica_pause,
    replica_resume,
    topic_create,
    upstream_add,
)
from tests.e2e.conftest import off_loop
from tests.e2e.test_portal import sign_in
from tests.factories import StreamFactory

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def pair(owner, activity, activity_ny):
    off_loop(topic_create, actor=owner, stream=activity, name="clicks", partitions=1)
    link = off_loop(replica_add, actor=owner, source=activity, replica=activity_ny)
    off_loop(upstream_add, actor=owner, replica=activity_ny, source=activity)
    return link


def edge(page: Page, link_id: int, field: str = "health"):
    return page.evaluate(
        f"streamgateTopology.state.cy.getElementById('link-{link_id}').data('{field}')")


def open_topology(page: Page, base: str) -> None:
    page.goto(f"{base}/topology/")
    expect(page.locator("#topology")).to_have_attribute("data-ready", "1")
    expect(page.locator("#live-status")).to_have_attribute("data-state", "open")


def test_topology_draws_regions_streams_and_links_and_follows_pause_and_resume_live(
        portal_url, page: Page, owner, activity, activity_ny, pair):
    sign_in(page, portal_url, "alice")
    open_topology(page, portal_url)
    cy_counts = page.evaluate("""id => { const cy = streamgateTopology.state.cy;
        return [cy.nodes('[cluster]').length, cy.nodes('[stream]').length, cy.edges().length,
                cy.getElementById('s-' + id).parent().data('label')]; }""", activity.pk)
    assert cy_counts == [2, 2, 1, "sanfrancisco"]
    row = page.locator(f'#topology-table tr[data-link="{pair.pk}"]')
    loads = page.evaluate("performance.getEntriesByType('navigation').length")

    off_loop(replica_pause, actor=owner, source=activity, replica=activity_ny)
    expect(row).to_have_attribute("data-health", "paused", timeout=10_000)
    assert edge(page, pair.pk) == "paused"
    expect(row.locator(".pill")).to_have_text("Paused")
    colour = page.evaluate(
        f"streamgateTopology.state.cy.getElementById('link-{pair.pk}').style('line-color')")
    assert colour == "rgb(107,115,133)"

    off_loop(replica_resume, actor=owner, source=activity, replica=activity_ny)
    expect(row).not_to_have_attribute("data-health", "paused", timeout=10_000)
    assert edge(page, pair.pk) in ("unknown", "insync", "pending")
    assert page.evaluate("performance.getEntriesByType('navigation').length") == loads


def test_lag_events_recolour_an_arrow_in_place(portal_url, page: Page, owner, activity,
                                               activity_ny, pair):
    sign_in(page, portal_url, "alice")
    open_topology(page, portal_url)

    def lag(messages: int, stalled: bool) -> None:
        off_loop(publish_after_commit, tenant_ids={activity.tenant_id}, event="replica.lag",
                 payload={"link": pair.pk, "source": activity.pk, "replica": activity_ny.pk,
                          "messagesPending": messages, "bytesPending": 10 * messages,
                          "timeLagMs": 180_000, "stalled": stalled, "t": 1})

    lag(5, True)
    row = page.locator(f'#topology-table tr[data-link="{pair.pk}"]')
    expect(row).to_have_attribute("data-health", "stalled", timeout=10_000)
    expect(row).to_contain_text("Stalled")
    expect(row).to_contain_text("3 min")
    assert edge(page, pair.pk, "label") == "Stalled 3 min"
    lag(0, False)
    expect(row).to_have_attribute("data-health", "insync", timeout=10_000)
    assert edge(page, pair.pk, "label") == ""


def test_click_a_link_for_its_lag_chart_and_a_stream_for_its_page(portal_url, page: Page,
                                                                   owner, activity, pair):
    sign_in(page, portal_url, "alice")
    open_topology(page, portal_url)
    page.evaluate(f"streamgateTopology.state.cy.getElementById('link-{pair.pk}').emit('tap')")
    expect(page.locator("#link-title")).to_have_text(
        "/mapr/sanfrancisco/activity → /mapr/newyork/activity")
    expect(page.locator(f'#lag-charts .lag-chart[data-link="{pair.pk}"] svg.chart.messages')
           ).to_be_visible()
    # the same from the keyboard, through the table under the graph
    page.locator("#topology-table-box summary").click()
    page.locator(f'#topology-table tr[data-link="{pair.pk}"] button').focus()
    page.keyboard.press("Enter")
    expect(page.locator("#link-detail")).to_be_visible()
    page.evaluate(f"streamgateTopology.state.cy.getElementById('s-{activity.pk}').emit('tap')")
    expect(page).to_have_url(f"{portal_url}/streams/{activity.pk}/")


def test_filters_by_health_and_cluster_and_the_clusters_view_counts(
        portal_url, page: Page, owner, activity, activity_ny, newyork, pair):
    other = StreamFactory(cluster=newyork, name="other", created_by=owner)
    off_loop(replica_add, actor=owner, source=activity_ny, replica=other)  # waits
    sign_in(page, portal_url, "alice")
    open_topology(page, portal_url)
    graph = page.locator("#topology")
    expect(graph).to_have_attribute("data-edges", "2")
    page.select_option("#f-health", "waiting")
    expect(graph).to_have_attribute("data-edges", "1")
    assert page.locator("#topology-table tbody tr").count() == 1
    page.select_option("#f-health", "")
    page.select_option("#f-cluster", str(newyork.pk))
    page.uncheck("#f-lonely")
    expect(graph).to_have_attribute("data-edges", "2")  # both touch newyork
    page.select_option("#f-cluster", "")
    page.select_option("#f-group", "clusters")
    labels = page.evaluate("streamgateTopology.state.cy.edges().map(e => e.data('label')).sort()")
    assert len(labels) == 2 and labels[1] == "1 Waiting for approval"  # one arrow per health
    page.evaluate("streamgateTopology.state.cy.edges('[health = \"waiting\"]').emit('tap')")
    expect(page.locator("#f-group")).to_have_value("streams")
    expect(graph).to_have_attribute("data-edges", "1")


def test_another_tenant_sees_none_of_the_topology(portal_url, page: Page, outsider, activity,
                                                  pair):
    sign_in(page, portal_url, "mallory")
    open_topology(page, portal_url)
    expect(page.locator("#topology")).to_have_attribute("data-edges", "0")
    assert page.evaluate("streamgateTopology.state.cy.nodes().length") == 0
    assert activity.path not in page.content()
    # Not a blank canvas: a sentence that says why, and where to start.
    empty = page.locator("#topology-empty")
    expect(empty).to_be_visible()
    expect(empty.get_by_role("link", name="create a stream")).to_have_attribute("href", "/streams/")
    assert page.locator("#topology").bounding_box()["height"] <= 242


def test_a_small_graph_gets_a_canvas_its_size_and_dark_mode_its_colours(
        portal_url, page: Page, owner, activity, activity_ny, pair):
    page.emulate_media(color_scheme="dark")
    sign_in(page, portal_url, "alice")
    open_topology(page, portal_url)
    expect(page.locator("#topology-empty")).to_be_hidden()
    # Two streams fitted at 1.2x: the canvas shrinks to them, so the graph fills it.
    height = page.locator("#topology").bounding_box()["height"]
    assert 240 <= height < 500, height
    node = page.evaluate("""id => { const n = streamgateTopology.state.cy.getElementById('s-' + id);
        return [n.style('color'), n.style('text-background-color')]; }""", activity.pk)
    assert node == ["rgb(230,233,239)", "rgb(23,26,33)"]  # light text on a dark label box
    position = page.evaluate(f"streamgateTopology.state.cy.getElementById('s-{activity.pk}')"
                             ".renderedPosition()")
    page.wait_for_timeout(500)  # nothing moves once drawn: the first click lands
    assert page.evaluate(f"streamgateTopology.state.cy.getElementById('s-{activity.pk}')"
                         ".renderedPosition()") == position


@pytest.fixture
def many_links(owner, sanfrancisco, newyork):
    """160 streams and 320 links among them (past the 300 arrows that make a graph large),
    written in bulk as the services leave them."""
    from bench.pages import _more_links
    from replication.models import ReplicaLink, Stream

    aces = dict.fromkeys(("produceperm", "consumeperm", "topicperm", "copyperm", "adminperm"),
                         "u:alice")
    tenant = owner.memberships.get().tenant
    streams = Stream.objects.bulk_create(
        Stream(path=f"/mapr/{c.name}/s{i:03d}", cluster=c, name=f"s{i:03d}", tenant=tenant,
               created_by=owner, **aces)
        for i, c in ((i, (sanfrancisco, newyork)[i % 2]) for i in range(160)))
    _more_links(streams, 320, owner)
    return list(ReplicaLink.objects.filter(paused=False).order_by("pk")
                .values_list("pk", "source_id", "replica_id")[:40])


def test_a_large_graph_takes_every_event_and_recolours_in_batches(portal_url, page: Page,
                                                                  owner, many_links):
    sign_in(page, portal_url, "alice")
    open_topology(page, portal_url)
    assert page.evaluate("streamgateTopology.state.big") is True
    painted = int(page.eval_on_selector("#topology", "el => el.dataset.painted || '0'"))
    for pk, source, replica in many_links:  # 40 links stall within a second or so
        off_loop(publish_after_commit, tenant_ids={owner.memberships.get().tenant_id},
                 event="replica.lag", payload={
                     "link": pk, "source": source, "replica": replica, "messagesPending": 7,
                     "bytesPending": 70, "timeLagMs": 180_000, "stalled": True, "t": 1})
    ids = [pk for pk, _, _ in many_links]
    page.wait_for_function("""ids => ids.every(id => streamgateTopology.state.cy
        .getElementById('link-' + id).data('health') === 'stalled')""", arg=ids,
                           timeout=15_000)
    # Every event reached the arrows, in a few repaints rather than one per event or frame.
    repaints = int(page.eval_on_selector("#topology", "el => el.dataset.painted")) - painted
    assert 1 <= repaints <= 4, repaints
    assert edge(page, ids[0], "label") == ""  # a large graph's arrows carry no text


def test_two_streams_replicating_both_ways_keep_their_labels_apart(portal_url, page: Page,
                                                                  owner, activity, activity_ny,
                                                                  pair):
    back = off_loop(replica_add, actor=owner, source=activity_ny, replica=activity)
    off_loop(upstream_add, actor=owner, replica=activity, source=activity_ny)
    sign_in(page, portal_url, "alice")
    open_topology(page, portal_url)
    expect(page.locator("#topology")).to_have_attribute("data-edges", "2")
    boxes = page.evaluate("""ids => { const cy = streamgateTopology.state.cy;
        return ids.map(id => { const e = cy.getElementById('link-' + id);
            e.data('label', 'Pending 12,345 msgs / 1 min 5 s');  // a long lag text
            return e.boundingBox({includeNodes: false, includeEdges: false,
                                  includeLabels: true}); }); }""", [pair.pk, back.pk])
    first, second = boxes
    apart = (first["x2"] <= second["x1"] or second["x2"] <= first["x1"]
             or first["y2"] <= second["y1"] or second["y2"] <= first["y1"])
    assert apart, boxes
