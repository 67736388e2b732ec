"""The binary COPY relay between two PostgreSQL connections (replication/engine/pg/relay.py):
rows arrive whole across blocks, and an error at either end is raised as psycopg raises it,
writes nothing, and leaves both connections usable; and the piped apply built on it
(replication/engine/pg/pipe.py), with and without looking the source partition up."""

from __future__ import annotations

import contextlib
import uuid

import psycopg
import pytest

from replication.engine import Record, StoreError, open_store
from replication.engine.pg.relay import BLOCK, HEADER, TRAILER, relay
from replication.engine.store import Misordered

ROWS = 20_000
OUT = b"COPY (SELECT n, repeat('x', 200) FROM generate_series(1, %d) n) TO STDOUT (FORMAT BINARY)"
IN = "COPY relayed (n, body) FROM STDIN (FORMAT BINARY)"


@pytest.fixture
def ends(pg_url: str, pg_url_b: str):
    with psycopg.connect(pg_url, autocommit=True) as src, \
            psycopg.connect(pg_url_b, autocommit=True) as dst:
        dst.execute("DROP TABLE IF EXISTS relayed")
        dst.execute("CREATE TABLE relayed (n int PRIMARY KEY, body text NOT NULL)")
        yield src, dst
    with psycopg.connect(pg_url_b, autocommit=True) as dst:
        dst.execute("DROP TABLE relayed")


def usable(src: psycopg.Connection, dst: psycopg.Connection) -> bool:
    return src.execute("SELECT 1").fetchone() == dst.execute("SELECT 1").fetchone() == (1,)


