"""Null values (Kafka's tombstones) and null header values, kept apart from empty ones by both
stores, by replication, and in every count of bytes (a null counts 0); stores made before
nulls were kept are upgraded when opened."""

import sqlite3
import uuid

import psycopg
import pytest

from replication.engine import Message, Record, open_store
from replication.engine.checker import check_replica
from replication.engine.pg.schema import SCHEMA as PG_SCHEMA
from replication.engine.sqlitestore import SCHEMA as SQLITE_SCHEMA
from replication.engine.store import decode_headers, encode_headers, headers_size, record_size
from tests.replication.engine.conftest import _open_net, sqlite_rows
from tests.replication.engine.test_store import rows_only

ORIGIN = uuid.UUID("6a4e1c1e-2b7f-4c55-9a8e-1d2c3b4a5f60")
NULLS = [None, b"", b"v", None]  # values as produced, in order


def _values(store, stream, topic="t", partition=0):
    return [m.value for m in store.read(stream, topic, partition, 0)]


def test_header_codec_keeps_a_null_value_apart_from_an_empty_one():
    headers = (("null", None), ("empty", b""), ("x", b"1"))
    blob = encode_headers(headers)
    assert decode_headers(blob) == headers
    assert headers_size(headers) == len(blob)
    assert record_size(Record(None, headers=headers)) == len(blob)


@pytest.mark.parametrize("named", [False, True], ids=["sticky", "named partition"])
def test_a_null_value_reads_back_null_and_an_empty_one_empty(store, stream, named):
    store.ensure_topic(stream, "t", 1)
    partition = 0 if named else None
    records = [Record(v, partition=partition) for v in NULLS]  # the batch layouts without keys
    store.append(stream, "t", records, origin=ORIGIN)
    assert _values(store, stream) == NULLS


def test_nulls_with_keys_and_headers_read_back_as_produced(store, stream):
    store.ensure_topic(stream, "t", 1)
    records = [
        Record(None, key=b"k", headers=(("gone", None), ("empty", b"")), timestamp_ms=7),
        Record(b"", key=b"", headers=(("null", None),), timestamp_ms=8),
        Record(None, key=None, timestamp_ms=9),
    ]
    store.append(stream, "t", records, origin=ORIGIN)
    got = store.read(stream, "t", 0, 0)
    assert [(m.key, m.value, m.headers) for m in got] == [
        (r.key, r.value, r.headers) for r in records]


@rows_only
def test_a_null_value_counts_zero_bytes_everywhere(store, stream):
    store.ensure_topic(stream, "t", 1)
    store.append(stream, "t", [Record(None), Record(None, key=b"kk"), Record(b"abc")],
                 origin=ORIGIN)
    assert [row[7] for row in store.read_rows(stream, "t", 0, 0)] == [0, 2, 3]
    assert store.sizes(stream)["logicalsize"] == 5
    assert store.partition_stats(stream, "t")[0].bytes == 5
    # The byte counters fall by what is deleted: a trimmed null takes 0 bytes off, a
    # truncation the rest.
    assert store.trim(stream, "t", 0, 1) == 1
    assert store.partition_stats(stream, "t")[0].bytes == 5
    assert store.truncate(stream, "t", 0, 1) == 2
    assert store.partition_stats(stream, "t")[0].bytes == 0


@rows_only
def test_expiry_counts_a_null_value_as_zero_bytes(store, stream):
    store.ensure_topic(stream, "t", 1)
    store.append(stream, "t", [Record(None, timestamp_ms=1), Record(b"young")], origin=ORIGIN)
    assert store.expire(stream, before_ms=2) == 1
    assert store.partition_stats(stream, "t")[0].bytes == 5


@rows_only
def test_apply_keeps_a_null_value_and_counts_it_as_zero_bytes(store, stream):
    replica = uuid.uuid4()
    messages = [Message("t", 0, off, 1000 + off, None, value, (("h", None),), ORIGIN, None)
                for off, value in enumerate(NULLS)]
    applied = store.apply(replica, messages, link="sf->ny")
    assert applied.bytes == 1 + 4 * headers_size((("h", None),))
    assert store.read(replica, "t", 0, 0) == messages
    assert store.partition_stats(replica, "t")[0].bytes == applied.bytes


@pytest.fixture
def mixed_net(pg_url, tmp_path):
    """A PostgreSQL cluster and a SQLite one: rows cross as messages, not piped."""
    yield from _open_net([pg_url, sqlite_rows(tmp_path / "mixed.sqlite3")])


