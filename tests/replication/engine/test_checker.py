"""The checker itself: each anomaly it exists for is injected with raw SQL and must be flagged."""

import sqlite3
import uuid
from contextlib import closing

import psycopg
import pytest

from replication.engine.checker import Anomaly, Report, check_kept
from replication.engine.store import Record, encode_headers
from tests.batches import rewrite_record, stored_batches


def _tamper(net, name: str, topic: str, partition: int, statement: str, *args) -> None:
    """Run a raw statement against one partition of a stream's store, behind the store's back.
    In `statement`, {pid} is the partition's id and {p} the driver's placeholder."""
    url, stream = net.url(name), net.id(name)
    if url.startswith("sqlite:///"):
        conn, mark, key = sqlite3.connect(url.removeprefix("sqlite:///")), "?", stream.bytes
    else:
        conn, mark, key = psycopg.connect(url), "%s", stream
    with closing(conn):
        pid = conn.execute(
            f"SELECT id FROM partitions WHERE stream = {mark} AND topic = {mark} "
            f"AND partition = {mark}",
            (key, topic, partition),
        ).fetchone()[0]
        conn.execute(statement.format(p=mark, pid=pid), args)
        conn.commit()


def _replicated(net, count=60, partitions=2) -> None:
    net.add("A", "B")
    net.produce("A", "t", count, partitions=partitions)
    net.pump("A", "B")


def _offsets(found: list[Anomaly]) -> set[tuple[int, int | None]]:
    return {(a.partition, a.offset) for a in found}


def _kinds(report: Report) -> set[str]:
    return {kind for kind in Report.KINDS if getattr(report, kind)}


def test_a_faithful_replica_passes(net):
    _replicated(net)
    report = net.check("A", "B")
    assert report.ok and report.checked == 60
    assert report.summary() == "checked 60 messages: ok"


def test_small_windows_see_the_same(net):
    _replicated(net, count=300, partitions=1)
    assert net.check("A", "B", window=7).ok
    _tamper(net, "B", "t", 0, 'DELETE FROM messages WHERE pid = {pid} AND "offset" = 100')
    assert _offsets(net.check("A", "B", window=7).reordered) == {(0, 101)}


def test_acknowledged_message_missing_at_the_origin_is_lost(net):
    _replicated(net, partitions=1)
    _tamper(net, "A", "t", 0, 'DELETE FROM messages WHERE pid = {pid} AND "offset" = 5')
    report = net.check("A", "B")
    assert any(a.offset == 5 and "origin" in a.detail for a in report.lost)
    # The hole shows in the origin's sequence, and the replica keeps what the origin lost.
    assert (0, 6) in _offsets(report.reordered)
    assert (0, 5) in _offsets(report.inconsistent)


def test_acknowledged_offset_past_the_end_is_lost(net):
    _replicated(net, partitions=1)
    report = net.check("A", "B", acknowledged={("t", 0): {3, 59, 60, 61}})
    assert _offsets(report.lost) == {(0, 60), (0, 61)}
    assert _kinds(report) == {"lost"}
    assert report.summary().startswith("checked 60 messages: 4 lost (e.g. t:0@60 origin")


def test_acknowledged_message_missing_at_the_replica_is_lost(net):
    _replicated(net, partitions=1)
    _tamper(net, "B", "t", 0, 'DELETE FROM messages WHERE pid = {pid} AND "offset" = 59')
    report = net.check("A", "B")
    assert [(a.offset, a.detail) for a in report.lost] == [(59, "replica: acknowledged, missing")]
    assert "reordered" in _kinds(report)  # the replica's high watermark promises offset 59


def test_replica_behind_is_unreplicated_unless_allowed(net):
    net.add("A", "B")
    net.produce("A", "t", 50, partitions=1)
    net.pump("A", "B")
    net.produce("A", "t", 20, partitions=1)
    report = net.check("A", "B")
    assert _kinds(report) == {"unreplicated", "lost"}
    assert [(a.offset, a.detail) for a in report.unreplicated] == [
        (50, "origin: 20 messages beyond the replica's end")
    ]
    assert net.check("A", "B", require_caught_up=False).ok


