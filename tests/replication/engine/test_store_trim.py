"""MessageStore.trim, `stream purge -all`'s primitive, on both stores: a prefix below an
offset goes, in bounded batches; the next offset never moves."""

from __future__ import annotations

import pytest

from replication.engine.store import OffsetOutOfRange, Record
from tests.replication.engine.test_store import ORIGIN, _values


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
