"""`MessageStore`'s own rules (replication/engine/storebase.py), on PostgreSQL and SQLite alike:
batch cursor commits and filtered cursor deletes; and trim, `stream purge -all`'s primitive: a
prefix below an offset goes, in bounded batches; the next offset never moves."""

from __future__ import annotations

import uuid

import pytest

from replication.engine import PartitionOutOfRange
from replication.engine.store import OffsetOutOfRange, Record
from tests.replication.engine.test_store import ORIGIN, _values, rows_only


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


@rows_only
def test_trim_removes_the_prefix_below_end_in_bounded_batches(store, stream):
    store.ensure_topic(stream, "t", 2)
    for p in (0, 1):
        store.append(stream, "t", [Record(b"v%d" % i, partition=p) for i in range(6)],
                     origin=ORIGIN)
    logical = store.sizes(stream)["logicalsize"]
    rounds = [store.trim(stream, "t", 0, 5, batch=2) for _ in range(4)]
    assert rounds == [2, 2, 1, 0]
    assert store.watermarks(stream, "t") == {0: (5, 6), 1: (0, 6)}
    assert store.sizes(stream)["logicalsize"] == logical - 5 * 2
    with pytest.raises(OffsetOutOfRange, match=r"valid offsets are 5\.\.6"):
        store.read(stream, "t", 0, 4)
    assert _values(store, stream, "t", 0, 5) == [b"v5"]


def test_trim_past_the_end_empties_the_partition_and_offsets_go_on(store, stream):
    store.ensure_topic(stream, "t", 1)
    store.append(stream, "t", [Record(b"v")] * 3, origin=ORIGIN)
    assert store.trim(stream, "t", 0, 1_000) == 3
    assert store.trim(stream, "t", 0, 1_000) == 0
    assert store.watermarks(stream, "t") == {0: (3, 3)}
    assert store.append(stream, "t", [Record(b"n")], origin=ORIGIN) == [(0, 3)]
    assert _values(store, stream, "t", 0, 3) == [b"n"]
