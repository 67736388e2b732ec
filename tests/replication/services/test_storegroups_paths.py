"""Replication, verification and retention over clusters of three store groups each (issue
33): each reads and writes the group holding the partition, checked in the groups'
databases themselves."""

from __future__ import annotations

import pytest

from replication import placement
from replication.engine.store import Record
from replication.services import replica_verify, topic_create
from replication.services.messages import messages_produce, topic_watermarks
from replication.services.purge import stream_expire
from replication.stores import store_for
from tests.factories import replicated_clicks, spread
from tests.replication.services.test_storegroups import grow, held


@pytest.fixture(autouse=True)
def _fresh_views():
    placement.forget()
    yield
    placement.forget()


def physical(groups: dict[str, str], stream) -> dict[tuple[str, int], int]:  # type: ignore[no-untyped-def]
    ends: dict[tuple[str, int], int] = {}
    for url in groups.values():
        mine = held(url, stream)
        assert not set(mine) & set(ends), "a partition held by two groups"
        ends.update(mine)
    return ends


def test_replication_from_a_multi_group_source_lands_in_the_replicas_groups(
        operator, owner, activity, activity_ny):
    source = grow(operator, activity.cluster, "s2", "s3")
    replica = grow(operator, activity_ny.cluster, "s2", "s3")
    link = replicated_clicks(owner, activity, activity_ny, per_partition=20)
    assert physical(source, activity) == {("clicks", 0): 20, ("clicks", 1): 20}
    assert physical(replica, activity_ny) == {("clicks", 0): 20, ("clicks", 1): 20}
    groups = {p.group.name for p in activity.placements.all()}
    assert len(groups) == 2  # the topic's two partitions on two groups
    got = store_for(activity_ny.cluster).read(activity_ny.uuid, "clicks", 1, 0, limit=100)
    assert [(m.offset, m.value) for m in got] == [(i, b"%d" % (2 * i + 1)) for i in range(20)]
    result = replica_verify(actor=owner, source=activity, replica=activity_ny)
    assert result["messagesChecked"] == 40 and result["firstDifference"] is None
    assert link.pk


def test_verify_compares_each_partition_in_the_groups_holding_it(operator, owner, activity,
                                                                 activity_ny):
    grow(operator, activity.cluster, "s2", "s3")
    grow(operator, activity_ny.cluster, "s2", "s3")
    replicated_clicks(owner, activity, activity_ny, per_partition=20)
    view = placement.view_of(activity_ny.cluster.name)
    away = next(p for p in (0, 1) if view.group_of(activity_ny.uuid, "clicks", p) != view.home)
    # The replica's partition diverges at offset 12, in the group holding it (not the home
    # group a single store URL would name).
    replica = store_for(activity_ny.cluster)
    replica.truncate(activity_ny.uuid, "clicks", away, 12)
    replica.append(activity_ny.uuid, "clicks", [Record(b"other", partition=away)],
                   origin=activity.uuid)
    result = replica_verify(actor=owner, source=activity, replica=activity_ny)
    assert result["firstDifference"] == {"topic": "clicks", "partition": away, "offset": 12}


def test_retention_expires_in_every_group(operator, owner, activity):
    groups = grow(operator, activity.cluster, "s2", "s3")
    activity.ttl = 60
    activity.save(update_fields=["ttl"])
    topic_watermarks(topic_create(actor=owner, stream=activity, name="clicks", partitions=3))
    messages_produce(actor=owner, stream=activity, topic="clicks", records=spread(
        activity, "clicks", [Record(b"v", timestamp_ms=1_000) for _ in range(30)]))
    assert stream_expire(stream=activity, now_ms=10_000_000) == 30
    assert physical(groups, activity) == {("clicks", p): 10 for p in range(3)}
    assert store_for(activity.cluster).watermarks(activity.uuid, "clicks") == {
        p: (10, 10) for p in range(3)}
