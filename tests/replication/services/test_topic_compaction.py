"""Per-topic compaction settings in the domain (issue 31): a topic's cleanup.policy and
compaction settings override its stream's, "stream" and -1 go back to them, a compact-only
topic outlives its stream's ttl, a replica compacts its copy by the origin topic's policy,
and a compacted topic on a row store names the conversion."""

from __future__ import annotations

import pytest

from replication.engine.store import Record
from replication.errors import InvalidInput
from replication.services import replica_add, topic_create, topic_edit, upstream_add
from replication.services.compaction import compacted_streams, stream_compact
from replication.services.messages import messages_produce
from replication.services.purge import stream_expire
from replication.stores import store_for
from tests.replication.services.test_compaction import BATCHES, LATER, kept, replicate


def produce(owner, stream, topic: str, pairs: list[tuple[bytes | None, bytes]]) -> None:
    messages_produce(actor=owner, stream=stream, topic=topic, records=[
        Record(value, key=key, partition=0, timestamp_ms=1_000 + i)
        for i, (key, value) in enumerate(pairs)])


@BATCHES
def test_a_topics_policy_overrides_its_streams_and_goes_back_to_it(layout, owner, activity):
    topic = topic_create(actor=owner, stream=activity, name="clicks", partitions=1,
                         cleanuppolicy="compact", deleteretention=5, mincompactionlag=-1)
    assert (topic.policy, topic.compacted, topic.expires) == ("compact", True, False)
    assert topic.compaction() == (0, 5, 0.5)  # the stream's lag and ratio, its own retention
    with pytest.raises(InvalidInput, match="record 0 has no key: a compacted topic"):
        produce(owner, activity, "clicks", [(None, b"x")])
    topic = topic_edit(actor=owner, stream=activity, name="clicks", cleanuppolicy="stream",
                       deleteretention=-1, mincleanabledirtyratio=0.25)
    assert (topic.cleanuppolicy, topic.policy, topic.deleteretention) == ("", "delete", None)
    assert topic.compaction() == (0, 86_400_000, 0.25)
    produce(owner, activity, "clicks", [(None, b"x")])  # the stream's delete: no key needed


@BATCHES
@pytest.mark.parametrize(("options", "reason"), [
    ({"cleanuppolicy": "shred"}, "is not one of compact, compact,delete, delete, or stream"),
    ({"mincompactionlag": -2}, "whole number of milliseconds, 0 or more, or -1"),
    ({"mincleanabledirtyratio": 1.5}, "a number from 0 to 1"),
])
def test_bad_topic_compaction_settings_are_refused_with_the_reason(layout, owner, activity,
                                                                    options, reason):
    with pytest.raises(InvalidInput, match=reason):
        topic_create(actor=owner, stream=activity, name="clicks", **options)


def test_a_compacted_topic_on_a_row_store_names_the_conversion(layout, owner, activity):
    with pytest.raises(InvalidInput, match=r"manage\.py convertstores"):
        topic_create(actor=owner, stream=activity, name="changelog", cleanuppolicy="compact")
    topic_create(actor=owner, stream=activity, name="events", cleanuppolicy="delete")


@BATCHES
def test_a_compact_only_topic_outlives_the_streams_ttl(layout, owner, activity):
    topic_create(actor=owner, stream=activity, name="changelog", partitions=1,
                 cleanuppolicy="compact")
    topic_create(actor=owner, stream=activity, name="both", partitions=1,
                 cleanuppolicy="compact,delete")
    for name in ("changelog", "both"):
        produce(owner, activity, name, [(b"a", b"1"), (b"b", b"2")])
    assert activity.ttl and stream_expire(stream=activity, now_ms=LATER) == 2
    marks = {n: store_for(activity.cluster).watermarks(activity.uuid, n)
             for n in ("changelog", "both")}
    assert marks == {"changelog": {0: (0, 2)}, "both": {0: (2, 2)}}


@BATCHES
def test_a_replica_compacts_a_topic_by_its_origin_topics_policy(layout, owner, activity,
                                                               activity_ny):
    topic_create(actor=owner, stream=activity, name="clicks", partitions=1,
                 cleanuppolicy="compact", mincleanabledirtyratio=0.0)
    replica_add(actor=owner, source=activity, replica=activity_ny)
    upstream_add(actor=owner, replica=activity_ny, source=activity)
    produce(owner, activity, "clicks", [(b"a", b"1"), (b"b", b"1"), (b"a", b"2")])
    replicate(activity, activity_ny, 3)
    assert set(compacted_streams()) == {activity, activity_ny}  # neither is -compact
    for stream in (activity, activity_ny):
        assert stream_compact(stream=stream, now_ms=LATER).removed == 1
    assert kept(activity_ny) == kept(activity) == [(1, b"b", b"1"), (2, b"a", b"2")]


@BATCHES
def test_a_replicas_copy_of_a_compact_only_topic_outlives_the_replicas_ttl(
        layout, owner, activity, activity_ny):
    topic_create(actor=owner, stream=activity, name="clicks", partitions=1,
                 cleanuppolicy="compact")
    replica_add(actor=owner, source=activity, replica=activity_ny)
    upstream_add(actor=owner, replica=activity_ny, source=activity)
    produce(owner, activity, "clicks", [(b"a", b"1"), (b"b", b"1")])
    replicate(activity, activity_ny, 2)
    assert activity_ny.ttl and stream_expire(stream=activity_ny, now_ms=LATER) == 0
    assert store_for(activity_ny.cluster).watermarks(activity_ny.uuid, "clicks") == {
        0: (0, 2)}


def test_the_migration_brings_replicas_made_before_up_to_their_origins(owner, activity,
                                                                       activity_ny):
    import importlib

    from django.apps import apps

    from replication.models import Topic

    carry = importlib.import_module(
        "replication.migrations.0015_replica_topic_overrides").carry_overrides
    replica_add(actor=owner, source=activity, replica=activity_ny)
    upstream_add(actor=owner, replica=activity_ny, source=activity)
    topic_create(actor=owner, stream=activity, name="clicks", partitions=1,
                 mincompactionlag=7, deleteretention=9)
    Topic.objects.filter(stream=activity_ny).update(mincompactionlag=None,
                                                    deleteretention=None)  # as before
    carry(apps, None)
    copy = Topic.objects.get(stream=activity_ny, name="clicks")
    assert (copy.mincompactionlag, copy.deleteretention, copy.cleanuppolicy) == (7, 9, "")
