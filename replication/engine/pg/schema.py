"""The PostgreSQL store's schema and statements, and the database's creation.

Messages are keyed by a partition id (an int naming the partitions row) and the offset rather
than by (stream, topic, partition, offset): the primary key index is half the size and binary
COPY into it measured faster (docs/benchmarks-history.md).
"""

from __future__ import annotations

import contextlib

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.types.string import BytesBinaryDumper

from replication.engine.pg.relay import HEADER, TRAILER, Relayed

COMMON_SCHEMA = """
CREATE TABLE IF NOT EXISTS partitions (
    id integer GENERATED ALWAYS AS IDENTITY UNIQUE,
    stream uuid NOT NULL,
    topic text NOT NULL,
    partition integer NOT NULL,
    next_offset bigint NOT NULL DEFAULT 0,
    low_offset bigint NOT NULL DEFAULT 0,
    rows bigint NOT NULL DEFAULT 0,
    bytes bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (stream, topic, partition)
);
CREATE TABLE IF NOT EXISTS replication_cursors (
    pid integer NOT NULL,
    link text NOT NULL,
    next_offset bigint NOT NULL,
    PRIMARY KEY (pid, link)
);
CREATE TABLE IF NOT EXISTS ended_links (
    link text PRIMARY KEY
);
CREATE TABLE IF NOT EXISTS consumer_cursors (
    pid integer NOT NULL,
    grp text NOT NULL,
    "offset" bigint NOT NULL,
    metadata bytea,
    leader_epoch integer NOT NULL DEFAULT -1,
    PRIMARY KEY (pid, grp)
);
-- Idempotent producers (Kafka's producer id, epoch, sequence): per partition and producer the
-- last few batches' sequence ranges and first offsets, written in the append's transaction.
CREATE TABLE IF NOT EXISTS producer_sequences (
    pid integer NOT NULL,
    producer_id bigint NOT NULL,
    epoch integer NOT NULL,
    firsts integer[] NOT NULL,
    lasts integer[] NOT NULL,
    offsets bigint[] NOT NULL,
    PRIMARY KEY (pid, producer_id)
);
"""
# No foreign key to partitions: a per-row check would cost COPY throughput, and rows of a
# partition are only deleted with it (drop_stream).
SCHEMA = COMMON_SCHEMA + """
CREATE TABLE IF NOT EXISTS messages (
    pid integer NOT NULL,
    "offset" bigint NOT NULL,
    ts bigint NOT NULL,
    key bytea,
    value bytea,  -- NULL: Kafka's null value (a tombstone), kept apart from an empty one
    headers bytea,
    origin uuid NOT NULL,
    producer text,
    PRIMARY KEY (pid, "offset")
);
"""
SEQ_GET = (
    "SELECT epoch, firsts, lasts, offsets FROM producer_sequences "
    "WHERE pid = %s AND producer_id = %s"
)
SEQ_ALL = (
    "SELECT producer_id, epoch, firsts, lasts, offsets FROM producer_sequences WHERE pid = %s"
)
SEQ_PUT = """
INSERT INTO producer_sequences (pid, producer_id, epoch, firsts, lasts, offsets)
VALUES (%s, %s, %s, %s, %s, %s)
ON CONFLICT (pid, producer_id) DO UPDATE SET epoch = excluded.epoch, firsts = excluded.firsts,
    lasts = excluded.lasts, offsets = excluded.offsets
"""
# Stores made before commits kept their metadata gain the column on open (ALTER only when it
# is missing: even a no-op ALTER TABLE waits for every reader of the table).
# The same for the leader epoch (kept since 0081's commits of epochs other than 0).
CURSOR_COLUMNS = """
SELECT column_name FROM information_schema.columns
    WHERE table_schema = current_schema() AND table_name = 'consumer_cursors'
"""
CURSOR_ADDED = {
    "metadata": "ALTER TABLE consumer_cursors ADD COLUMN IF NOT EXISTS metadata bytea",
    "leader_epoch": "ALTER TABLE consumer_cursors ADD COLUMN IF NOT EXISTS leader_epoch integer "
                    "NOT NULL DEFAULT -1",
}
# A store made before null values were kept has `value bytea NOT NULL`: dropped on open, once
# (the catalog looks first: ALTER TABLE takes an exclusive lock even when there is nothing to
# drop, and every store open would queue behind the appends in flight).
VALUE_NOT_NULL = """
SELECT a.attnotnull FROM pg_attribute a
WHERE a.attrelid = 'messages'::regclass AND a.attname = 'value'
"""
VALUE_DROP_NOT_NULL = "ALTER TABLE messages ALTER COLUMN value DROP NOT NULL"
# A row's logical bytes (key, value, headers; NULLs count 0), as `record_size` counts them.
SIZE = ("coalesce(octet_length(value), 0) + coalesce(octet_length(key), 0) "
        "+ coalesce(octet_length(headers), 0)")
