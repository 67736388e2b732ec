"""maprcli's stream cursor list|delete and stream assign list over /rest: MapR's options and
fields, the same cursors every interface commits, and refusals in maprcli's error shape."""

from __future__ import annotations

from typing import Any

import pytest

from replication import services
from replication.engine.store import Committed, Record
from replication.groups.board import Placement, group_key, publish, snapshot
from replication.groups.model import GroupView, MemberView
from replication.services.cursors import cursor_commit, cursors_commit, cursors_fetch
from replication.services.messages import messages_produce
from tests.portal.test_rest import call, ok


def error_of(response: Any, status: int) -> str:
    body = response.json()
    assert response.status_code == status and body["status"] == "ERROR", body
    return body["errors"][0]["desc"]


@pytest.fixture
def clicks(owner, activity):
    """activity:clicks with 2 partitions, 3 messages in each; groups billing and audit."""
    services.topic_create(actor=owner, stream=activity, name="clicks", partitions=2)
    for partition in (0, 1):
        messages_produce(actor=owner, stream=activity, topic="clicks",
                         records=[Record(value=b"v", partition=partition)] * 3)
    cursor_commit(actor=owner, stream=activity, group="billing", topic="clicks", partition=0,
                  offset=2)
    cursor_commit(actor=owner, stream=activity, group="billing", topic="clicks", partition=1,
                  offset=3)
    cursor_commit(actor=owner, stream=activity, group="audit", topic="clicks", partition=0,
                  offset=1)
    return activity


def test_cursor_list_shows_mapr_fields_for_every_group(api, owner, clicks):
    rows = ok(call(api(owner), "stream/cursor/list", path=clicks.path))
    assert [(r["consumergroup"], r["topic"], r["partitionid"], r["committedoffset"])
            for r in rows] == [("audit", "clicks", 0, 1), ("billing", "clicks", 0, 2),
                               ("billing", "clicks", 1, 3)]
    first = rows[0]
    assert list(first) == ["consumergroup", "topic", "partitionid", "produceroffset",
                           "committedoffset", "producertimestamp", "consumertimestamp",
                           "consumerlagmillis"]
    assert first["produceroffset"] == 2 and first["consumerlagmillis"] >= 0


def test_cursor_list_filters_by_group_topic_and_partition(api, owner, clicks):
    rows = ok(call(api(owner), "stream/cursor/list", path=clicks.path,
                   consumergroup="billing", topic="clicks", partition=1))
    assert [(r["consumergroup"], r["partitionid"]) for r in rows] == [("billing", 1)]


def test_batch_commit_is_what_cursor_list_and_fetch_show(api, owner, clicks):
    results = cursors_commit(actor=owner, stream=clicks, group="kafka",
                             commits=[("clicks", 0, 3, "meta"), ("clicks", 7, 0),
                                      ("nope", 0, 0), ("clicks", 1, -5)])
    assert results[("clicks", 0)] is None
    assert "partition 7 does not exist" in str(results[("clicks", 7)])
    assert "does not exist" in str(results[("nope", 0)])
    assert "negative" in str(results[("clicks", 1)])
    assert cursors_fetch(actor=owner, stream=clicks, group="kafka") == {
        ("clicks", 0): Committed("kafka", "clicks", 0, 3, "meta")}
    # Past the end is kept as committed, as Kafka keeps it.
    assert cursors_commit(actor=owner, stream=clicks, group="kafka",
                          commits=[("clicks", 1, 99)]) == {("clicks", 1): None}
    rows = ok(call(api(owner), "stream/cursor/list", path=clicks.path, consumergroup="kafka"))
    assert [(r["partitionid"], r["committedoffset"]) for r in rows] == [(0, 3), (1, 99)]


def test_cursor_delete_removes_only_what_the_filters_name(api, owner, clicks):
    ok(call(api(owner), "stream/cursor/delete", path=clicks.path, consumergroup="billing",
            topic="clicks", partition=0))
    left = ok(call(api(owner), "stream/cursor/list", path=clicks.path))
    assert [(r["consumergroup"], r["partitionid"]) for r in left] == [("audit", 0),
                                                                      ("billing", 1)]
    ok(call(api(owner), "stream/cursor/delete", path=clicks.path))
    assert ok(call(api(owner), "stream/cursor/list", path=clicks.path)) == []


