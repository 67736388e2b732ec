"""`cluster store add|list|remove` through /rest (and so the CLI) and the API (issue 33):
operators only, errors in the maprcli shape naming the problem and the fix, a refused call
changing nothing."""

from __future__ import annotations

import pytest

from replication import placement
from replication.models import StoreGroup
from replication.services import topic_create
from replication.services.messages import topic_watermarks
from tests.portal.test_rest import call, error_of, ok
from tests.replication.services.test_storegroups import group_url, grow


@pytest.fixture(autouse=True)
def _fresh_views(operator, activity):
    """Each test's cluster on a store of its own: adding a group fences the store, which the
    session's shared store of the cluster's name must never be."""
    placement.forget()
    grow(operator, activity.cluster)
    yield
    placement.forget()


def names(cluster) -> list[str]:  # type: ignore[no-untyped-def]
    return list(StoreGroup.objects.filter(cluster=cluster).order_by("pk").values_list(
        "name", flat=True))


def test_rest_adds_lists_and_removes_a_store_group(api, operator, owner, activity):
    ops, cluster = api(operator), activity.cluster
    url = group_url(cluster, "s2")
    ok(call(ops, "cluster/store/add", cluster=cluster.name, name="s2", url=url))
    topic_watermarks(topic_create(actor=owner, stream=activity, name="clicks", partitions=4))
    rows = {r["name"]: r for r in ok(call(ops, "cluster/store/list", cluster=cluster.name))}
    assert set(rows) == {"s1", "s2"} and rows["s2"]["url"] == url
    assert rows["s1"]["partitions"] + rows["s2"]["partitions"] == 4
    assert rows["s2"]["health"] == "ok" and rows["s2"]["bytes"] == 0
    refused = call(ops, "cluster/store/remove", cluster=cluster.name, name="s2")
    assert "still holds" in error_of(refused) and "move them" in error_of(refused)
    assert names(cluster) == ["s1", "s2"]


def test_rest_refuses_a_bad_url_naming_the_fix_and_changes_nothing(api, operator, activity):
    refused = call(api(operator), "cluster/store/add", cluster=activity.cluster.name,
                   name="s2", url="http://example/x")
    assert "is not a message store URL" in error_of(refused)
    assert "give postgresql://" in error_of(refused)
    assert names(activity.cluster) in ([], ["s1"])


@pytest.mark.parametrize("who", ["owner", "outsider"])
def test_store_groups_are_for_operators_only(api, request, activity, who):
    user = request.getfixturevalue(who)
    client = api(user)
    for command, params in (("cluster/store/list", {}),
                            ("cluster/store/add", {"name": "s2", "url": "postgresql://h/x"}),
                            ("cluster/store/remove", {"name": "s1"})):
        assert "only cluster operators" in error_of(
            call(client, command, cluster=activity.cluster.name, **params))
    assert api(user).get(f"/api/v1/clusters/{activity.cluster.name}/stores/").status_code == 403
    assert names(activity.cluster) in ([], ["s1"])


def test_api_adds_lists_and_removes_a_store_group(api, operator, activity):
    client, cluster = api(operator), activity.cluster
    url = group_url(cluster, "s2")
    made = client.post(f"/api/v1/clusters/{cluster.name}/stores/", {"name": "s2", "url": url},
                       format="json")
    assert made.status_code == 201, made.json()
    assert made.json()["name"] == "s2" and made.json()["partitions"] == 0
    listed = client.get(f"/api/v1/clusters/{cluster.name}/stores/").json()
    assert [r["name"] for r in listed] == ["s1", "s2"]
    bad = client.post(f"/api/v1/clusters/{cluster.name}/stores/", {"name": "Bad", "url": url},
                      format="json")
    assert bad.status_code == 400 and "invalid store group name" in str(bad.json())
    assert client.delete(f"/api/v1/clusters/{cluster.name}/stores/s2/").status_code == 204
    last = client.delete(f"/api/v1/clusters/{cluster.name}/stores/s1/")
    assert last.status_code == 409 and "last of cluster" in str(last.json())
    assert names(cluster) == ["s1"]