SCHEMA_LOCK = 0x5367_5374  # advisory lock: stores opening at once create the schema once

COPY_IN = (
    'COPY messages (pid, "offset", ts, key, value, headers, origin, producer) '
    "FROM STDIN (FORMAT BINARY)"
)
# origin goes in as its 16 raw bytes: binary bytea and binary uuid are the same bytes on the
# wire, and psycopg's UUID dumper is Python code called per row.
COPY_TYPES = ["int4", "int8", "int8", "bytea", "bytea", "bytea", "bytea", "text"]

# Every transaction that locks partitions rows locks them in id order, so appenders and
# appliers touching several partitions cannot deadlock.
LOCK = (
    "SELECT id, low_offset, next_offset FROM partitions WHERE id = ANY(%s) ORDER BY id FOR UPDATE"
)
# A fresh replica of an origin whose oldest messages expired begins where the origin does.
START = """
UPDATE partitions p SET low_offset = d.off, next_offset = d.off
FROM unnest(%s::int4[], %s::int8[]) AS d(id, off) WHERE p.id = d.id
"""
# Status only (see MessageStore.replication_cursor): never moves back.
LINK_CURSORS = """
INSERT INTO replication_cursors (pid, link, next_offset)
SELECT id, %s, nxt FROM unnest(%s::int4[], %s::int8[]) u(id, nxt)
ON CONFLICT (pid, link) DO UPDATE
SET next_offset = greatest(replication_cursors.next_offset, excluded.next_offset)
"""
# Replicated consumer cursors: clamped to what the replica holds (a cursor past its end would
# skip messages after a failover), never moved back, the metadata going with the offset kept;
# in (pid, grp) order, so two merges cannot deadlock. Returns each merged cursor as stored.
MERGE_CURSORS = """
WITH merged AS (
    INSERT INTO consumer_cursors (pid, grp, "offset", metadata, leader_epoch)
    SELECT p.id, c.grp, least(c.off, p.next_offset), c.meta, c.epoch
    FROM unnest(%s::text[], %s::text[], %s::int4[], %s::int8[], %s::bytea[], %s::int4[])
        AS c(grp, topic, part, off, meta, epoch)
    JOIN partitions p ON p.stream = %s AND p.topic = c.topic AND p.partition = c.part
    ORDER BY p.id, c.grp
    ON CONFLICT (pid, grp) DO UPDATE
    SET "offset" = greatest(consumer_cursors."offset", excluded."offset"),
        metadata = CASE WHEN excluded."offset" >= consumer_cursors."offset"
            THEN excluded.metadata ELSE consumer_cursors.metadata END,
        leader_epoch = CASE WHEN excluded."offset" >= consumer_cursors."offset"
            THEN excluded.leader_epoch ELSE consumer_cursors.leader_epoch END
    RETURNING pid, grp, "offset"
)
SELECT m.grp, p.topic, p.partition, m."offset" FROM merged m JOIN partitions p ON p.id = m.pid
"""
# Offsets are reserved by UPDATE ... RETURNING inside the batch's transaction: the row lock
# serialises appenders per partition, and a rollback gives the offsets back (no gap). Each row
# also reports how many partitions the topic has, so a writer holding a stale list of them
# starts again.
RESERVE = """
UPDATE partitions SET next_offset = next_offset + %(n)s, rows = rows + %(n)s, bytes = bytes + %(b)s
WHERE id = %(id)s AND stream = %(s)s AND topic = %(t)s
RETURNING id, next_offset - %(n)s,
    (SELECT count(*) FROM partitions WHERE stream = %(s)s AND topic = %(t)s)
"""
ADVANCE = """
UPDATE partitions p SET next_offset = greatest(p.next_offset, d.nxt),
    rows = p.rows + d.n, bytes = p.bytes + d.b
FROM unnest(%s::int4[], %s::int8[], %s::int8[], %s::int8[]) AS d(id, nxt, n, b)
WHERE p.id = d.id
"""
# A query rather than COPY TO: with binary results it measured faster (docs/benchmarks-history.md).
# Offsets are contiguous in [low, high) (retention removes a prefix, apply refuses gaps), so
# [offset, offset + limit) bounds the rows exactly: with only a lower bound and a LIMIT, the
# planner (on fresh, unanalysed rows) bitmap-scanned every later row and sorted them all.
# A read stops at max_bytes in the store (%s last), not after fetching every row of the
# range: rows past the budget keep their values unread (octet_length reads no TOAST). The
# first row is always kept (its sum is its size); storebase cuts to the exact budget.
READ = """
SELECT "offset", ts, key, value, headers, uuid_send(origin), producer, size FROM (
    SELECT "offset", ts, key, value, headers, origin, producer, size,
        sum(size) OVER (ORDER BY "offset") AS upto
    FROM (SELECT *, """ + SIZE + """ AS size
        FROM messages WHERE pid = %s AND "offset" >= %s AND "offset" < %s) ranged
) summed WHERE upto <= %s OR upto = size ORDER BY "offset"
"""
# The pipe apply (PostgresStore.apply_from): the source partition's id, low and next offset,
# and the origin of the first message a batch from %s would carry.
SOURCE_RANGE = """
SELECT p.id, p.low_offset, p.next_offset, (SELECT uuid_send(m.origin) FROM messages m
    WHERE m.pid = p.id AND m."offset" = greatest(%s, p.low_offset))
FROM partitions p WHERE p.stream = %s AND p.topic = %s AND p.partition = %s
"""
# Rows of a source partition as the replica's COPY FROM takes them: the replica's partition id
# in place of the source's, every other column as stored (invariant 1). The producer comes
# first, so the relay measures it (relay.py): with it, the stream's length gives the rows'
# logical bytes (piped_bytes) without a second pass over them, which cost ~15 % of a copy.
PIPE_ROWS = """SELECT producer, {rpid}::int4, "offset", ts, key, value, headers, origin
    FROM messages WHERE pid = {pid} AND "offset" >= {start} AND "offset" < {end}
    ORDER BY "offset" """
