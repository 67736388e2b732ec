"""The batch store's table and statements (issue 30): a row per record batch, keyed by its
partition id and last offset, so a fetch from any offset is one range scan of the primary key
(the first batch whose last offset reaches the fetch offset holds it)."""

from __future__ import annotations

from replication.engine.pg.schema import COMMON_SCHEMA

# The batch's bytes are stored EXTERNAL: out of line when large, never compressed again (the
# producer compressed them already, or chose not to).
SCHEMA = COMMON_SCHEMA + """
CREATE TABLE IF NOT EXISTS batches (
    pid integer NOT NULL,
    last_offset bigint NOT NULL,
    base_offset bigint NOT NULL,
    records integer NOT NULL,
    first_ts bigint NOT NULL,
    max_ts bigint NOT NULL,
    producer_id bigint NOT NULL,
    epoch smallint NOT NULL,
    base_sequence integer NOT NULL,
    attributes smallint NOT NULL,
    crc bigint NOT NULL,
    origin uuid NOT NULL,
    producer text,
    size bigint NOT NULL,
    data bytea NOT NULL,
    PRIMARY KEY (pid, last_offset)
);
"""
STORAGE_UNSET = """
SELECT attstorage <> 'e' FROM pg_attribute
WHERE attrelid = 'batches'::regclass AND attname = 'data'
"""
STORAGE_SET = "ALTER TABLE batches ALTER COLUMN data SET STORAGE EXTERNAL"

COLUMNS = ("base_offset, last_offset, records, first_ts, max_ts, producer_id, epoch, "
           "base_sequence, attributes, crc, origin, producer, size, data")
COPY_IN = f"COPY batches (pid, {COLUMNS}) FROM STDIN (FORMAT BINARY)"
COPY_TYPES = ["int4", "int8", "int8", "int4", "int8", "int8", "int8", "int2", "int4", "int2",
              "int8", "bytea", "text", "int8", "bytea"]
# A source partition's batches of [start, end) as a replica stores them (origin as 16 bytes).
SOURCE_BATCHES = f"""
SELECT {COLUMNS.replace("origin", "uuid_send(origin)")} FROM batches
WHERE pid = %s AND last_offset >= %s AND base_offset < %s ORDER BY last_offset
"""
# Batches from `offset` on (at most 1,000 rows looked at), the first one always, the next
# while the bytes before each stay within the budget (Kafka's fetch: whole batches; the
# consumer skips what precedes its offset). Fetch counts wire bytes (octet_length reads no
# TOAST), a read of messages their logical bytes, bounded by the offsets it may return.
FETCH = """
SELECT data, base_offset, records, size FROM (
    SELECT *, sum(octet_length(data)) OVER (ORDER BY last_offset) - octet_length(data) AS before
    FROM (SELECT * FROM batches WHERE pid = %s AND last_offset >= %s
          ORDER BY last_offset LIMIT 1000) ranged
) b WHERE before < %s OR base_offset <= %s ORDER BY last_offset
"""
READ = """
SELECT data, uuid_send(origin), producer FROM (
    SELECT *, sum(size) OVER (ORDER BY last_offset) - size AS before
    FROM batches WHERE pid = %s AND last_offset >= %s AND base_offset < %s
) b WHERE before < %s OR base_offset <= %s ORDER BY last_offset
"""
MARKS = "SELECT low_offset, next_offset FROM partitions WHERE id = %s"
# ListOffsets by time: the first retained batch whose max timestamp reaches the target.
TIME_BATCH = """
SELECT data FROM batches WHERE pid = %s AND last_offset >= %s AND max_ts >= %s
ORDER BY last_offset LIMIT 1
"""
MAX_TS_BATCH = """
SELECT data FROM batches WHERE pid = %s AND last_offset >= %s
ORDER BY max_ts DESC, last_offset LIMIT 1
"""
PARTITION_STATS = """
SELECT p.partition, p.low_offset, p.next_offset, p.rows, p.bytes,
    (SELECT first_ts FROM batches b WHERE b.pid = p.id AND b.last_offset >= p.low_offset
     ORDER BY b.last_offset LIMIT 1),
    (SELECT max_ts FROM batches b WHERE b.pid = p.id ORDER BY b.last_offset DESC LIMIT 1),
    (SELECT count(*) FROM consumer_cursors c WHERE c.pid = p.id),
    (SELECT min(c."offset") FROM consumer_cursors c WHERE c.pid = p.id)
FROM partitions p WHERE p.stream = %s AND p.topic = %s ORDER BY p.partition
"""
# Retention: the oldest batches' ends and ages, to find the prefix older than the cut.
OLDEST = """
SELECT last_offset, max_ts, records FROM batches WHERE pid = %s AND last_offset >= %s
ORDER BY last_offset LIMIT %s
"""
DELETE_BELOW = """
WITH d AS (DELETE FROM batches WHERE pid = %s AND last_offset < %s RETURNING records, size)
SELECT coalesce(sum(records), 0), coalesce(sum(size), 0) FROM d
"""
DELETE_FROM = """
WITH d AS (DELETE FROM batches WHERE pid = %s AND last_offset >= %s
    RETURNING records, size, base_offset, data, uuid_send(origin) AS origin, producer)
SELECT records, size, base_offset, data, origin, producer FROM d ORDER BY base_offset
"""
RESERVE = """
UPDATE partitions SET next_offset = next_offset + %(n)s, rows = rows + %(n)s, bytes = bytes + %(b)s
WHERE id = %(id)s AND stream = %(s)s AND topic = %(t)s
RETURNING id, next_offset - %(n)s,
    (SELECT count(*) FROM partitions WHERE stream = %(s)s AND topic = %(t)s)
"""
