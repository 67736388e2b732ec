"""The partition entries Metadata answers with, cached per topic, partition count and live set
(issue 33): the same leaders as hashing each time, new entries when either changes."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

from broker.apis import metadata
from broker.apis.metadata import key_of, leader_of, partitions_of
from broker.session import Node


def _resolved(stream: uuid.UUID, partitions: int) -> SimpleNamespace:
    return SimpleNamespace(stream=SimpleNamespace(uuid=stream), topic="t",
                           partitions=partitions)


def test_cached_entries_name_the_hashed_leaders_and_follow_the_live_set_and_count():
    metadata._PARTITIONS.clear()
    stream = uuid.uuid4()
    three = [Node(1, "a", 1), Node(2, "b", 2), Node(3, "c", 3)]
    first = partitions_of(_resolved(stream, 8), three)
    assert [e["leader_id"] for e in first] == [
        leader_of(key_of(stream, "t"), p, three) for p in range(8)]
    assert partitions_of(_resolved(stream, 8), three) is first  # cached
    two = three[:2]
    assert [e["leader_id"] for e in partitions_of(_resolved(stream, 8), two)] == [
        leader_of(key_of(stream, "t"), p, two) for p in range(8)]
    grown = partitions_of(_resolved(stream, 12), three)
    assert [e["partition_index"] for e in grown] == list(range(12))
    alone = partitions_of(_resolved(stream, 4), [Node(7, "x", 1)])
    assert [(e["leader_id"], e["replica_nodes"], e["isr_nodes"]) for e in alone] == [
        (7, [7], [7])] * 4


def test_the_cache_is_dropped_past_its_bound(monkeypatch):
    metadata._PARTITIONS.clear()
    monkeypatch.setattr(metadata, "PARTITIONS_CACHED", 3)
    nodes = [Node(1, "a", 1)]
    for _ in range(5):
        partitions_of(_resolved(uuid.uuid4(), 2), nodes)
    assert len(metadata._PARTITIONS) <= 3