PIPE_OUT = "COPY (" + PIPE_ROWS + ") TO STDOUT (FORMAT BINARY)"
PIPE_IN = ('COPY messages (producer, pid, "offset", ts, key, value, headers, origin) '
           "FROM STDIN (FORMAT BINARY)")
# A piped row's bytes beyond its logical ones (key, value, headers) and its producer: the
# field count (2), eight lengths (4 each), pid (4), offset and ts (8 each), origin (16).
PIPED_ROW = 2 + 8 * 4 + 4 + 8 + 8 + 16
# The same within one database (intracluster replication): no rows leave the server.
PIPE_LOCAL = """
WITH i AS (
    INSERT INTO messages (pid, "offset", ts, key, value, headers, origin, producer)
    SELECT %(rpid)s, "offset", ts, key, value, headers, origin, producer FROM messages
    WHERE pid = %(pid)s AND "offset" >= %(start)s AND "offset" < %(end)s ORDER BY "offset"
    RETURNING """ + SIZE + """ AS size)
SELECT count(*), coalesce(sum(size), 0) FROM i
"""
ADVANCE_PIPED = """
UPDATE partitions SET next_offset = greatest(next_offset, %(end)s), rows = rows + %(n)s,
    bytes = bytes + %(b)s
WHERE id = %(pid)s
"""
# The same with the link's cursor (LINK_CURSORS), in one statement: one round trip a batch.
ADVANCE_PIPED_LINK = """
WITH advanced AS (""" + ADVANCE_PIPED + """)
INSERT INTO replication_cursors (pid, link, next_offset) VALUES (%(pid)s, %(link)s, %(end)s)
ON CONFLICT (pid, link) DO UPDATE
SET next_offset = greatest(replication_cursors.next_offset, excluded.next_offset)
"""


def piped_bytes(relayed: Relayed) -> int:
    """The logical bytes of rows relayed from PIPE_OUT."""
    return relayed.stream - HEADER - TRAILER - relayed.rows * PIPED_ROW - relayed.first


EXPIRE_DELETE = """
WITH d AS (DELETE FROM messages WHERE pid = %s AND "offset" >= %s AND "offset" < %s
    RETURNING """ + SIZE + """ AS size)
SELECT count(*), coalesce(sum(size), 0) FROM d
"""
def configure_connection(conn: psycopg.Connection) -> None:
    """COPY picks dumpers by type oid, and for bytea that finds the DB-API `Binary` dumper,
    written in Python; registering bytes' own dumper by oid brings back the C one."""
    conn.adapters.register_dumper(None, BytesBinaryDumper)


def create_pg_database(url: str) -> None:
    params = conninfo_to_dict(url)
    name = params.get("dbname") or "postgres"
    admin = make_conninfo(url, dbname="postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            return
        # Another process may create it meanwhile: that is what we wanted. Two concurrent
        # CREATE DATABASE race on pg_database's unique index, which PostgreSQL reports as a
        # UniqueViolation rather than DuplicateDatabase.
        with contextlib.suppress(psycopg.errors.DuplicateDatabase, psycopg.errors.UniqueViolation):
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
