"""A transaction's end in a batch store (issue 31): its markers in every partition it wrote and
its consumer offsets go in one store transaction (one commit, not one per partition), on
PostgreSQL and SQLite alike; a failure part-way leaves none of them."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

import pytest

from replication.engine import open_store
from replication.engine.store import PartitionOutOfRange
from tests.replication.engine.test_batchstore import ORIGIN, _transactional


@pytest.fixture(params=["pg", "sqlite"])
def store(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    opened = open_store(request.getfixturevalue(f"{request.param}_batch_url"))
    yield opened
    opened.close()


def _counted(store) -> list[int]:  # type: ignore[no-untyped-def]
    """The number of write transactions the store opens from now on (the real ones)."""
    opened = [0]
    writing = store._writing

    @contextlib.contextmanager
    def counting() -> Iterator:
        opened[0] += 1
        with writing() as conn:
            yield conn

    store._writing = counting
    return opened


def test_a_transactions_markers_and_offsets_are_one_store_transaction(store):
    stream = uuid.uuid4()
    store.ensure_topic(stream, "t", 3)
    for p in (0, 2):  # nothing produced to partition 1: no range there, no marker
        store.append_batches(stream, "t", {p: _transactional(3, 71, 0)}, origin=ORIGIN)
    writes = _counted(store)
    at = [(stream, "t", 0), (stream, "t", 1), (stream, "t", 2), (stream, "gone", 0)]
    written = store.write_markers(at, producer_id=71, epoch=0, commit=True,
                                  cursors=[(stream, "g", [("t", 0, 3, "")])])
    assert writes == [1]
    assert written == {at[0]: 3, at[1]: None, at[2]: 3, at[3]: None}
    assert {p: high for p, (_, high) in store.watermarks(stream, "t").items()} == \
        {0: 4, 1: 0, 2: 4}
    assert [store.txn_view(stream, "t", p, 0, 4) for p in (0, 2)] == [(4, []), (4, [])]
    assert ("g", "t", 0, 3) in store.cursors(stream)
    # Asked again (a coordinator completing it after a crash): nothing is written twice.
    assert set(store.write_markers(at, producer_id=71, epoch=0, commit=True).values()) == {None}
    assert store.watermarks(stream, "t")[0][1] == 4


def test_a_transactions_end_that_fails_part_way_writes_no_marker(store):
    stream = uuid.uuid4()
    store.ensure_topic(stream, "t", 2)
    for p in (0, 1):
        store.append_batches(stream, "t", {p: _transactional(2, 72, 0)}, origin=ORIGIN)
    with pytest.raises(PartitionOutOfRange):
        store.write_markers([(stream, "t", 0), (stream, "t", 1)], producer_id=72, epoch=0,
                            commit=True, cursors=[(stream, "g", [("t", 9, 2, "")])])
    assert {p: high for p, (_, high) in store.watermarks(stream, "t").items()} == {0: 2, 1: 2}
    assert store.txn_view(stream, "t", 0, 0, 2) == (0, [])  # still open: read_committed waits
    assert not [c for c in store.cursors(stream) if c[0] == "g"]


def test_a_browser_learns_which_offsets_are_markers_or_aborted_or_open_records(store):
    stream = uuid.uuid4()
    store.ensure_topic(stream, "t", 1)
    for producer_id, count, commit in ((91, 2, True), (92, 2, False), (93, 1, None)):
        store.append_batches(stream, "t", {0: _transactional(count, producer_id, 0)},
                             origin=ORIGIN)
        if commit is not None:
            store.write_marker(stream, "t", 0, producer_id=producer_id, epoch=0, commit=commit,
                               origin=ORIGIN)
    assert store.txn_kinds(stream, "t", 0, 0, 7) == {
        2: "commit marker", 3: "aborted", 4: "aborted", 5: "abort marker", 6: "pending"}
    assert store.txn_kinds(stream, "t", 0, 4, 5) == {4: "aborted", 5: "abort marker"}
