"""Batch cursor commits and filtered cursor deletes, on PostgreSQL and SQLite alike."""

import uuid

import pytest

from replication.engine import PartitionOutOfRange


def test_commit_cursors_writes_a_groups_partitions_at_once_and_may_move_back(store):
    stream = uuid.uuid4()
    store.ensure_topic(stream, "t", 3)
    store.commit_cursors(stream, "g", [("t", 0, 5), ("t", 2, 7)])
    store.commit_cursors(stream, "g", [("t", 0, 4)])  # Kafka lets a group rewind
    assert store.cursors(stream) == [("g", "t", 0, 4), ("g", "t", 2, 7)]
    with pytest.raises(PartitionOutOfRange):
        store.commit_cursors(stream, "g", [("t", 1, 1), ("t", 9, 1)])
    assert store.fetch_cursor(stream, "g", "t", 1) is None  # nothing of a refused batch


def test_delete_cursors_matches_every_filter_given(store):
    stream, other = uuid.uuid4(), uuid.uuid4()
    for s in (stream, other):
        store.ensure_topic(s, "t", 2)
        store.ensure_topic(s, "u", 1)
        store.commit_cursors(s, "a", [("t", 0, 1), ("t", 1, 1), ("u", 0, 1)])
        store.commit_cursors(s, "b", [("t", 0, 2)])
    assert store.delete_cursors(stream, group="a", topic="t", partition=1) == 1
    assert store.delete_cursors(stream, topic="t") == 2
    assert store.cursors(stream) == [("a", "u", 0, 1)]
    assert store.delete_cursors(stream) == 1 and store.cursors(stream) == []
    assert len(store.cursors(other)) == 4
