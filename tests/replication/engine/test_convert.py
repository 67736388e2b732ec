"""Upgrade in place (issue 30): a store filled by the row layout's code converts to the batch
layout with every message, offset, cursor and producer sequence kept."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import psycopg
import pytest

from replication.engine import open_store
from replication.engine.convertrows import BATCH
from replication.engine.factory import sqlite_path
from replication.engine.pgbatch import schema as batch_schema
from replication.engine.pgbatch.convert import convert_to_batches
from replication.engine.producers import ProducerBatch
from replication.engine.sqliteconvert import convert_sqlite_to_batches
from replication.engine.store import Committed, Record, StoreError

ORIGIN, OTHER = uuid.uuid4(), uuid.uuid4()


def _fill(url: str, stream: uuid.UUID, replica: uuid.UUID) -> None:
    rows = open_store(url, layout="rows")
    assert rows.DATA_TABLE == "messages"
    rows.ensure_topic(stream, "t", 2)
    records = [Record(None if i % 7 == 0 else b"" if i % 11 == 0 else b"v%d" % i,
                      key=b"k%d" % (i % 5) if i % 3 else None, partition=i % 2,
                      headers=(("h", b"%d" % i), ("null", None)) if i % 4 == 0 else (),
                      timestamp_ms=1_700_000_000_000 + i)
               for i in range(2 * BATCH + 500)]
    rows.append(stream, "t", records, origin=ORIGIN, producer="alice")
    rows.append(stream, "t", [Record(b"other", partition=0)] * 3, origin=OTHER)
    rows.append(stream, "t", [Record(b"idem", partition=1)] * 4, origin=ORIGIN,
                sequence=ProducerBatch(42, 3, 0, 4))
    rows.trim(stream, "t", 0, 100)
    rows.commit_cursors(stream, "g", [("t", 0, 500, "meta"), ("t", 1, 7, "")])
    rows.apply(replica, rows.read(stream, "t", 1, 0, limit=10), link="l")
    rows.end_link(replica, "ended", timeout=5)
    rows.close()


def _snapshot(store, stream: uuid.UUID, replica: uuid.UUID) -> dict:
    return {
        "marks": store.watermarks(stream, "t"),
        "messages": [m for p in (0, 1) for m in store.read(stream, "t", p,
                                                             store.watermarks(stream, "t")[p][0],
                                                             limit=10_000, max_bytes=1 << 30)],
        "commits": store.commits(stream),
        "states": store.producer_states(stream, "t", 1),
        "replica": store.read(replica, "t", 1, 0),
        "link": store.replication_cursor(replica, "l", "t", 1),
        "stats": [(p.partition, p.low, p.high, p.messages, p.consumers)
                  for p in store.partition_stats(stream, "t")],
    }


@pytest.fixture(params=["postgres", "sqlite"])
def converting(request: pytest.FixtureRequest, tmp_path) -> tuple[str, Callable]:
    """A store URL with no store yet, and its database's converter."""
    if request.param == "postgres":
        return request.getfixturevalue("fresh_pg_url"), convert_to_batches
    url = f"sqlite:///{tmp_path / 'rows.sqlite3'}"
    return url, lambda url, **kw: convert_sqlite_to_batches(sqlite_path(url), **kw)


def test_a_row_store_converts_to_batches_keeping_everything(converting):
    fresh_pg_url, convert_to_batches = converting
    stream, replica = uuid.uuid4(), uuid.uuid4()
    _fill(fresh_pg_url, stream, replica)
    before = open_store(fresh_pg_url)
    expected = _snapshot(before, stream, replica)
    before.close()
    seen: list[tuple[int, int]] = []
    converted = convert_to_batches(fresh_pg_url, progress=lambda *step: seen.append(step))
    assert converted.messages == 2 * BATCH + 500 + 3 + 4 - 100 + 10
    assert seen[-1][0] == seen[-1][1] == converted.partitions
    after = open_store(fresh_pg_url)
    assert after.DATA_TABLE == "batches"
    assert _snapshot(after, stream, replica) == expected
    assert expected["commits"][0] == Committed("g", "t", 0, 500, "meta")
    with after._reading() as conn:  # byte counters recounted as the batch layout counts them
        counted = conn.execute("SELECT bytes, (SELECT coalesce(sum(size), 0) FROM batches "
                               "WHERE pid = partitions.id) FROM partitions").fetchall()
    assert counted and all(kept == summed > 0 for kept, summed in counted if kept)
    # The producer's sequences hold: its retried batch is still acknowledged, not written.
    retried = after.append(stream, "t", [Record(b"idem", partition=1)] * 4, origin=ORIGIN,
                           sequence=ProducerBatch(42, 3, 0, 4))
    assert retried == [(1, o) for o in range(expected["marks"][1][1] - 4,
                                              expected["marks"][1][1])]
    assert after.append(stream, "t", [Record(b"new", partition=0)], origin=ORIGIN) == [
        (0, expected["marks"][0][1])]
    after.close()
    assert convert_to_batches(fresh_pg_url).already


def test_an_unfinished_conversion_is_refused_until_it_is_run_again(fresh_pg_url):
    stream = uuid.uuid4()
    _fill(fresh_pg_url, stream, uuid.uuid4())
    with psycopg.connect(fresh_pg_url, autocommit=True) as conn:  # as if stopped midway
        conn.execute(batch_schema.SCHEMA)
    with pytest.raises(StoreError, match="convertstores"):
        open_store(fresh_pg_url)
    assert convert_to_batches(fresh_pg_url).messages > 0
    store = open_store(fresh_pg_url)
    assert store.DATA_TABLE == "batches"
    store.close()


def test_a_sqlite_conversion_that_fails_midway_leaves_the_row_store_as_it_was(tmp_path,
                                                                               monkeypatch):
    url = f"sqlite:///{tmp_path / 'rows.sqlite3'}"
    stream, replica = uuid.uuid4(), uuid.uuid4()
    _fill(url, stream, replica)
    before = open_store(url)
    expected = _snapshot(before, stream, replica)
    before.close()

    def second_partition_fails(done: int, total: int) -> None:
        if done == 2:
            raise OSError("disk full")

    with pytest.raises(OSError):
        convert_sqlite_to_batches(sqlite_path(url), progress=second_partition_fails)
    after = open_store(url)  # one transaction: nothing of the conversion was kept
    assert after.DATA_TABLE == "messages"
    assert _snapshot(after, stream, replica) == expected
    after.close()
