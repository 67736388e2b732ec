"""The batch store's table and statements (issue 30): a row per record batch, keyed by its
partition id and last offset, so a fetch from any offset is one range scan of the primary key
(the first batch whose last offset reaches the fetch offset holds it). The statements both
batch stores run are statements.py's; these are PostgreSQL's own."""

from __future__ import annotations

from replication.engine.compactstore import STATE_TABLE
from replication.engine.pg.schema import COMMON_SCHEMA
from replication.engine.statements import BATCH_COLUMNS
from replication.engine.txnstate import TXN_SCHEMA

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
""" + TXN_SCHEMA + STATE_TABLE
STORAGE_UNSET = """
SELECT attstorage <> 'e' FROM pg_attribute
WHERE attrelid = 'batches'::regclass AND attname = 'data'
"""
STORAGE_SET = "ALTER TABLE batches ALTER COLUMN data SET STORAGE EXTERNAL"

COPY_IN = f"COPY batches (pid, {BATCH_COLUMNS}) FROM STDIN (FORMAT BINARY)"
COPY_TYPES = ["int4", "int8", "int8", "int4", "int8", "int8", "int8", "int2", "int4", "int2",
              "int8", "bytea", "text", "int8", "bytea"]
# Compaction's drops (compactstore.py `_drop_if_same`): each batch only if still as read.
DROP_IF_SAME = """
DELETE FROM batches b USING unnest(%s::bigint[], %s::bigint[]) AS d(last_offset, crc)
WHERE b.pid = %s AND b.last_offset = d.last_offset AND b.crc = d.crc RETURNING b.last_offset
"""
# statements.py's FETCH_BATCHES beside the batches the fetching process holds (tailcache.py:
# their last and base offsets, CRCs and lengths): the bytes only of the others (NULL for a
# held one: its TOASTed data is never read), then each row's last offset and CRC.
# octet_length reads a TOASTed value's length from its pointer.
FETCH_CACHED = """
SELECT CASE WHEN h.crc IS NULL THEN b.data END, b.base_offset, b.records, b.size,
       b.last_offset, b.crc FROM (
    SELECT pid, last_offset, base_offset, wire, sum(wire) OVER (ORDER BY last_offset) - wire
           AS ahead
    FROM (SELECT pid, last_offset, base_offset, octet_length(data) AS wire FROM batches
          WHERE pid = %s AND last_offset >= %s ORDER BY last_offset LIMIT 1000) ranged
) k JOIN batches b ON b.pid = k.pid AND b.last_offset = k.last_offset
LEFT JOIN unnest(%s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[])
    AS h(last_offset, base_offset, crc, wire)
    ON h.last_offset = k.last_offset AND h.base_offset = k.base_offset AND h.crc = b.crc
    AND h.wire = k.wire
WHERE k.ahead < %s OR k.base_offset <= %s ORDER BY k.last_offset
"""
# An append's batch rows in one statement (a COPY cannot ride in a pipeline with the rest of
# the append: see PgBatchStore._write_once), a parameter array per column, origin as its 16
# bytes; in binary (%b): the text form escapes every byte of the batches.
INSERT_BATCHES = f"""
INSERT INTO batches (pid, {BATCH_COLUMNS})
SELECT p, bo, lo, r, ft, mt, pr, e, bs, a, c, encode(o, 'hex')::uuid, n, z, d
FROM unnest(%b::int4[], %b::int8[], %b::int8[], %b::int4[], %b::int8[], %b::int8[], %b::int8[],
    %b::int2[], %b::int4[], %b::int2[], %b::int8[], %b::bytea[], %b::text[], %b::int8[],
    %b::bytea[]) AS u(p, bo, lo, r, ft, mt, pr, e, bs, a, c, o, n, z, d)
"""
# The partitions of `pids` where a producer has an open transaction range (its markers' due).
OPENED = """
SELECT pid FROM txn_ranges WHERE pid = ANY(%s) AND producer_id = %s AND marker_offset IS NULL
ORDER BY pid
"""
