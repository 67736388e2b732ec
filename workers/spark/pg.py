"""The PostgreSQL fast paths of the bulk jobs: a binary COPY pipe from the source store's rows
into the destination's (the gateways' own pipe apply), and range checksums computed by the
servers. Python only relays COPY's bytes; no message becomes a Python object. Batch stores
(issue 30, at the end) relay batch rows the same way and checksum batches, not messages.

A copied chunk follows the replica's apply rule (DESIGN.md invariant 2, `pipe_into`): under
the destination partition's row lock, its next offset decides. A chunk starting past it is
refused, an overlap is skipped, so a retried Spark task, a re-run job, or gateways applying
the same offsets meanwhile leave the partition exactly equal to the source, never doubled.
"""

from __future__ import annotations

from uuid import UUID

import psycopg

from replication.engine.pg.pipe import Overtaken, pipe_into
from replication.engine.pg.schema import configure_connection
from replication.engine.pgbatch.apply import Gone, Relayed, apply_locked
from replication.engine.store import StoreError

PID = "SELECT id FROM partitions WHERE stream = %s AND topic = %s AND partition = %s"
PIDS = "SELECT partition, id FROM partitions WHERE stream = %s AND topic = %s"
# Per bucket (a pid and an offset range [lo, hi)): how many rows and the XOR of each row's
# 64-bit hash. Every column is hashed, offset included, so equal checksums mean equal rows at
# equal offsets. Each bucket is a plain aggregate over its own index range, in the order the
# caller lists them: the plan is the same with or without statistics (a fresh copy has none),
# and nothing sorts or hashes rows to group them (a GROUP BY on the bucket number was planned,
# depending on the statistics, as a sort of the full rows spilling to disk). Listing buckets
# of equal offsets of all partitions together reads each heap page once: a source written by
# producers interleaves its partitions' rows, and one partition at a time read every page
# once per partition.
ROW_HASH = 'hash_record_extended(ROW("offset", ts, key, value, headers, origin, producer), 0)'
BUCKETS = f"""SELECT k.n, s.rows, s.checksum
    FROM unnest(%s::int4[], %s::int8[], %s::int8[]) WITH ORDINALITY AS k(pid, lo, hi, n),
    LATERAL (SELECT count(*) AS rows, bit_xor({ROW_HASH}) AS checksum FROM messages
             WHERE pid = k.pid AND "offset" >= k.lo AND "offset" < k.hi) s
    WHERE s.rows > 0"""
ROW_HASHES = f"""SELECT "offset", {ROW_HASH} FROM messages
    WHERE pid = %s AND "offset" >= %s AND "offset" < %s ORDER BY "offset" """

# Every statement here reads ranges of the (pid, offset) primary key, in offset order where
# order matters. Where producers interleaved a topic's partitions in the heap, that index's
# first column has no physical correlation, so the planner prices the ordered index scan as
# random reads and chose a bitmap heap scan plus a sort of the full rows spilling to disk
# (the copy's PIPE_OUT, with statistics or without); the index scan reads the same pages, in
# order, and no sort is ever needed. JIT gains nothing here (the time goes to the row hash
# and to COPY) and, once statistics exist, spent 100+ ms per statement compiling the bucket
# query.
SESSION = "SET enable_sort = off; SET jit = off"


def connect(url: str) -> psycopg.Connection:
    conn = psycopg.connect(url, autocommit=True)
    configure_connection(conn)
    conn.execute(SESSION)
    return conn


def partition_id(conn: psycopg.Connection, stream: str, topic: str, partition: int) -> int:
    row = conn.execute(PID, (stream, topic, partition)).fetchone()
    if row is None:
        raise StoreError(f"{topic}:{partition} does not exist in stream {stream}")
    return row[0]


def copy_chunk(
    src: psycopg.Connection, dst: psycopg.Connection, pids: tuple[int, int], lo: int, hi: int,
    *, key: tuple[str, int], origin_low: int, link: str = "",
) -> tuple[int, int]:
    """Copy source offsets [lo, hi) into the destination partition in one destination
    transaction, by the gateways' own pipe apply (PostgreSQL store's `pipe_into`); returns
    (messages, bytes) newly written."""
    try:
        with dst.cursor() as cur:
            _, rows, size = pipe_into(src, cur, pids, key, lo, hi, low=origin_low, link=link)
    except Overtaken:
        raise StoreError(
            f"the source no longer held all of offsets {lo}..{hi - 1}: its retention removed "
            "messages during the copy; run the job again") from None
    return rows, size


