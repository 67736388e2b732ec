"""The engine half of a partition move (issue 33) on both PostgreSQL layouts: everything of
the partition reaches the target's row (still not held), the source lets go under its lock,
batches a compaction rewrote during the copy are copied again, the clean-up leaves an empty
row, cursor commits to a partition the store does not hold are refused, and stores it cannot
move between are refused with the fix."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest

from replication.engine import fence
from replication.engine import partitionmove as moving
from replication.engine.factory import open_store
from replication.engine.producers import ProducerBatch
from replication.engine.store import Record, StoreError
from replication.engine.storebase import MessageStore
from tests.replication.engine.conftest import _scratch_database

STREAM = uuid.uuid4()


def _pair(layouts: tuple[str, str]) -> Iterator[tuple[MessageStore, MessageStore, str, str]]:
    made = [_scratch_database(layout) for layout in layouts]
    urls = [next(m) for m in made]
    stores = [open_store(url) for url in urls]
    for store in stores:
        fence.install(store)
        store.ensure_topic(STREAM, "t", 2)
        moving.ensure_marker_table(store)
    fence.set_held(stores[0], STREAM, "t", [0, 1])
    fence.set_held(stores[1], STREAM, "t", [])
    yield stores[0], stores[1], urls[0], urls[1]
    for store in stores:
        store.close()
    for m in made:
        next(m, None)


@pytest.fixture(params=["batches", "rows"])
def pair(request):  # type: ignore[no-untyped-def]
    yield from _pair((request.param, request.param))


def counters(url: str, partition: int) -> tuple:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT held, next_offset, low_offset, rows, bytes FROM partitions "
                            "WHERE partition = %s", (partition,)).fetchone()


def test_a_partition_moves_whole_and_the_source_lets_go(pair):
    source, target, surl, turl = pair
    source.append(STREAM, "t", [Record(b"s%d" % i, partition=0) for i in range(3)],
                  origin=STREAM, sequence=ProducerBatch(5, 0, 0, 3))
    source.append(STREAM, "t", [Record(b"v%d" % i, partition=0) for i in range(40)],
                  origin=STREAM)
    source.append(STREAM, "t", [Record(b"other", partition=1)], origin=STREAM)
    source.commit_cursor(STREAM, "g", "t", 0, 7)
    spid, tpid = (moving.pid_of(s, STREAM, "t", 0) for s in (source, target))
    moving.prepare(target, tpid)
    upto = moving.copy_history(source, target, spid, tpid, chunk=10)
    assert upto == 43
    source.append(STREAM, "t", [Record(b"tail", partition=0)], origin=STREAM)
    before = counters(surl, 0)

    held = moving.cut_over(source, target, spid, tpid, copied_to=upto,
                           compaction=moving.compaction_mark(source, spid), target_name="b")

    assert held == 44
    assert before[1:3] == (44, 0)
    assert counters(turl, 0) == (False, *before[1:])  # not held until placed
    assert counters(surl, 0)[0] is False and moving.moved_out(source, spid) == "b"
    with pytest.raises(Exception, match=fence.NOT_HELD):
        source.append(STREAM, "t", [Record(b"late", partition=0)], origin=STREAM)
    with pytest.raises(Exception, match=fence.NOT_HELD):
        source.commit_cursor(STREAM, "g", "t", 0, 9)
    fence.set_held(source, STREAM, "t", [0, 1])  # a stale placement's repair: not for moved
    assert counters(surl, 0)[0] is False
    fence.set_held(target, STREAM, "t", [0])  # the placement switched
    got = target.read(STREAM, "t", 0, 0, limit=100)
    assert [m.value for m in got] == [b"s0", b"s1", b"s2"] + [b"v%d" % i for i in range(40)] \
        + [b"tail"]
    assert target.fetch_cursor(STREAM, "g", "t", 0) == 7
    assert target.producer_state(STREAM, "t", 0, 5) == source.producer_state(STREAM, "t", 0, 5)
    assert target.append(STREAM, "t", [Record(b"s0", partition=0)], origin=STREAM,
                         sequence=ProducerBatch(5, 0, 0, 3)) == [(0, 0)]  # a retry, known
    moving.clean_up(source, spid, 1)
    assert counters(surl, 0) == (False, 0, 0, 0, 0)
    assert moving.moved_out(source, spid) is None
    assert counters(surl, 1)[:2] == (True, 1)  # the other partition untouched


def test_the_copy_reports_each_chunk_with_what_is_copied_and_what_is_known(pair):
    source, target, _, _ = pair
    for at in range(0, 50, 5):
        source.append(STREAM, "t", [Record(b"%d" % i, partition=0) for i in range(at, at + 5)],
                      origin=STREAM)
    spid, tpid = (moving.pid_of(s, STREAM, "t", 0) for s in (source, target))
    seen: list[tuple[int, int]] = []
    upto = moving.copy_history(source, target, spid, tpid, chunk=10,
                               progress=lambda done, total: seen.append((done, total)))
    assert upto == 50
    # A chunk a report (batches of 5 within 10 offsets), never more copied than known.
    assert seen == [(n, 50) for n in range(10, 51, 10)]
    with target._reading() as conn:
        assert conn.execute(f"SELECT count(*) FROM {target.DATA_TABLE} WHERE pid = %s",
                            (tpid,)).fetchone()[0] == (10 if target.KEEPS_BATCHES else 50)


def test_batches_rewritten_during_the_copy_are_copied_again(pair):
    source, target, _, turl = pair
    for i in range(5):
        source.append(STREAM, "t", [Record(b"%d" % i, partition=0)], origin=STREAM)
    spid, tpid = (moving.pid_of(s, STREAM, "t", 0) for s in (source, target))
    upto = moving.copy_history(source, target, spid, tpid)
    with target._writing() as conn:  # a stale copy: as if compaction changed the source
        conn.execute(f"DELETE FROM {target.DATA_TABLE} WHERE pid = %s", (tpid,))
    seen = ("a compaction pass ran since",)
    moving.cut_over(source, target, spid, tpid, copied_to=upto, compaction=seen,
                    target_name="b")
    fence.set_held(target, STREAM, "t", [0])
    assert [m.value for m in target.read(STREAM, "t", 0, 0, limit=10)] == [
        b"%d" % i for i in range(5)]
    assert counters(turl, 0)[:2] == (True, 5)


def test_stores_that_cannot_move_a_partition_are_refused(tmp_path):
    sqlite = open_store(f"sqlite:///{tmp_path / 's.sqlite3'}")
    with pytest.raises(StoreError, match="needs PostgreSQL store groups"):
        moving.check_store(sqlite)
    sqlite.close()
    for source, target, *_ in _pair(("rows", "batches")):
        with pytest.raises(StoreError, match=r"different store layouts \(rows at the "
                                             r"source, batches at the target\): convert"):
            moving.check_pair(source, target)


class _PausedBefore:
    """A connection that waits for `go` before running a statement starting with `prefix`
    (and says so through `there`)."""

    def __init__(self, conn: psycopg.Connection, prefix: str, there: threading.Event,
                 go: threading.Event) -> None:
        self._conn, self._prefix, self._there, self._go = conn, prefix, there, go

    def execute(self, query, *args, **kwargs):  # type: ignore[no-untyped-def]
        if isinstance(query, str) and query.startswith(self._prefix):
            self._there.set()
            assert self._go.wait(30)
        return self._conn.execute(query, *args, **kwargs)

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self._conn, name)


def test_a_repair_that_looked_before_a_cut_over_never_holds_the_partition_after_it(pair):
    """Two moves of one topic at once (the chaos soak's pairs): the first one's repair of the
    topic's held flags (placement.hold after its switch, from a placement that still names
    the source for the other partition) read the moved-out markers, then the other move's
    cut-over committed, then the repair's update held the partition at its source again:
    writers that still placed it there wrote where the cut-over had copied from already."""
    source, target, surl, _ = pair
    source.append(STREAM, "t", [Record(b"v%d" % i, partition=0) for i in range(5)],
                  origin=STREAM)
    spid, tpid = (moving.pid_of(s, STREAM, "t", 0) for s in (source, target))
    moving.prepare(target, tpid)
    upto = moving.copy_history(source, target, spid, tpid)
    repairer = open_store(surl)  # another process's pool on the same store
    opened = repairer._writing
    there, go = threading.Event(), threading.Event()

    @contextmanager
    def writing():  # type: ignore[no-untyped-def]
        with opened() as conn:
            yield _PausedBefore(conn, "UPDATE partitions SET held", there, go)

    repairer._writing = writing  # type: ignore[method-assign]
    repair = threading.Thread(target=fence.set_held, args=(repairer, STREAM, "t", [0, 1]))
    try:
        repair.start()
        assert there.wait(30)  # it looked, and is about to update the flags
        moving.cut_over(source, target, spid, tpid, copied_to=upto,
                        compaction=moving.compaction_mark(source, spid), target_name="b")
        go.set()
        repair.join(30)
    finally:
        go.set()
        repairer.close()
    assert counters(surl, 0)[0] is False  # moved out: held nowhere until the switch
    assert counters(surl, 1)[0] is True
    with pytest.raises(Exception, match=fence.NOT_HELD):
        source.append(STREAM, "t", [Record(b"late", partition=0)], origin=STREAM)


def test_two_first_moves_at_once_both_find_the_marker_table(monkeypatch):
    """The chaos soak of 29 Nov (seed 11): the first two moves of a cluster, started together,
    both found no `moved_out` table and both created it; one failed on PostgreSQL's catalog
    (`pg_type_typname_nsp_index`: CREATE TABLE IF NOT EXISTS does not wait for another
    session's). Here the first one's transaction is held open a moment past its DDL."""
    made = _scratch_database("batches")
    url = next(made)
    stores = [open_store(url) for _ in range(2)]
    slow = moving.MOVED_OUT + ";\nSELECT pg_sleep(1.5)"
    monkeypatch.setattr(moving, "MOVED_OUT", slow)
    errors: list[BaseException] = []

    def ensure(store: MessageStore) -> None:
        try:
            moving.ensure_marker_table(store)
        except BaseException as error:  # noqa: BLE001: the test wants none
            errors.append(error)

    first = threading.Thread(target=ensure, args=(stores[0],))
    try:
        first.start()
        time.sleep(0.5)  # the first has created the table, not committed yet
        ensure(stores[1])
        first.join(30)
        assert errors == []
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT count(*) FROM pg_trigger WHERE tgname IN "
                                "('sg_cursor_not_held', 'sg_note_cut_back')").fetchone()[0] == 2
    finally:
        for store in stores:
            store.close()
        next(made, None)