def test_cursor_delete_needs_consumeperm_or_adminperm(api, member, clicks):
    desc = error_of(call(api(member), "stream/cursor/delete", path=clicks.path), 403)
    assert "consumeperm or adminperm" in desc


def test_outsider_is_denied_like_a_missing_stream(api, outsider, clicks):
    for command in ("stream/cursor/list", "stream/cursor/delete", "stream/assign/list"):
        desc = error_of(call(api(outsider), command, path=clicks.path), 404)
        assert f"stream {clicks.path} does not exist" in desc


@pytest.mark.parametrize(("params", "status", "needle"), [
    ({"path": "/mapr/sanfrancisco/nosuch"}, 404, "does not exist"),
    ({"path": "no-mapr-prefix"}, 400, "path"),
    ({"path": "/mapr/sanfrancisco/activity", "partition": "1"}, 400, "-partition needs -topic"),
    ({"path": "/mapr/sanfrancisco/activity", "topic": "clicks", "partition": "9"}, 400,
     "partition 9 does not exist"),
    ({"path": "/mapr/sanfrancisco/activity", "topic": "nope"}, 404, "nope does not exist"),
    ({"path": "/mapr/sanfrancisco/activity", "partition": "x", "topic": "clicks"}, 400,
     "partition"),
])
def test_bad_input_is_refused_naming_the_problem(api, owner, clicks, params, status, needle):
    for command in ("stream/cursor/list", "stream/cursor/delete", "stream/assign/list"):
        desc = error_of(call(api(owner), command, **params), status)
        assert needle in desc, (command, desc)
    assert len(ok(call(api(owner), "stream/cursor/list", path=clicks.path))) == 3


def publish_group(stream, tenant_id: int, group: str = "kafka") -> None:
    members = [MemberView("m-1", None, "app-1", "/10.0.0.1", b"", b""),
               MemberView("m-2", "host-2", "app-2", "/10.0.0.2", b"", b"")]
    view = GroupView(group, "Stable", 4, "consumer", "range", "m-1", members)
    placements = {
        "m-1": [Placement(str(stream.uuid), stream.path, "clicks", 0, "clicks")],
        "m-2": [Placement(str(stream.uuid), stream.path, "clicks", 1, "clicks"),
                Placement("another-stream", "/mapr/x/y", "other", 0, "other")],
    }
    publish(group_key(tenant_id, group), snapshot(view, placements))


def test_assign_list_shows_members_and_their_partitions(api, owner, clicks):
    publish_group(clicks, clicks.tenant_id)
    rows = ok(call(api(owner), "stream/assign/list", path=clicks.path))
    assert [(r["consumergroup"], r["topic"], r["partitionid"], r["consumerid"], r["clientid"])
            for r in rows] == [("kafka", "clicks", 0, "m-1", "app-1"),
                               ("kafka", "clicks", 1, "m-2", "app-2")]
    detail = ok(call(api(owner), "stream/assign/list", path=clicks.path, topic="clicks",
                     partition=1, detail="true"))
    assert detail == [{"consumergroup": "kafka", "topic": "clicks", "partitionid": 1,
                       "consumerid": "m-2", "clientid": "app-2", "host": "/10.0.0.2",
                       "state": "Stable", "generation": 4, "protocol": "range",
                       "leader": False, "instanceid": "host-2"}]


def test_assign_list_shows_no_group_of_another_tenant(api, owner, outsider, clicks):
    publish_group(clicks, outsider.memberships.get().tenant_id, "theirs")
    assert ok(call(api(owner), "stream/assign/list", path=clicks.path)) == []


def test_a_group_published_empty_disappears(api, owner, clicks):
    publish_group(clicks, clicks.tenant_id)
    publish(group_key(clicks.tenant_id, "kafka"), None)
    assert ok(call(api(owner), "stream/assign/list", path=clicks.path)) == []