def _replicate_nulls(net) -> None:
    """Through the engine's plan and apply, as gateways run them, sf -> ny and sf -> la (la
    shares sf's store when there are two stores: a copy within one database)."""
    net.add("sf", "ny", "la")
    stream = net.id("sf")
    net.store("sf").ensure_topic(stream, "t", 1)
    records = [Record(v, headers=(("n", None),) if v is None else ()) for v in NULLS]
    for partition, offset in net.store("sf").append(stream, "t", records, origin=stream):
        net.acked.setdefault("t", {}).setdefault(("t", partition), set()).add(offset)
    net.origins["t"] = stream
    assert net.pump("sf", "ny") == 4 and net.pump("sf", "la") == 4
    for name in ("ny", "la"):
        assert _values(net.store(name), net.id(name)) == NULLS
        assert net.store(name).partition_stats(net.id(name), "t") == net.store(
            "sf").partition_stats(stream, "t")
        net.assert_replica("sf", name)


def test_replication_keeps_null_values_apart_from_empty_ones(net):
    """PostgreSQL to PostgreSQL pipes rows by binary COPY (across databases, and within one);
    SQLite applies them as messages."""
    _replicate_nulls(net)


def test_replication_between_kinds_of_store_keeps_null_values(mixed_net):
    """PostgreSQL to SQLite as messages, and within the PostgreSQL store."""
    _replicate_nulls(mixed_net)


def test_the_checker_tells_a_null_value_from_an_empty_one(store, stream):
    store.ensure_topic(stream, "t", 1)
    store.append(stream, "t", [Record(None, timestamp_ms=5)], origin=ORIGIN)
    (origin,) = store.read(stream, "t", 0, 0)
    replica = uuid.uuid4()
    emptied = Message("t", 0, 0, 5, None, b"", (), origin.origin, origin.producer)
    store.apply(replica, [emptied], link="sf->ny")
    report = check_replica(store, stream, store, replica, ["t"])
    assert [a.detail for a in report.inconsistent] == ["origin: replica differs in value"]


# --- stores made before null values were kept --------------------------------------------------

OLD_MESSAGE = (1, 0, 1000, None, b"old", None, ORIGIN, None)  # pid, offset, ts, ..., producer


def _old_pg_store(url: str) -> None:
    """The schema as stores were made before: `value bytea NOT NULL`, one message in it."""
    old = PG_SCHEMA.replace("value bytea,", "value bytea NOT NULL,", 1)
    assert old != PG_SCHEMA
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(old)
        conn.execute("INSERT INTO partitions (stream, topic, partition, next_offset, rows, bytes)"
                     " VALUES (%s, 't', 0, 1, 1, 3)", (ORIGIN,))
        conn.execute("INSERT INTO messages VALUES (%s, %s, %s, %s, %s, %s, %s, %s)", OLD_MESSAGE)
        with pytest.raises(psycopg.errors.NotNullViolation):
            conn.execute("INSERT INTO messages (pid, \"offset\", ts, value, origin) "
                         "VALUES (1, 1, 1, NULL, %s)", (ORIGIN,))


def _old_sqlite_store(path) -> None:
    old = SQLITE_SCHEMA.replace("value BLOB,", "value BLOB NOT NULL,", 1)
    assert old != SQLITE_SCHEMA
    with sqlite3.connect(path) as conn:
        conn.executescript(old)
        conn.execute("INSERT INTO partitions (stream, topic, partition, next_offset, rows, bytes)"
                     " VALUES (?, 't', 0, 1, 1, 3)", (ORIGIN.bytes,))
        row = (*OLD_MESSAGE[:6], ORIGIN.bytes, None)
        conn.execute("INSERT INTO messages VALUES (?, ?, ?, ?, ?, ?, ?, ?)", row)
    conn.close()


@pytest.mark.parametrize("kind", ["postgres", "sqlite"])
def test_a_store_made_before_nulls_is_upgraded_when_opened(kind, request, tmp_path):
    if kind == "postgres":
        url = request.getfixturevalue("fresh_pg_url")
        _old_pg_store(url)
    else:
        path = tmp_path / "old.sqlite3"
        _old_sqlite_store(path)
        url = f"sqlite:///{path}"
    for _ in range(2):  # the second open finds nothing to upgrade
        store = open_store(url)
        try:
            store.append(ORIGIN, "t", [Record(None), Record(b"")], origin=ORIGIN)
            assert _values(store, ORIGIN)[0] == b"old"  # what the old store held, kept
        finally:
            store.close()
    store = open_store(url)
    try:
        assert _values(store, ORIGIN) == [b"old", None, b"", None, b""]
        assert store.partition_stats(ORIGIN, "t")[0].bytes == 3
    finally:
        store.close()