def test_a_replica_missing_the_whole_topic_is_unreplicated(net):
    net.add("A", "B")
    net.produce("A", "t", 10, partitions=2)
    report = net.check("A", "B", acknowledged={})
    assert _kinds(report) == {"unreplicated"} and len(report.unreplicated) == 2


@pytest.mark.parametrize(
    ("column", "value", "field"),
    [
        ("value", b"tampered", "value"),
        ("key", b"other-key", "key"),
        ("ts", 42, "timestamp_ms"),
        ("headers", encode_headers([("id", b"forged")]), "headers"),
        ("producer", "mallory", "producer"),
    ],
)
def test_a_changed_field_is_inconsistent(net, column, value, field):
    _replicated(net, partitions=1)
    update = f'UPDATE messages SET {column} = {{p}} WHERE pid = {{pid}} AND "offset" = 7'
    _tamper(net, "B", "t", 0, update, value)
    report = net.check("A", "B")
    assert report.inconsistent == [Anomaly("t", 0, 7, f"origin: replica differs in {field}")]


def test_a_changed_origin_is_inconsistent(net):
    _replicated(net, partitions=1)
    other = uuid.uuid4()
    raw = other.bytes if net.url("B").startswith("sqlite") else other
    _tamper(
        net, "B", "t", 0, 'UPDATE messages SET origin = {p} WHERE pid = {pid} AND "offset" = 3', raw
    )
    report = net.check("A", "B")
    assert report.inconsistent == [Anomaly("t", 0, 3, "origin: replica differs in origin")]


def test_messages_swapped_at_the_replica_are_inconsistent(net):
    _replicated(net, partitions=1)
    for old, new in ((4, -1), (5, 4), (-1, 5)):
        _tamper(
            net,
            "B",
            "t",
            0,
            'UPDATE messages SET "offset" = {p} WHERE pid = {pid} AND "offset" = {p}',
            new,
            old,
        )
    report = net.check("A", "B")
    assert _offsets(report.inconsistent) == {(0, 4), (0, 5)}


def test_a_hole_at_the_replica_is_reordered(net):
    _replicated(net, partitions=1)
    for offset in (0, 30):
        _tamper(
            net, "B", "t", 0, 'DELETE FROM messages WHERE pid = {pid} AND "offset" = {p}', offset
        )
    report = net.check("A", "B", acknowledged={})
    assert _offsets(report.reordered) == {(0, 1), (0, 31)}
    assert _kinds(report) == {"reordered"}


def test_a_producer_id_stored_twice_is_a_duplicate(net):
    net.add("A", "B")
    store, a = net.store("A"), net.id("A")
    store.ensure_topic(a, "t", 2)
    net.origins["t"] = a
    twice = Record(b"v", headers=(("id", b"order-17"),), partition=0)
    store.append(a, "t", [twice, Record(b"w", headers=(("id", b"x"),), partition=0), twice],
                 origin=a)
    net.pump("A", "B")
    report = net.check("A", "B")
    # Reported where the second copy is read, at the origin and at the replica alike.
    assert [a.detail for a in report.duplicates] == [
        "origin: id b'order-17' already at (0, 0)",
        "replica: id b'order-17' already at (0, 0)",
    ]
    assert net.check("A", "B", id_header=None).ok


def test_two_messages_with_one_offset_are_duplicates(fresh_pg_net):
    """Only a store that lost its primary key can hold them: drop it on a scratch database."""
    net = fresh_pg_net
    _replicated(net, partitions=1)
    _tamper(net, "A", "t", 0, "ALTER TABLE messages DROP CONSTRAINT messages_pkey")
    copy = 'INSERT INTO messages SELECT * FROM messages WHERE pid = {pid} AND "offset" = 9'
    _tamper(net, "A", "t", 0, copy)
    report = net.check("A", "B")
    assert report.duplicates == [Anomaly("t", 0, 9, "origin: two messages with this offset")]
    assert _kinds(report) == {"duplicates"}


