"""The topology page and its data: clusters, streams and replica links with their health,
the tenant's only (another tenant sees none of it), cytoscape served from static files, and
one link's lag history for the chart."""

import re
from functools import partial

import orjson
import pytest

from replication import lag_history
from replication.models import ReplicaLink
from replication.services import replica_add, replica_pause, upstream_add
from tests.clients import query_count, signed_in
from tests.factories import StreamFactory, linked_pairs
from tests.portal.test_web import produce

pytestmark = pytest.mark.usefixtures("private_cache")


def embedded(page: str) -> dict:
    text = re.search(r'<script type="application/json" id="topology-data">(.*?)</script>',
                     page, re.S).group(1)
    return orjson.loads(text)


def test_topology_page_is_in_the_nav_and_loads_cytoscape_from_static_files(owner):
    page = signed_in(owner).get("/topology/").content.decode()
    assert '<a href="/topology/">Topology</a>' in signed_in(owner).get("/").content.decode()
    scripts = re.findall(r'<script src="([^"]+)"', page)
    assert "/static/vendor/cytoscape/cytoscape.min.js" in scripts
    assert "/static/vendor/cytoscape/cytoscape-fcose.js" in scripts
    assert scripts[-2:] == ["/static/js/lagchart.js", "/static/js/topology.js"]
    for label in ("View", "Cluster", "Health", "Stream path contains"):
        assert re.search(rf"<label>{label}\s*<(select|input)", page), label


def test_topology_data_has_clusters_streams_and_links_coloured_by_health(
        owner, agreed, activity, activity_ny, newyork, sanfrancisco):
    paused_to = StreamFactory(cluster=newyork, name="p", created_by=owner)
    paused = replica_add(actor=owner, source=activity, replica=paused_to)
    upstream_add(actor=owner, replica=paused_to, source=activity)
    replica_pause(actor=owner, source=activity, replica=paused_to)
    produce(owner, activity, 2)
    lag_history.lag_record()
    data = embedded(signed_in(owner).get("/topology/").content.decode())
    assert sorted(name for _, name in data["clusters"]) == ["newyork", "sanfrancisco"]
    paths = {row[1]: row for row in data["streams"]}
    assert paths[activity.path][2] == sanfrancisco.pk and paths[activity.path][3] is True
    links = {row[0]: row for row in data["links"]}
    assert links[agreed.pk][1:4] == [activity.pk, activity_ny.pk, "pending"]
    assert re.fullmatch(r"2 msgs / [\d.]+ (ms|s)", links[agreed.pk][4])
    assert links[paused.pk][3] == "paused"
    assert ["waiting", "Waiting for approval", 5] in data["healths"]
    assert signed_in(owner).get("/topology/data/").json() == data


def test_topology_shows_the_other_end_of_a_cross_tenant_link_by_path_only(
        owner, outsider, activity, newyork):
    theirs = StreamFactory(cluster=newyork, name="theirs", created_by=outsider)
    replica_add(actor=owner, source=activity, replica=theirs)
    data = signed_in(owner).get("/topology/data/").json()
    row = next(r for r in data["streams"] if r[0] == theirs.pk)
    assert row[1] == theirs.path and row[3] is False  # not theirs to open


def test_another_tenant_sees_none_of_the_topology(outsider, agreed, activity, activity_ny):
    client = signed_in(outsider)
    data = client.get("/topology/data/").json()
    assert data["links"] == [] and data["streams"] == [] and data["clusters"] == []
    page = client.get("/topology/").content.decode()
    assert activity.path not in page and activity_ny.path not in page
    assert client.get(f"/topology/links/{agreed.pk}/lag/").status_code == 404


def test_topology_requires_sign_in(client, agreed):
    for url in ("/topology/", "/topology/data/", f"/topology/links/{agreed.pk}/lag/"):
        assert client.get(url).status_code == 302, url


def test_link_lag_serves_one_links_history_for_the_chart(owner, agreed, activity):
    produce(owner, activity, 3)
    lag_history.lag_record(now_ms=7_000)
    data = signed_in(owner).get(f"/topology/links/{agreed.pk}/lag/").json()
    (link,) = data["links"]
    assert link["link"] == agreed.pk and link["replica"] == "/mapr/newyork/activity"
    assert link["points"][0][:2] == [7_000, 3]


def test_topology_embeds_its_data_without_breaking_out_of_the_script(owner, activity,
                                                                     newyork):
    evil = StreamFactory(cluster=newyork, name="x", created_by=owner)
    type(evil).objects.filter(pk=evil.pk).update(path="/mapr/newyork/</script><b>x")
    replica_add(actor=owner, source=activity, replica=evil)
    page = signed_in(owner).get("/topology/").content.decode()
    assert "</script><b>" not in page and "\\u003c/script\\u003e" in page


def test_topology_query_count_does_not_grow_with_links(owner, newyork, agreed):
    count = partial(query_count, signed_in(owner), "/topology/")
    few = count()
    linked_pairs(owner, newyork, 10)
    assert ReplicaLink.objects.count() == 11
    assert count() == few


def test_latest_samples_of_many_links_come_from_one_cache_key(db):
    points = {pk: [1, pk, 2 * pk, 0, 0] for pk in range(1, 121)}  # locmem keeps 300 keys
    lag_history._append(points)
    lag_history._append({7: [2, 70, 140, 0, 1]})  # a later sample of one link
    many = lag_history.lag_latest(range(1, 121))
    few = lag_history.lag_latest([7, 8])
    assert len(many) == 120 and many[7] == few[7] == [2, 70, 140, 0, 1]
    assert many[8] == few[8] == [1, 8, 16, 0, 0]
