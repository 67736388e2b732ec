"""A range of source rows piped into a replica partition by binary COPY, under the replica's
apply rule: what a gateway's piped batch and a Spark copy chunk both do."""

from __future__ import annotations

from uuid import UUID

import psycopg
from psycopg import sql
from psycopg.pq import TransactionStatus

from replication.engine.pg.relay import relay
from replication.engine.pg.schema import (
    ADVANCE_PIPED,
    ADVANCE_PIPED_LINK,
    LINK_CURSORS,
    LOCK,
    PIPE_IN,
    PIPE_LOCAL,
    PIPE_OUT,
    SOURCE_RANGE,
    START,
    piped_bytes,
)
from replication.engine.statements import LINK_ENDED
from replication.engine.store import Key, LinkEnded, Misordered, StoreError


class Overtaken(Exception):
    """Rows of the source range were missing: retention removed some while they were being
    piped, or (`low=None`) the range or the partition id was not what the caller took."""


class LowUnknown(Overtaken):
    """A replica partition that never held a message begins at the source's low watermark,
    and the caller piped without it (`low=None`)."""


class PartitionGone(Exception):
    """The replica partition's id names no partition any more (its topic was deleted)."""


def source_range(
    conn: psycopg.Connection, stream: UUID, topic: str, partition: int, start: int
) -> tuple:
    """(partition id, low, next offset, origin bytes of the message at max(start, low))."""
    row = conn.execute(SOURCE_RANGE, (start, stream, topic, partition)).fetchone()
    if row is None:
        raise StoreError(f"{topic}:{partition} does not exist at the source")
    return row


def pipe_into(
    src: psycopg.Connection | None, cur: psycopg.Cursor, pids: tuple[int, int], key: Key,
    first: int, upto: int, *, low: int | None, link: str = "",
) -> tuple[int, int, int]:
    """Source offsets [first, upto) of partition pids[0] into replica partition pids[1], by
    binary COPY from `src` (None: both in `cur`'s database), in one transaction of `cur`'s
    connection (autocommit, no transaction open): the replica's apply rule (DESIGN.md
    invariant 2) under the partition's row lock, where its next offset decides. A range past
    it is refused (Misordered), an overlap is skipped, so a retried batch or Spark task, or
    both applying the same offsets, never double a row; a replica that never held a message
    begins at the source's low watermark `low` when the range starts there. Returns (the
    replica's next offset, rows written, their bytes). Raises Overtaken when retention
    removed source rows of the range meanwhile; any error rolls the transaction back.

    `low=None` pipes a range the caller did not look up at the source (a gateway's batch
    from a partition id it cached): Overtaken then also says the range, or the partition id,
    is not (or no longer) all there, and LowUnknown (an Overtaken) that the replica partition
    never held a message, so where it begins needs `low`.

    BEGIN rides in a pipeline with the lock, COMMIT with the advance: a gateway's batch is
    small, and those two round trips were a fifth of its statements."""
    conn = cur.connection
    try:
        return _pipe_locked(src, cur, pids, key, first, upto, low=low, link=link)
    except BaseException:
        if conn.info.transaction_status in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
            conn.execute("ROLLBACK")
        raise


def _pipe_locked(
    src: psycopg.Connection | None, cur: psycopg.Cursor, pids: tuple[int, int], key: Key,
    first: int, upto: int, *, low: int | None, link: str,
) -> tuple[int, int, int]:
    spid, pid = pids
    conn = cur.connection
    # Locked before the source rows are read: the end read here holds until commit.
    with conn.pipeline():
        conn.execute("BEGIN")
        cur.execute(LOCK, ([pid],))
        # After the lock, in a snapshot of its own: a link a failover ended is refused.
        ended = conn.execute(LINK_ENDED, (link,)) if link else None
    locked = cur.fetchall()
    if not locked:
        raise PartitionGone(pid)
    if ended is not None and ended.fetchone():
        raise LinkEnded(link)
    ((_, rlow, nxt),) = locked
    if rlow == nxt == 0 and first > 0:  # trim_runs' fresh-replica rule
        if low is None:
            raise LowUnknown(pid)
        if first == low:
            cur.execute(START, ([pid], [first]))
            nxt = first
    if first > nxt:
        raise Misordered(key, nxt, first)
    frm, nbytes = max(first, nxt), 0
    if frm < upto:
        nbytes = _pipe(src, cur, spid, pid, frm, upto)
    with conn.pipeline():
        if frm < upto:
            advance = {"end": upto, "n": upto - frm, "pid": pid, "b": nbytes, "link": link}
            cur.execute(ADVANCE_PIPED_LINK if link else ADVANCE_PIPED, advance)
        elif link:
            cur.execute(LINK_CURSORS, (link, [pid], [upto]))
        conn.execute("COMMIT")
    return max(nxt, upto), max(upto - frm, 0), nbytes


def _pipe(src: psycopg.Connection | None, cur: psycopg.Cursor, spid: int, pid: int,
          start: int, end: int) -> int:
    """Rows [start, end) of source partition `spid` into partition `pid`; returns their
    logical bytes."""
    if src is None:
        rows, nbytes = cur.execute(PIPE_LOCAL, {"rpid": pid, "pid": spid, "start": start,
                                                "end": end}).fetchone()
    else:
        query = sql.SQL(PIPE_OUT).format(rpid=pid, pid=spid, start=start, end=end)
        relayed = relay(src, query.as_bytes(src), cur, PIPE_IN)
        rows, nbytes = relayed.rows, piped_bytes(relayed)
    # Offsets are unique, so the count of rows written proves the range complete; short
    # means retention removed a prefix meanwhile or, when the caller did not look the range
    # up, that it lies outside [low, high) or the partition id names a deleted partition
    # (its rows went with it). The transaction rolls back: nothing written.
    if rows != end - start:
        raise Overtaken
    return int(nbytes)