def test_relays_every_row_across_blocks_and_counts_them(ends):
    src, dst = ends
    with dst.cursor() as cur:
        relayed = relay(src, OUT % ROWS, cur, IN)
    # Per row: field count, two lengths, the int and the text.
    assert relayed == (ROWS, HEADER + ROWS * (2 + 4 + 4 + 4 + 200) + TRAILER, ROWS * 4)
    count, total, size = dst.execute(
        "SELECT count(*), sum(n), sum(length(body)) FROM relayed").fetchone()
    assert (count, total) == (ROWS, ROWS * (ROWS + 1) // 2)
    assert size == ROWS * 200 > 2 * BLOCK  # more than one block went through
    assert usable(src, dst)


def test_an_error_at_the_source_mid_stream_is_raised_and_nothing_is_written(ends):
    src, dst = ends
    failing = (b"COPY (SELECT n, repeat('x', 200 + 1 / (n - 15000)) "
               b"FROM generate_series(1, 20000) n) TO STDOUT (FORMAT BINARY)")
    with pytest.raises(psycopg.errors.DivisionByZero), dst.cursor() as cur:
        relay(src, failing, cur, IN)
    assert dst.execute("SELECT count(*) FROM relayed").fetchone() == (0,)
    assert usable(src, dst)


def test_an_error_at_the_destination_cancels_the_source_and_writes_nothing(ends):
    src, dst = ends
    dst.execute("INSERT INTO relayed VALUES (12000, 'already here')")
    with pytest.raises(psycopg.errors.UniqueViolation), dst.cursor() as cur:
        relay(src, OUT % ROWS, cur, IN)
    assert dst.execute("SELECT count(*) FROM relayed").fetchone() == (1,)
    assert src.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert usable(src, dst)


def test_a_lost_destination_cancels_the_copy_at_the_source(ends, pg_url_b: str):
    src, dst = ends
    with psycopg.connect(pg_url_b, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (dst.info.backend_pid,))
    with pytest.raises(psycopg.OperationalError), dst.cursor() as cur:
        relay(src, OUT % 1_000_000, cur, IN)
    assert src.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert src.execute("SELECT 1").fetchone() == (1,)


def test_a_query_that_is_not_a_copy_out_is_refused(ends):
    src, dst = ends
    with pytest.raises(psycopg.ProgrammingError, match="not a COPY"), dst.cursor() as cur:
        relay(src, b"SELECT 1", cur, IN)
    with pytest.raises(psycopg.errors.UndefinedTable), dst.cursor() as cur:
        relay(src, b"COPY nowhere TO STDOUT (FORMAT BINARY)", cur, IN)
    assert usable(src, dst)


def test_no_rows_relay_header_and_trailer_alone(ends):
    src, dst = ends
    with dst.cursor() as cur:
        assert relay(src, OUT % 0, cur, IN) == (0, HEADER + TRAILER, 0)


def test_piped_rows_count_their_logical_bytes_as_appends_do(pg_url: str, pg_url_b: str):
    """The pipe's bytes come from the stream's length less its fixed parts and producers
    (schema.piped_bytes): keys, headers and producers present or not, multi-byte producers."""
    src, dst = open_store(pg_url), open_store(pg_url_b)
    stream, replica = uuid.uuid4(), uuid.uuid4()
    try:
        src.ensure_topic(stream, "t", 1)
        src.append(stream, "t", [Record(b"v" * 10, key=b"k"), Record(b"w" * 300)],
                   origin=stream)
        src.append(stream, "t", [Record(b"x" * 5, headers=(("h", b"1"), ("i", b""))),
                                 Record(b"", key=b"")], origin=stream, producer="capteur-é7")
        applied = dst.apply_from(src, stream, replica, "t", 0, 0, 4, link="l")
        (origin,), (copied,) = src.partition_stats(stream, "t"), dst.partition_stats(replica, "t")
        assert applied.count == copied.messages == origin.messages == 4
        assert applied.bytes == copied.bytes == origin.bytes > 315
    finally:
        src.close()
        dst.close()


def test_source_rows_removed_during_a_pipe_write_nothing_and_say_so(pg_url: str, pg_url_b: str):
    """Retention removing rows of a range being piped (here: deleted under a stale low
    watermark) leaves the replica as it was: the gateways' apply gives up after its retries,
    a Spark copy's chunk tells the job to run again."""
    from workers.spark import pg

    src, dst = open_store(pg_url), open_store(pg_url_b)
    stream, replica = uuid.uuid4(), uuid.uuid4()
    try:
        src.ensure_topic(stream, "t", 1)
        dst.ensure_topic(replica, "t", 1)
        src.append(stream, "t", [Record(b"v%d" % i) for i in range(100)], origin=stream)
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("DELETE FROM messages WHERE pid = (SELECT id FROM partitions "
                         "WHERE stream = %s) AND \"offset\" BETWEEN 40 AND 49", (stream,))
        with pytest.raises(StoreError, match="retention kept overtaking"):
            dst.apply_from(src, stream, replica, "t", 0, 0, 100, link="l")
        with pg.connect(pg_url) as s, pg.connect(pg_url_b) as d:
            pids = (pg.partition_id(s, str(stream), "t", 0),
                    pg.partition_id(d, str(replica), "t", 0))
            with pytest.raises(StoreError, match="retention removed messages"):
                pg.copy_chunk(s, d, pids, 0, 100, key=("t", 0), origin_low=0)
        assert dst.watermarks(replica, "t") == {0: (0, 0)}
        assert dst.partition_stats(replica, "t")[0].messages == 0
    finally:
        src.close()
        dst.close()


def test_a_piped_apply_finds_a_replica_topic_made_again_since_it_cached_the_id(
        pg_url: str, pg_url_b: str):
    """A gateway caches its replica partitions' ids; another process deletes the topic and
    makes it again (new ids): the next piped batch finds the new partition and starts it at
    the source's low watermark, and a refused batch leaves no transaction open."""
    src, dst, other = open_store(pg_url), open_store(pg_url_b), open_store(pg_url_b)
    stream, replica = uuid.uuid4(), uuid.uuid4()
    try:
        src.ensure_topic(stream, "t", 1)
        src.append(stream, "t", [Record(b"v%d" % i) for i in range(10)], origin=stream)
        assert dst.apply_from(src, stream, replica, "t", 0, 0, 5, link="l").count == 5
        other.drop_topic(replica, "t")
        other.ensure_topic(replica, "t", 1)
        assert dst.apply_from(src, stream, replica, "t", 0, 0, 10, link="l").count == 10
        assert other.watermarks(replica, "t") == {0: (0, 10)}
        src.append(stream, "t", [Record(b"w%d" % i) for i in range(10)], origin=stream)
        with pytest.raises(Misordered):  # [15, 20) past the replica's end, 10: a gap
            dst.apply_from(src, stream, replica, "t", 0, 15, 20, link="l")
        assert dst.apply_from(src, stream, replica, "t", 0, 10, 20, link="l").count == 10
        assert [m.value for m in other.read(replica, "t", 0, 8, limit=4)] == [
            b"v8", b"v9", b"w0", b"w1"]
    finally:
        for store in (src, dst, other):
            store.close()



@pytest.fixture
def piped(pg_url: str, pg_url_b: str):
    """A source store whose statements give up after 1 s waiting for a lock, with a topic of
    100 messages, and a replica store that applied [0, 10) of it: from then on the replica
    knows the source partition's id."""
    src = open_store(pg_url + ("&" if "?" in pg_url else "?") + "options=-c%20lock_timeout%3D1000")
    dst = open_store(pg_url_b)
    stream, replica = uuid.uuid4(), uuid.uuid4()
    src.ensure_topic(stream, "t", 1)
    src.append(stream, "t", [Record(b"v%d" % i) for i in range(100)], origin=stream)
    assert dst.apply_from(src, stream, replica, "t", 0, 0, 10, link="l").count == 10
    yield src, dst, stream, replica
    src.close()
    dst.close()


@contextlib.contextmanager
def partitions_locked(url: str):
    """The store's partitions table held in ACCESS EXCLUSIVE mode by another session. The
    source partition's look-up (SOURCE_RANGE) is the only statement of a piped batch that
    reads it at the source; on `piped`'s source it then fails on the lock timeout
    (LockNotAvailable), while the pipe itself reads only messages."""
    with psycopg.connect(url) as locker:
        locker.execute("LOCK TABLE partitions IN ACCESS EXCLUSIVE MODE")
        yield
        locker.rollback()


def values(store, stream: uuid.UUID, start: int = 0) -> list[bytes]:
    return [m.value for m in store.read(stream, "t", 0, start, limit=1000)]


def test_a_piped_batch_after_the_first_does_not_look_the_source_partition_up(pg_url, piped):
    """The batch goes through with the source's partitions table locked (partitions_locked):
    no look-up ran."""
    src, dst, stream, replica = piped
    with partitions_locked(pg_url):
        assert dst.apply_from(src, stream, replica, "t", 0, 10, 30, link="l").count == 20
    assert dst.watermarks(replica, "t") == {0: (0, 30)}
    assert values(dst, replica) == [b"v%d" % i for i in range(30)]


def test_retention_past_a_known_range_trims_or_refuses_it_as_after_a_look_up(piped):
    """Retention moving the source's low watermark past a batch's start: the rows after the
    replica's end are written once each, or, past the replica's end, the batch is refused
    (a gap) and nothing is written."""
    src, dst, stream, replica = piped
    assert dst.apply_from(src, stream, replica, "t", 0, 10, 20, link="l").count == 10
    src.trim(stream, "t", 0, 15)
    assert dst.apply_from(src, stream, replica, "t", 0, 10, 30, link="l").count == 10
    src.trim(stream, "t", 0, 50)
    with pytest.raises(Misordered) as refused:  # 30..49 gone
        dst.apply_from(src, stream, replica, "t", 0, 30, 60, link="l")
    assert (refused.value.expected, refused.value.got) == (30, 50)
    assert dst.watermarks(replica, "t") == {0: (0, 30)}
    assert dst.partition_stats(replica, "t")[0].messages == 30
    assert values(dst, replica) == [b"v%d" % i for i in range(30)]


def test_a_source_topic_made_again_is_looked_up_and_its_rows_copied(pg_url, piped):
    """The source topic deleted and made again (a new partition id, the old id's rows gone
    with it): the next batch finds the new partition and copies its rows, and the batch after
    it pipes without a look-up again."""
    src, dst, stream, replica = piped
    src.drop_topic(stream, "t")
    src.ensure_topic(stream, "t", 1)
    src.append(stream, "t", [Record(b"n%d" % i) for i in range(40)], origin=stream)
    assert dst.apply_from(src, stream, replica, "t", 0, 10, 30, link="l").count == 20
    with partitions_locked(pg_url):
        assert dst.apply_from(src, stream, replica, "t", 0, 30, 40, link="l").count == 10
    assert values(dst, replica) == [b"v%d" % i for i in range(10)] + [
        b"n%d" % i for i in range(10, 40)]


def test_a_fresh_replica_of_a_known_partition_begins_at_the_source_low_watermark(piped):
    """A replica partition that never held a message (its topic made again) and a source
    whose low watermark is 30: a batch from 30 is applied and starts the replica there, one
    from 35 is refused (the replica would miss 30..34), whatever the replica knew before."""
    src, dst, stream, replica = piped
    src.trim(stream, "t", 0, 30)
    dst.drop_topic(replica, "t")
    dst.ensure_topic(replica, "t", 1)
    with pytest.raises(Misordered):
        dst.apply_from(src, stream, replica, "t", 0, 35, 40, link="l")
    assert dst.watermarks(replica, "t") == {0: (0, 0)}
    assert dst.apply_from(src, stream, replica, "t", 0, 30, 40, link="l").count == 10
    assert dst.watermarks(replica, "t") == {0: (30, 40)}
    assert values(dst, replica, 30) == [b"v%d" % i for i in range(30, 40)]


def test_a_redelivered_batch_without_a_look_up_writes_nothing_again(pg_url, piped):
    """A batch the replica already holds (all of it, or a prefix) is trimmed, its partition
    not looked up (partitions_locked): nothing written twice, the replica's end unchanged."""
    src, dst, stream, replica = piped
    assert dst.apply_from(src, stream, replica, "t", 0, 10, 20, link="l").count == 10
    with partitions_locked(pg_url):
        redelivered = dst.apply_from(src, stream, replica, "t", 0, 5, 15, link="l")
        assert (redelivered.count, redelivered.ends) == (0, {("t", 0): 20})
        assert dst.watermarks(replica, "t") == {0: (0, 20)}
        assert dst.apply_from(src, stream, replica, "t", 0, 15, 25, link="l").count == 5
    assert dst.partition_stats(replica, "t")[0].messages == 25
    assert values(dst, replica) == [b"v%d" % i for i in range(25)]