# --- after a failback: acknowledged ids in the topic or kept aside (check_kept) ----------------

ORIGINAL = "original-offset"


def _keep(store, stream, messages) -> None:  # type: ignore[no-untyped-def]
    """Append `messages` to `t.diverged` as a failback keeps them: their partition, their
    original offset in a header."""
    store.append(stream, "t.diverged", [
        Record(m.value, key=m.key, headers=(*m.headers, (ORIGINAL, b"%d" % m.offset)),
               partition=m.partition) for m in messages], origin=stream)


def _failed_back(net) -> tuple[set[bytes], set[bytes]]:  # type: ignore[no-untyped-def]
    """A's `t` cut back at offset 10 of partition 0, what followed kept in `t.diverged`;
    every id, and the kept ones."""
    net.add("A")
    net.produce("A", "t", 40, partitions=2)
    store, a = net.store("A"), net.id("A")
    every = {dict(m.headers)["id"] for p in (0, 1) for m in store.read(a, "t", p, 0, limit=99)}
    tail = store.read(a, "t", 0, 10, limit=99)
    store.ensure_topic(a, "t.diverged", 2)
    _keep(store, a, tail)
    store.truncate(a, "t", 0, 10)
    return every, {dict(m.headers)["id"] for m in tail}


def _check_kept(net, every, kept):  # type: ignore[no-untyped-def]
    return check_kept(net.store("A"), net.id("A"), ["t"], acknowledged={"t": every},
                      kept={"t": kept}, suffix=".diverged", order_header=ORIGINAL)


def test_every_acknowledged_id_in_the_topic_or_kept_aside_passes(net):
    every, kept = _failed_back(net)
    assert len(kept) >= 5
    report = _check_kept(net, every, kept)
    assert report.ok and report.checked == 40, report.summary()


def test_a_kept_message_missing_is_lost_and_one_kept_twice_a_duplicate(net):
    every, kept = _failed_back(net)
    store, a = net.store("A"), net.id("A")
    [first] = store.read(a, "t", 0, 0, limit=1)  # before the cut: still in `t`
    _keep(store, a, [first])
    report = _check_kept(net, every | {b"never-written"}, kept)
    assert [x.detail for x in report.lost] == [
        "acknowledged id b'never-written' in neither t nor t.diverged"]
    assert len(report.duplicates) == 1 and "both in t and t.diverged" in report.duplicates[0].detail
    # Kept out of its original order (offset 0 after the tail's), and where it does not belong.
    assert len(report.reordered) == 1 and len(report.inconsistent) == 1


def test_on_batch_stores_the_checker_compares_messages_not_batches(batch_net):
    """Issue 30: a replica whose batches were split and encoded again holds the same messages
    and passes; one record changed inside a batch is flagged at its offset."""
    net = batch_net
    _replicated(net, partitions=1)
    replica = (net.url("B"), net.id("B"), "t", 0)
    assert len(stored_batches(*replica)) == 1 and net.check("A", "B").checked == 60
    net.store("B").truncate(net.id("B"), "t", 0, 25)  # the batch's first 25 encoded again
    assert net.pump("A", "B") == 35  # and the rest of it, as a batch of its own
    assert [b[:2] for b in stored_batches(*replica)] == [(0, 24), (25, 59)]
    assert net.check("A", "B").ok
    rewrite_record(net.url("B"), (net.id("B"), "t", 0, 31), lambda v: b"tampered")
    report = net.check("A", "B")
    assert [(a.offset, a.detail) for a in report.inconsistent] == [
        (31, "origin: replica differs in value")]