def partition_ids(conn: psycopg.Connection, stream: str, topic: str) -> dict[int, int]:
    """partition -> id, for each partition the stream's topic has in this store."""
    return dict(conn.execute(PIDS, (stream, topic)).fetchall())


def buckets(
    conn: psycopg.Connection, spans: list[tuple[int, int, int]]
) -> dict[int, tuple[int, int]]:
    """Index in `spans` of each (pid, lo, hi) holding rows -> (rows, checksum)."""
    pids, los, his = ([span[i] for span in spans] for i in range(3))
    return {n - 1: (rows, h) for n, rows, h in conn.execute(BUCKETS, (pids, los, his))}


def row_hashes(conn: psycopg.Connection, pid: int, lo: int, hi: int) -> dict[int, int]:
    return dict(conn.execute(ROW_HASHES, (pid, lo, hi)).fetchall())


# --- the batch store (issue 30) ----------------------------------------------------------------

LAYOUT = "SELECT to_regclass('batches') IS NOT NULL, to_regclass('messages') IS NOT NULL"
# Per bucket of a batch store: the records of the batches whose last offset falls in [lo, hi)
# (and which begin before `stop`, the compared range's end: a range's last bucket reaches
# past it, for the batch holding its last offsets), the XOR of a hash of each batch's
# (base offset, last offset, CRC, origin), and the offsets those batches span. Byte-identical
# batches (a replica's copies of its origin's) have equal CRCs: no batch is decoded here.
BATCH_HASH = "hash_record_extended(ROW(base_offset, last_offset, crc, origin), 0)"
BATCH_BUCKETS = f"""SELECT k.n, s.records, s.checksum, s.first, s.last
    FROM unnest(%s::int4[], %s::int8[], %s::int8[], %s::int8[])
        WITH ORDINALITY AS k(pid, lo, hi, stop, n),
    LATERAL (SELECT sum(records)::int8 AS records, bit_xor({BATCH_HASH}) AS checksum,
                    min(base_offset) AS first, max(last_offset) AS last FROM batches
             WHERE pid = k.pid AND last_offset >= k.lo AND last_offset < k.hi
                   AND base_offset < k.stop) s
    WHERE s.records > 0"""
# The batches holding offsets [lo, hi), to decode and compare message by message.
BATCH_ROWS = """SELECT data, uuid_send(origin), producer, base_offset FROM batches
    WHERE pid = %s AND last_offset >= %s AND base_offset < %s ORDER BY last_offset"""


def layout(conn: psycopg.Connection) -> str | None:
    """"batches" or "rows": the store the database holds (None: none yet)."""
    batches, messages = conn.execute(LAYOUT).fetchone()
    return "batches" if batches else "rows" if messages else None


def copy_batches_chunk(
    src: psycopg.Connection, dst: psycopg.Connection, pids: tuple[int, int], lo: int, hi: int,
    *, key: tuple[str, int], origin_low: int, stream: UUID, link: str = "",
) -> tuple[int, int]:
    """The batch store's `copy_chunk`: the source's batches holding offsets [lo, hi), whole
    and byte for byte, relayed into the destination partition by the gateways' own apply
    (pgbatch's `apply_locked`) in one destination transaction; (records, bytes) written."""
    try:
        with dst.transaction():
            done = apply_locked(dst, pids[1], key, Relayed(src, pids[0], lo, hi, stream),
                                origin_low=origin_low, link=link)
    except Gone:
        raise StoreError(
            f"the source no longer held all of offsets {lo}..{hi - 1}: its retention removed "
            "messages during the copy; run the job again") from None
    return done.records, done.size


def batch_buckets(
    conn: psycopg.Connection, spans: list[tuple[int, int, int, int]]
) -> dict[int, tuple[int, int, int, int]]:
    """Index in `spans` of each (pid, lo, hi, stop) holding batches -> (records, checksum,
    first offset, last offset)."""
    columns = ([span[i] for span in spans] for i in range(4))
    return {n - 1: tuple(found) for n, *found in conn.execute(BATCH_BUCKETS, tuple(columns))}


def batch_rows(conn: psycopg.Connection, pid: int, lo: int, hi: int) -> list[tuple]:
    """(data, origin bytes, producer, base offset) of the batches holding [lo, hi)."""
    return conn.cursor(binary=True).execute(BATCH_ROWS, (pid, lo, hi)).fetchall()
