"""Committed cursors as Kafka keeps them, on PostgreSQL and SQLite alike: a consumer's own
commit is stored exactly (back, past the end) with its metadata and leader epoch; a replicated
merge is clamped and never moves back, the metadata and epoch going with the offset kept; stores
made before metadata or epochs were kept gain them on open; ListOffsets' MAX_TIMESTAMP."""

from __future__ import annotations

import sqlite3
import uuid

import psycopg

from replication.engine import Record, open_store
from replication.engine.pg.schema import SCHEMA as PG_SCHEMA
from replication.engine.replicator import sync_cursors
from replication.engine.sqlitestore import SCHEMA as SQLITE_SCHEMA
from replication.engine.store import Committed
from tests.replication.engine.test_store import ORIGIN

METADATA = "Hello\0world!"  # a Kafka string may hold NUL (librdkafka's test 0099)


def test_a_commit_is_kept_exactly_back_or_past_the_end_with_its_metadata(store, stream):
    store.ensure_topic(stream, "t", 2)
    store.append(stream, "t", [Record(b"v", partition=0)] * 3, origin=ORIGIN)
    store.commit_cursors(stream, "g", [("t", 0, 900, METADATA), ("t", 1, 42)])
    store.commit_cursors(stream, "g", [("t", 0, 1, "back")])
    assert store.commits(stream) == [Committed("g", "t", 0, 1, "back"),
                                     Committed("g", "t", 1, 42, "")]
    assert store.cursors(stream) == [("g", "t", 0, 1), ("g", "t", 1, 42)]
    store.commit_cursors(stream, "g", [("t", 0, 900, METADATA)])
    assert store.commits(stream)[0] == Committed("g", "t", 0, 900, METADATA)


def test_a_commit_keeps_its_leader_epoch_and_none_is_minus_one(store, stream):
    store.ensure_topic(stream, "t", 2)
    store.commit_cursors(stream, "g", [("t", 0, 10, "m", 2), ("t", 1, 20, "")])
    assert store.commits(stream) == [Committed("g", "t", 0, 10, "m", 2),
                                     Committed("g", "t", 1, 20, "", -1)]
    store.commit_cursors(stream, "g", [("t", 0, 10, "m", 0)])  # the epoch alone changes
    assert store.commits(stream)[0].leader_epoch == 0


def test_a_merge_never_moves_back_and_keeps_the_metadata_of_the_offset_kept(store, stream):
    store.ensure_topic(stream, "t", 1)
    store.append(stream, "t", [Record(b"v")] * 10, origin=ORIGIN)
    store.merge_cursors(stream, [Committed("g", "t", 0, 8, "eight")])
    assert store.merge_cursors(stream, [Committed("g", "t", 0, 5, "five")]) == {("g", "t", 0): 8}
    assert store.commits(stream) == [Committed("g", "t", 0, 8, "eight")]
    assert store.merge_cursors(stream, [Committed("g", "t", 0, 99, "far")]) == {("g", "t", 0): 10}
    assert store.commits(stream) == [Committed("g", "t", 0, 10, "far")]  # clamped to the end
    store.merge_cursors(stream, [("g", "t", 0, 10)])  # without metadata: none
    assert store.commits(stream) == [Committed("g", "t", 0, 10, "")]
    store.merge_cursors(stream, [Committed("g", "t", 0, 10, "", 3)])
    assert store.merge_cursors(stream, [Committed("g", "t", 0, 4, "", 9)]) == {("g", "t", 0): 10}
    assert store.commits(stream) == [Committed("g", "t", 0, 10, "", 3)]  # the epoch kept too


def _old_pg_store(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(PG_SCHEMA.replace("    metadata bytea,\n", "").replace(
            "    leader_epoch integer NOT NULL DEFAULT -1,\n", ""))


def _old_sqlite_store(path: str) -> None:
    with sqlite3.connect(path) as conn:
        conn.executescript(SQLITE_SCHEMA.replace("    metadata BLOB,\n", "").replace(
            "    leader_epoch INTEGER NOT NULL DEFAULT -1,\n", ""))


def _cursor_columns(url: str) -> set[str]:
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            return {r[1] for r in conn.execute("PRAGMA table_info(consumer_cursors)")}
    with psycopg.connect(url) as conn:
        return {r[0] for r in conn.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_name = 'consumer_cursors'")}


def _upgrades(url: str) -> None:
    assert not {"metadata", "leader_epoch"} & _cursor_columns(url)
    stream = uuid.uuid4()
    store = open_store(url)
    try:
        assert {"metadata", "leader_epoch"} <= _cursor_columns(url)
        store.ensure_topic(stream, "t", 1)
        store.commit_cursors(stream, "g", [("t", 0, 3, "kept", 4)])
        assert store.commits(stream) == [Committed("g", "t", 0, 3, "kept", 4)]
    finally:
        store.close()
    open_store(url).close()  # a second open finds the column and leaves it


def test_a_postgresql_store_made_before_metadata_and_epochs_gains_them_on_open(fresh_pg_url):
    _old_pg_store(fresh_pg_url)
    _upgrades(fresh_pg_url)


def test_a_sqlite_store_made_before_metadata_and_epochs_gains_them_on_open(tmp_path):
    path = str(tmp_path / "old.sqlite3")
    _old_sqlite_store(path)
    _upgrades(f"sqlite:///{path}")


def test_max_timestamp_is_the_earliest_record_with_the_largest_timestamp(store, stream):
    store.ensure_topic(stream, "t", 2)
    stamps = [1_000, 5_000, 2_000, 5_000, 3_000]
    store.append(stream, "t", [Record(b"v", partition=0, timestamp_ms=ts) for ts in stamps],
                 origin=ORIGIN)
    assert store.max_timestamp(stream, "t", 0) == (1, 5_000)
    assert store.max_timestamp(stream, "t", 1) is None


def test_cursor_sync_copies_metadata_and_owes_nothing_for_a_cursor_past_the_sources_end(net):
    net.add("A", "B")
    net.produce("A", "clicks", 30, partitions=1)
    net.pump("A", "B")
    source, replica = net.store("A"), net.store("B")
    a, b, synced = net.id("A"), net.id("B"), {}

    def sync() -> int:
        return sync_cursors(source, a, replica, b, net.topics("A"), synced)

    source.commit_cursors(a, "g", [("clicks", 0, 20, "twenty")])
    assert sync() == 0 and replica.commits(b) == [Committed("g", "clicks", 0, 20, "twenty")]
    source.commit_cursors(a, "g", [("clicks", 0, 20, "again")])  # metadata alone changed
    assert sync() == 0 and replica.commits(b) == [Committed("g", "clicks", 0, 20, "again")]
    source.commit_cursors(a, "g", [("clicks", 0, 20, "again", 2)])  # the epoch alone changed
    assert sync() == 0 and replica.commits(b) == [Committed("g", "clicks", 0, 20, "again", 2)]
    source.commit_cursors(a, "g", [("clicks", 0, 500, "far")])  # past what the source holds
    assert sync() == 0 and replica.commits(b) == [Committed("g", "clicks", 0, 30, "far")]
    source.commit_cursors(a, "g", [("clicks", 0, 5, "back")])  # the replica never moves back
    assert sync() == 0 and replica.fetch_cursor(b, "g", "clicks", 0) == 30
    assert source.fetch_cursor(a, "g", "clicks", 0) == 5
