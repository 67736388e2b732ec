"""Producing into the PostgreSQL store: offsets reserved and rows copied in, in one
transaction per batch."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from uuid import UUID

import psycopg
from psycopg.pq import TransactionStatus

from replication.engine.batches import layout_batch
from replication.engine.durability import LOCAL_COMMIT, local_commit
from replication.engine.pg.catalog import Catalog
from replication.engine.pg.schema import COPY_IN, COPY_TYPES, RESERVE, SEQ_GET, SEQ_PUT
from replication.engine.sequences import (
    ProducerState,
    sequenced_partition,
)
from replication.engine.store import Plan, Produce, Record, StoreError, plan_partitions


class _TopicChanged(Exception):
    """The topic's partitions changed since this store listed them."""


class _Retried(Exception):
    """An idempotent producer's batch was written before, at offset `first`."""

    def __init__(self, first: int) -> None:
        self.first = first


@contextlib.contextmanager
def _rolled_back(conn: psycopg.Connection) -> Iterator[None]:
    """Roll back the transaction begun by hand inside the block on any error; the block
    commits it itself."""
    try:
        yield
    except BaseException:
        if conn.info.transaction_status in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
            conn.execute("ROLLBACK")
        raise


@contextlib.contextmanager
def _committing(conn: psycopg.Connection) -> Iterator[None]:
    """Commit the transaction begun by hand inside the block (its BEGIN rides in a pipeline
    with the first statements), or roll it back on any error."""
    with _rolled_back(conn):
        yield
        if local_commit():  # acks=0/1: the primary's own commit answers (engine/durability.py)
            conn.execute(LOCAL_COMMIT)
        conn.execute("COMMIT")


class Appending(Catalog):
    """Producing: offsets reserved and rows copied in, one transaction per batch."""

    def _append(self, stream: UUID, topic: str, records: Sequence[Record],
                produce: Produce) -> list[tuple[int, int]]:
        for _ in range(3):
            ids = self._topic_cache(stream, topic)
            if produce.sequence is not None:
                sequenced_partition(records, len(ids))
            plan = plan_partitions(records, len(ids), self._rr)
            try:
                placed = self._append_planned(stream, topic, ids, records, plan, produce)
            except _TopicChanged:
                self._topics.pop((stream, topic), None)  # it grew or vanished: look again
                continue
            except _Retried as retried:
                p = records[0].partition
                return [(p, retried.first + i) for i in range(len(records))]
            self._rr = plan.counter
            return placed
        raise StoreError(f"topic {topic!r} kept changing while appending: try again")

    def _append_planned(self, stream: UUID, topic: str, ids: list[int],
                        records: Sequence[Record], plan: Plan,
                        produce: Produce) -> list[tuple[int, int]]:
        pids = {p: ids[p] for p in plan.totals}
        with self._pool.connection() as conn, _committing(conn), conn.cursor() as cur:
            firsts = self._reserve(conn, cur, stream, topic, len(ids), pids, plan.totals)
            if produce.sequence is not None:
                # Under the partition's row lock (taken by the reserve): the producer's state
                # read here holds until the commit, which stores the batch and it together.
                ((p, pid),) = pids.items()
                retried = self._sequence(cur, pid, produce.sequence, firsts[p])
                if retried is not None:
                    raise _Retried(retried)  # rolls back: the reserved offsets are given back
            if produce.admit is not None:
                produce.admit()  # under the partitions' locks: see fence_appends
            with cur.copy(COPY_IN) as copy:
                copy.set_types(COPY_TYPES)
                return layout_batch(records, plan, pids, firsts, *produce[:3], copy.write_row)

    def fence_appends(self, stream: UUID, *, timeout: float) -> None:
        # An append holds its partitions' row locks from its reservation to its commit; a
        # share lock on every partition of the stream waits for those taken before it.
        try:
            with self._pool.connection(timeout=timeout) as conn, conn.transaction():
                conn.execute(f"SET LOCAL lock_timeout = {int(timeout * 1000)}")
                conn.execute("SELECT 1 FROM partitions WHERE stream = %s FOR SHARE", (stream,))
        except psycopg.Error as error:
            raise StoreError(f"appends in flight did not finish within {timeout:g}s: "
                             f"{error}") from error

    def _put_state(self, conn: psycopg.Cursor, pid: int, producer_id: int,
                   state: ProducerState) -> None:
        conn.execute(SEQ_PUT, (pid, producer_id, state.epoch, list(state.firsts),
                               list(state.lasts), list(state.offsets)))

    @staticmethod
    def _reserve(
        conn: psycopg.Connection,
        cur: psycopg.Cursor,
        stream: UUID,
        topic: str,
        partitions: int,
        pids: dict[int, int],
        totals: dict[int, tuple[int, int]],
    ) -> dict[int, int]:
        """Begin the batch's transaction and reserve its offsets in one round trip: a pipeline
        carries BEGIN and one UPDATE per partition, in id order, so appenders touching several
        partitions never deadlock. (Measured faster than BEGIN, then the UPDATEs, and than a
        PL/pgSQL function doing them.) `totals`: (records, logical bytes) per partition.
        Returns the first offset of each target partition."""
        return reserve(conn, cur, stream, topic, partitions, pids, totals)[0]


def reserve(conn: psycopg.Connection, cur: psycopg.Cursor, stream: UUID, topic: str,
            partitions: int, pids: dict[int, int], totals: dict[int, tuple[int, int]],
            producer: int | None = None,
            ) -> tuple[dict[int, int], dict[int, ProducerState | None]]:
    """`Appending._reserve`, and with `producer` (a producer id) that producer's state in each
    partition read in the same round trip (by partition, None where it has none): statements
    of their own after the UPDATEs, so their snapshots are taken once the partitions' row
    locks are held and see the states the last appends of the partitions committed."""
    order = sorted(pids, key=pids.__getitem__)
    params = [
        {"id": pids[p], "n": totals[p][0], "b": totals[p][1], "s": stream, "t": topic}
        for p in order
    ]
    states = {p: conn.cursor() for p in pids} if producer is not None else {}
    with conn.pipeline():
        conn.execute("BEGIN")
        cur.executemany(RESERVE, params, returning=True)
        for p, state in states.items():
            state.execute(SEQ_GET, (pids[p], producer))
    rows = cur.fetchall()
    while cur.nextset():
        rows += cur.fetchall()
    if len(rows) != len(order) or any(n != partitions for *_, n in rows):
        raise _TopicChanged  # rolls the transaction back: the offsets are given back
    first = {pid: off for pid, off, _ in rows}
    got = {p: state.fetchone() for p, state in states.items()}
    return ({p: first[pid] for p, pid in pids.items()},
            {p: ProducerState(g[0], *map(tuple, g[1:])) if g else None for p, g in got.items()})
