"""Batch rows into a replica partition of the batch store, under the replica's apply rule
(DESIGN.md invariant 2), for copystream's Spark tasks.

The rows come from a `Source`, the source database's rows relayed by binary COPY straight
into the replica's table (`Relayed`: the bytes of a batch never become a Python object).
The replica's next offset, read under its partition's row lock, decides as it does for the
gateways' batches (batchrules.take_batches): batches ending before it are skipped, one it ends
inside keeps its tail (re-encoded), one starting past it is refused (Misordered) unless the
partition never held a message (`fresh_start`), so a retried batch, a re-run copy or both at
once leave the replica a prefix of its origin, never doubled.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol
from uuid import UUID

import psycopg
from psycopg import sql

from replication.engine.batchrules import fresh_start, kept_suffix
from replication.engine.pg.relay import relay
from replication.engine.pg.schema import ADVANCE, LINK_CURSORS, LOCK, START
from replication.engine.pgbatch import schema as s
from replication.engine.statements import BATCH_COLUMNS, LINK_ENDED
from replication.engine.store import Key, LinkEnded, ReturnToOrigin, StoreError
from replication.engine.stored import StoredBatch


class Gone(StoreError):
    """Source batches of the range went missing while they were copied: its retention
    removed them meanwhile (nothing was written)."""


class Written(NamedTuple):
    end: int  # the replica partition's next offset after the apply
    records: int  # records newly stored
    size: int  # their logical bytes


class Source(Protocol):
    """The batches of one source partition's range, as an apply takes them."""

    def head(self, offset: int) -> tuple[int, int] | None:
        """(base, last offset) of the first batch ending at or after `offset`."""

    def batch(self, last: int) -> StoredBatch:
        """The whole batch ending at `last`."""

    def copy(self, conn: psycopg.Connection, pid: int, start: int) -> tuple[int, int, int]:
        """Copy the batches from the one beginning at `start` on into partition `pid`:
        (records, bytes, end). Raises Gone when they are not one contiguous run from there."""


def apply_locked(conn: psycopg.Connection, pid: int, key: Key, source: Source, *,
                 origin_low: int, link: str = "", delivered: int | None = None) -> Written:
    """Apply `source` to replica partition `pid` in the caller's open transaction of `conn`.
    `origin_low`: the source's low watermark (where a fresh replica may begin); `link`: the
    replica link whose cursor moves (to `delivered`, or the replica's end), "" for none."""
    with conn.cursor() as cur:
        locked = cur.execute(LOCK, ([pid],)).fetchone()
        if locked is None:
            raise StoreError(f"{key[0]}:{key[1]}: the replica partition no longer exists")
        low, nxt = locked[1:]
        if link and conn.execute(LINK_ENDED, (link,)).fetchone():
            raise LinkEnded(link)
        records = size = 0
        start = nxt
        head = source.head(nxt)
        if head is not None:
            base, last = head
            if base < nxt:  # the replica ends inside it: keep its tail
                kept = kept_suffix(source.batch(last), nxt)
                if kept is not None:  # None: a compacted batch with no record there
                    copy_batches(conn, pid, [kept])
                    records, size = kept.records, kept.size
                start = last + 1
            elif base > nxt:  # a fresh partition begins where the origin does, or Misordered
                start = fresh_start(key, base, low, nxt, origin_low)
                cur.execute(START, ([pid], [start]))
            n, b, start = source.copy(conn, pid, start)
            records, size = records + n, size + b
        end = max(start, nxt)
        if records:
            cur.execute(ADVANCE, ([pid], [end], [records], [size]))
        if link:
            cur.execute(LINK_CURSORS, (link, [pid], [max(end, delivered or 0)]))
    return Written(end, records, size)


# The source's batches of a range, with the replica's partition id, as COPY writes them.
RELAY_OUT = ("COPY (SELECT {rpid}::int4, " + BATCH_COLUMNS + " FROM batches WHERE pid = {pid} "
             "AND last_offset >= {start} AND base_offset < {end} ORDER BY last_offset) "
             "TO STDOUT (FORMAT BINARY)")
HEAD = """SELECT base_offset, last_offset FROM batches
WHERE pid = %s AND last_offset >= %s AND base_offset < %s ORDER BY last_offset LIMIT 1"""
ONE = f"SELECT {BATCH_COLUMNS.replace('origin', 'uuid_send(origin)')} FROM batches " \
      "WHERE pid = %s AND last_offset = %s"
# What the relay wrote, seen in the replica's transaction: a contiguous run from `start`,
# and none of it from the replica's own stream (invariant 3).
WRITTEN = """SELECT count(*), coalesce(sum(records), 0)::int8, coalesce(sum(size), 0)::int8,
    min(base_offset), max(last_offset), coalesce(bool_or(origin = %s), false),
    coalesce(sum(last_offset + 1 - base_offset), 0)::int8
FROM batches WHERE pid = %s AND last_offset >= %s"""


class Relayed:
    """Source partition `pid`'s batches holding offsets [start, end), read from `conn` (the
    source database) and relayed by binary COPY: whole batches, so the last may end past
    `end`. `stream` is the replica's, which none of them may come from."""

    def __init__(self, conn: psycopg.Connection, pid: int, start: int, end: int,
                 stream: UUID) -> None:
        self.conn, self.pid, self.start, self.end, self.stream = conn, pid, start, end, stream

    def head(self, offset: int) -> tuple[int, int] | None:
        return self.conn.execute(HEAD, (self.pid, max(offset, self.start), self.end)).fetchone()

    def batch(self, last: int) -> StoredBatch:
        row = self.conn.cursor(binary=True).execute(ONE, (self.pid, last)).fetchone()
        if row is None:
            raise Gone(f"the source's batch ending at {last} is gone")
        return stored_batch(row)

    def copy(self, conn: psycopg.Connection, pid: int, start: int) -> tuple[int, int, int]:
        if start >= self.end:
            return 0, 0, start
        query = sql.SQL(RELAY_OUT).format(rpid=pid, pid=self.pid, start=start, end=self.end)
        with conn.cursor() as cur:
            relayed = relay(self.conn, query.as_bytes(self.conn), cur, s.COPY_IN)
            count, records, size, first, last, home, spanned = cur.execute(
                WRITTEN, (self.stream, pid, start)).fetchone()
        if home:
            raise ReturnToOrigin(f"its messages originate in stream {self.stream}, and a "
                                 "message is never replicated back to its origin")
        # Offsets the batches span, not records: a compacted batch keeps its span (issue 31).
        if count != relayed.rows or (count and (first != start or spanned != last + 1 - start)):
            raise Gone(f"the source no longer holds all of offsets {start}..{self.end - 1}")
        return records, size, (last + 1 if count else start)


def stored_batch(row: Sequence) -> StoredBatch:
    """A StoredBatch from a row of `COLUMNS` (origin as 16 bytes) read in binary."""
    return StoredBatch(*row[:10], bytes(row[10]), *row[11:13], bytes(row[13]))


def copy_batches(conn: psycopg.Connection, pid: int, batches: Sequence[StoredBatch]) -> None:
    """Batches into partition `pid`, by binary COPY, in the caller's transaction."""
    with conn.cursor().copy(s.COPY_IN) as copy:
        copy.set_types(s.COPY_TYPES)
        for b in batches:
            copy.write_row((pid, *b))
