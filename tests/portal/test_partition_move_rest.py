"""`stream topic partition move` through /rest (and so the CLI), issue 33: an operator moves
a partition and gets the result row; others are refused (an outsider sees no stream), and a
bad request names the fix, changing nothing."""

from __future__ import annotations

import pytest

from replication import placement
from replication.engine.store import Record
from replication.models import Placement
from replication.services import partitionmove, topic_create
from replication.services.messages import messages_consume, messages_produce, topic_watermarks
from tests.portal.test_rest import call, error_of, ok
from tests.replication.services.test_storegroups import grow, held

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def two(monkeypatch, operator, owner, activity):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(partitionmove, "CLEANUP_GRACE", 0.2)
    placement.forget()
    urls = grow(operator, activity.cluster, "s2")
    topic_watermarks(topic_create(actor=owner, stream=activity, name="clicks", partitions=2))
    messages_produce(actor=owner, stream=activity, topic="clicks",
                     records=[Record(b"v%d" % i, partition=1) for i in range(7)])
    yield urls
    placement.forget()


def group_of(activity) -> str:  # type: ignore[no-untyped-def]
    return Placement.objects.get(stream=activity, topic="clicks", partition=1).group.name


def test_rest_moves_a_partition_and_returns_the_result_row(api, operator, owner, activity, two):
    source = group_of(activity)
    target = next(n for n in two if n != source)
    rows = ok(call(api(operator), "stream/topic/partition/move", path=activity.path,
                   topic="clicks", partition=1, to=target))
    assert len(rows) == 1
    row = rows[0]
    assert {k: row[k] for k in ("partition", "from", "to", "messagesCopied")} == {
        "partition": 1, "from": source, "to": target, "messagesCopied": 7}
    assert isinstance(row["seconds"], float)
    assert group_of(activity) == target
    assert held(two[target], activity)[("clicks", 1)] == 7
    got = messages_consume(actor=owner, stream=activity, topic="clicks", partition=1, offset=0,
                           limit=100)
    assert [m.value for m in got] == [b"v%d" % i for i in range(7)]


@pytest.mark.parametrize(("who", "text"), [("owner", "only cluster operators"),
                                           ("outsider", "does not exist")])
def test_rest_partition_move_is_for_operators_only(api, request, activity, two, who, text):
    source = group_of(activity)
    target = next(n for n in two if n != source)
    refused = call(api(request.getfixturevalue(who)), "stream/topic/partition/move",
                   path=activity.path, topic="clicks", partition=1, to=target)
    assert text in error_of(refused)
    assert group_of(activity) == source


def test_rest_refuses_a_bad_move_naming_the_fix(api, operator, activity, two):
    ops = api(operator)
    source = group_of(activity)
    for params, text in (({"to": "s9"}, "no store group 's9': give one of its groups"),
                         ({"to": source}, "already on store group"),
                         ({"partition": 5, "to": "s2"}, "partitions 0..1")):
        args = {"path": activity.path, "topic": "clicks", "partition": 1} | params
        assert text in error_of(call(ops, "stream/topic/partition/move", **args))
    missing = call(ops, "stream/topic/partition/move", path=activity.path, topic="clicks",
                   to="s2")
    assert "partition" in error_of(missing)
    assert group_of(activity) == source
    assert held(two[source], activity)[("clicks", 1)] == 7
