"""The message store on PostgreSQL: one database per cluster, rows in and out in binary."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from operator import itemgetter
from uuid import UUID

import psycopg
from psycopg import sql
from psycopg.pq import TransactionStatus
from psycopg_pool import ConnectionPool

from replication.engine.batches import (
    Ends,
    OriginCache,
    cut_to_bytes,
    expire_end,
    group_runs,
    layout_apply,
    layout_batch,
    messages_from_rows,
    trim_runs,
)
from replication.engine.pg.relay import relay
from replication.engine.pg.schema import (
    ADVANCE,
    ADVANCE_PIPED,
    COPY_IN,
    COPY_TYPES,
    EXPIRE_CUT,
    EXPIRE_DELETE,
    LINK_CURSORS,
    LOCK,
    MERGE_CURSORS,
    PIPE_IN,
    PIPE_LOCAL,
    PIPE_OUT,
    READ,
    RESERVE,
    ROW_OVERHEAD,
    SCHEMA,
    SCHEMA_LOCK,
    SEQ_GET,
    SEQ_PUT,
    SOURCE_RANGE,
    START,
    TRUNCATE,
    configure_connection,
    piped_bytes,
)
from replication.engine.replicator import ReturnToOrigin
from replication.engine.sequences import (
    ProducerBatch,
    ProducerState,
    sequence_check,
    sequence_next,
    sequenced_partition,
)
from replication.engine.store import (
    PARTITION_STATS,
    Applied,
    CursorKey,
    Key,
    Message,
    MessageStore,
    Misordered,
    OffsetOutOfRange,
    PartitionOutOfRange,
    PartitionStats,
    Plan,
    Record,
    StoreError,
    UnknownTopic,
    first_at_or_after,
    partition_stats_from,
    plan_partitions,
)


class _TopicChanged(Exception):
    """The topic's partitions changed since this store listed them."""


class _Retried(Exception):
    """An idempotent producer's batch was written before, at offset `first`."""

    def __init__(self, first: int) -> None:
        self.first = first


class Overtaken(Exception):
    """Retention removed rows of the source range while they were being piped."""


def _source_range(
    conn: psycopg.Connection, stream: UUID, topic: str, partition: int, start: int
) -> tuple:
    """(partition id, low, next offset, origin bytes of the message at max(start, low))."""
    row = conn.execute(SOURCE_RANGE, (start, stream, topic, partition)).fetchone()
    if row is None:
        raise StoreError(f"{topic}:{partition} does not exist at the source")
    return row


def pipe_into(
    src: psycopg.Connection | None, cur: psycopg.Cursor, pids: tuple[int, int], key: Key,
    first: int, upto: int, *, low: int, link: str = "",
) -> tuple[int, int, int]:
    """Source offsets [first, upto) of partition pids[0] into replica partition pids[1], by
    binary COPY from `src` (None: both in `cur`'s database), in the caller's transaction:
    the replica's apply rule (DESIGN.md invariant 2) under the partition's row lock, where its
    next offset decides. A range past it is refused (Misordered), an overlap is skipped, so a
    retried batch or Spark task, or both applying the same offsets, never double a row; a
    replica that never held a message begins at the source's low watermark `low` when the
    range starts there. Returns (the replica's next offset, rows written, their bytes).
    Raises Overtaken when retention removed source rows of the range meanwhile."""
    spid, pid = pids
    # Locked before the source rows are read: the end read here holds until commit.
    ((_, rlow, nxt),) = cur.execute(LOCK, ([pid],)).fetchall()
    if rlow == nxt == 0 and 0 < first == low:  # trim_runs' fresh-replica rule
        cur.execute(START, ([pid], [first]))
        nxt = first
    if first > nxt:
        raise Misordered(key, nxt, first)
    frm, nbytes = max(first, nxt), 0
    if frm < upto:
        nbytes = _pipe(src, cur, spid, pid, frm, upto)
        cur.execute(ADVANCE_PIPED, {"end": upto, "n": upto - frm, "pid": pid, "b": nbytes})
    if link:
        cur.execute(LINK_CURSORS, (link, [pid], [upto]))
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
    # Offsets are unique and [start, end) was below the source's high watermark, so the
    # count of rows written proves the range complete; short means retention removed a
    # prefix meanwhile (the transaction rolls back, nothing written).
    if rows != end - start:
        raise Overtaken
    return int(nbytes)


@contextlib.contextmanager
def _committing(conn: psycopg.Connection) -> Iterator[None]:
    """Commit the transaction begun by hand inside the block (its BEGIN rides in a pipeline
    with the first statements), or roll it back on any error."""
    try:
        yield
    except BaseException:
        if conn.info.transaction_status in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


class PostgresStore:
    """MessageStore on PostgreSQL. Thread-safe: each call takes a connection from the pool."""

    def __init__(self, url: str, *, max_connections: int = 8) -> None:
        self._pool = ConnectionPool(
            url,
            min_size=1,
            max_size=max_connections,
            kwargs={"autocommit": True},
            configure=configure_connection,
            open=True,
            name="sgstore",
        )
        # Partition ids never change; a topic's list may grow (checked at each append).
        self._pids: dict[tuple[UUID, str, int], int] = {}
        self._topics: dict[tuple[UUID, str], list[int]] = {}
        self._origins = OriginCache()
        self._rr = 0  # round-robin counter; a lost update between threads only skews balance
        with self._pool.connection() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
            conn.execute(SCHEMA)

    def close(self) -> None:
        self._pool.close()

    # --- topics ------------------------------------------------------------------------------

    def ensure_topic(self, stream: UUID, topic: str, partitions: int) -> None:
        if partitions < 1:
            raise StoreError(f"a topic needs at least one partition, not {partitions}")
        with self._pool.connection() as conn:
            self._grow(conn, stream, [topic], [partitions])
        self._topics.pop((stream, topic), None)

    @staticmethod
    def _grow(conn: psycopg.Connection, stream: UUID, topics: list[str], counts: list[int]) -> None:
        conn.execute(
            "INSERT INTO partitions (stream, topic, partition) "
            "SELECT %s, t, g FROM unnest(%s::text[], %s::int4[]) u(t, n), "
            "generate_series(0, n - 1) g ON CONFLICT DO NOTHING",
            (stream, topics, counts),
        )

    def partitions(self, stream: UUID, topic: str) -> int:
        with self._pool.connection() as conn:
            return len(self._topic_ids(conn, stream, topic))

    @staticmethod
    def _topic_ids(conn: psycopg.Connection, stream: UUID, topic: str) -> list[int]:
        rows = conn.execute(
            "SELECT id FROM partitions WHERE stream = %s AND topic = %s ORDER BY partition",
            (stream, topic),
        ).fetchall()
        if not rows:
            raise UnknownTopic(f"topic {topic!r} does not exist in stream {stream}")
        return [r[0] for r in rows]

    def _pid(self, conn: psycopg.Connection, stream: UUID, topic: str, partition: int) -> int:
        pid = self._pids.get((stream, topic, partition))
        if pid is None:
            ids = self._topic_ids(conn, stream, topic)
            if not 0 <= partition < len(ids):
                raise PartitionOutOfRange(
                    f"partition {partition} does not exist: topic {topic!r} has partitions "
                    f"0..{len(ids) - 1}"
                )
            pid = self._pids[(stream, topic, partition)] = ids[partition]
        return pid

    # --- writes ------------------------------------------------------------------------------

    def append(
        self,
        stream: UUID,
        topic: str,
        records: Sequence[Record],
        *,
        origin: UUID,
        producer: str | None = None,
        log_append_time: bool = False,
        sequence: ProducerBatch | None = None,
    ) -> list[tuple[int, int]]:
        if not records:
            return []
        for _ in range(3):
            ids = self._topic_cache(stream, topic)
            if sequence is not None:
                sequenced_partition(records, len(ids))
            plan = plan_partitions(records, len(ids), self._rr)
            try:
                placed = self._append(stream, topic, ids, records, plan, origin.bytes, producer,
                                      log_append_time, sequence)
            except _TopicChanged:
                self._topics.pop((stream, topic), None)  # it grew or vanished: look again
                continue
            except _Retried as retried:
                p = records[0].partition
                return [(p, retried.first + i) for i in range(len(records))]
            self._rr = plan.counter
            return placed
        raise StoreError(f"topic {topic!r} kept changing while appending: try again")

    def _append(
        self,
        stream: UUID,
        topic: str,
        ids: list[int],
        records: Sequence[Record],
        plan: Plan,
        origin: bytes,
        producer: str | None,
        log_append_time: bool,
        sequence: ProducerBatch | None = None,
    ) -> list[tuple[int, int]]:
        pids = {p: ids[p] for p in plan.totals}
        with self._pool.connection() as conn, _committing(conn), conn.cursor() as cur:
            firsts = self._reserve(conn, cur, stream, topic, len(ids), pids, plan)
            if sequence is not None:
                # Under the partition's row lock (taken by the reserve): the producer's state
                # read here holds until the commit, which stores the batch and it together.
                ((p, pid),) = pids.items()
                self._sequence(cur, pid, sequence, firsts[p])
            with cur.copy(COPY_IN) as copy:
                copy.set_types(COPY_TYPES)
                return layout_batch(
                    records, plan, pids, firsts, origin, producer, log_append_time, copy.write_row
                )

    @staticmethod
    def _sequence(cur: psycopg.Cursor, pid: int, batch: ProducerBatch, first: int) -> None:
        row = cur.execute(SEQ_GET, (pid, batch.producer_id)).fetchone()
        state = ProducerState(row[0], *map(tuple, row[1:])) if row else None
        retried = sequence_check(state, batch)
        if retried is not None:
            raise _Retried(retried)  # rolls back: the reserved offsets are given back
        new = sequence_next(state, batch, first)
        cur.execute(SEQ_PUT, (pid, batch.producer_id, new.epoch, list(new.firsts),
                              list(new.lasts), list(new.offsets)))

    def offset_for_time(self, stream: UUID, topic: str, partition: int,
                        timestamp_ms: int) -> tuple[int, int] | None:
        with self._pool.connection() as conn:
            pid = self._pid(conn, stream, topic, partition)
            low, high = self._range(conn, stream, topic, pid)

            def ts_at(offset: int) -> int:
                return conn.execute('SELECT ts FROM messages WHERE pid = %s AND "offset" = %s',
                                    (pid, offset)).fetchone()[0]

            found = first_at_or_after(low, high, ts_at, timestamp_ms)
            return (found, ts_at(found)) if found < high else None

    def producer_state(self, stream: UUID, topic: str, partition: int,
                       producer_id: int) -> ProducerState | None:
        with self._pool.connection() as conn:
            row = conn.execute(SEQ_GET, (self._pid(conn, stream, topic, partition),
                                         producer_id)).fetchone()
        return ProducerState(row[0], *map(tuple, row[1:])) if row else None

    def _topic_cache(self, stream: UUID, topic: str) -> list[int]:
        ids = self._topics.get((stream, topic))
        if ids is None:
            with self._pool.connection() as conn:
                ids = self._topics[(stream, topic)] = self._topic_ids(conn, stream, topic)
        return ids

    @staticmethod
    def _reserve(
        conn: psycopg.Connection,
        cur: psycopg.Cursor,
        stream: UUID,
        topic: str,
        partitions: int,
        pids: dict[int, int],
        plan: Plan,
    ) -> dict[int, int]:
        """Begin the batch's transaction and reserve its offsets in one round trip: a pipeline
        carries BEGIN and one UPDATE per partition, in id order, so appenders touching several
        partitions never deadlock. (Measured faster than BEGIN, then the UPDATEs, and than a
        PL/pgSQL function doing them.) Returns the first offset of each target partition."""
        order = sorted(pids, key=pids.__getitem__)
        params = [
            {"id": pids[p], "n": plan.totals[p][0], "b": plan.totals[p][1], "s": stream, "t": topic}
            for p in order
        ]
        with conn.pipeline():
            conn.execute("BEGIN")
            cur.executemany(RESERVE, params, returning=True)
        rows = cur.fetchall()
        while cur.nextset():
            rows += cur.fetchall()
        if len(rows) != len(order) or any(n != partitions for *_, n in rows):
            raise _TopicChanged  # rolls the transaction back: the offsets are given back
        first = {pid: off for pid, off, _ in rows}
        return {p: first[pid] for p, pid in pids.items()}

    @staticmethod
    def _advance(cur: psycopg.Cursor, ends: Ends) -> None:
        cur.execute(ADVANCE, (list(ends), *map(list, zip(*ends.values(), strict=True))))

    def apply(
        self,
        stream: UUID,
        messages: Sequence[Message],
        *,
        link: str,
        origin_low: dict[Key, int] | None = None,
    ) -> Applied:
        runs = group_runs(messages)
        if not runs:
            return Applied({})
        with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            pids = self._apply_pids(conn, stream, runs)
            # The partitions' row locks serialise every applier and appender of a partition,
            # so the ends read here stay true until the commit.
            rows = cur.execute(LOCK, (sorted(pids.values()),)).fetchall()
            marks = {pid: (low, nxt) for pid, low, nxt in rows}
            trimmed = trim_runs(runs, {key: marks[pid] for key, pid in pids.items()}, origin_low)
            if trimmed.starts:
                starts = trimmed.starts
                cur.execute(START, ([pids[k] for k in starts], list(starts.values())))
            ends: Ends = {}
            if any(trimmed.todo.values()):
                with cur.copy(COPY_IN) as copy:
                    copy.set_types(COPY_TYPES)
                    ends = layout_apply(trimmed.todo, pids, copy.write_row)
                self._advance(cur, ends)
            delivered = {pids[key]: run[-1].offset + 1 for key, run in runs.items()}
            cur.execute(LINK_CURSORS, (link, list(delivered), list(delivered.values())))
        return Applied(trimmed.ends, {key: len(run) for key, run in trimmed.todo.items()},
                       sum(nbytes for _, _, nbytes in ends.values()))

    def apply_from(
        self,
        source: MessageStore,
        source_stream: UUID,
        stream: UUID,
        topic: str,
        partition: int,
        start: int,
        end: int,
        *,
        link: str,
    ) -> Applied | None:
        """`apply` of the source partition's [start, end), piped as binary COPY from the source
        database into this one: the same partition lock, trim and refusal as `apply`, without
        a Python object per row. None when the source is not a PostgresStore."""
        if not isinstance(source, PostgresStore):
            return None
        for _ in range(3):
            # Within one store the rows are copied by the server, on the replica's connection
            # (holding a second connection of the same pool could exhaust it).
            with (contextlib.nullcontext() if source is self
                  else source._pool.connection()) as src:
                row = (_source_range(src, source_stream, topic, partition, start) if src
                       else self._source_range(source_stream, topic, partition, start))
                if row[3] is not None and UUID(bytes=row[3]) == stream:
                    raise ReturnToOrigin(
                        f"{topic}:{partition}: its messages originate in stream {stream}, and "
                        "a message is never replicated back to its origin")
                try:
                    return self._apply_piped(src, row[:3], stream, (topic, partition), start,
                                             end, link)
                except Overtaken:
                    continue  # retention moved the source's low watermark: look again
        raise StoreError(f"{topic}:{partition}: retention kept overtaking the batch")

    def _source_range(self, stream: UUID, topic: str, partition: int, start: int) -> tuple:
        with self._pool.connection() as conn:
            return _source_range(conn, stream, topic, partition, start)

    def _apply_piped(
        self,
        src: psycopg.Connection | None,
        source_range: tuple[int, int, int],
        stream: UUID,
        key: Key,
        start: int,
        end: int,
        link: str,
    ) -> Applied:
        spid, low, high = source_range
        first, upto = max(start, low), min(end, high)
        if first >= upto:
            return Applied({})
        with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            pid = self._apply_pids(conn, stream, {key: []})[key]
            nxt, rows, nbytes = pipe_into(src, cur, (spid, pid), key, first, upto, low=low,
                                          link=link)
        return Applied({key: nxt}, {key: rows}, nbytes)

    def _apply_pids(
        self, conn: psycopg.Connection, stream: UUID, runs: dict[Key, list[Message]]
    ) -> dict[Key, int]:
        # Topics and partitions the origin has appear on the replica as messages arrive
        # (invariant 7): grow the replica's topic to cover every partition in the batch.
        need: dict[str, int] = {}
        for topic, partition in runs:
            need[topic] = max(need.get(topic, 0), partition + 1)
        # Sorted, so two appliers creating the same partitions insert them in one order.
        topics = sorted(need)
        self._grow(conn, stream, topics, [need[t] for t in topics])
        rows = conn.execute(
            "SELECT topic, partition, id FROM partitions WHERE stream = %s AND topic = ANY(%s)",
            (stream, list(need)),
        ).fetchall()
        ids = {(t, p): pid for t, p, pid in rows}
        return {key: ids[key] for key in runs}

    def replication_cursor(self, stream: UUID, link: str, topic: str, partition: int) -> int:
        with self._pool.connection() as conn:
            pid = self._pid(conn, stream, topic, partition)
            row = conn.execute(
                "SELECT next_offset FROM replication_cursors WHERE pid = %s AND link = %s",
                (pid, link),
            ).fetchone()
        return row[0] if row else 0

    # --- reads -------------------------------------------------------------------------------

    def read(
        self,
        stream: UUID,
        topic: str,
        partition: int,
        offset: int,
        *,
        limit: int = 1000,
        max_bytes: int = 1 << 20,
    ) -> list[Message]:
        rows = self.read_rows(stream, topic, partition, offset, limit=limit, max_bytes=max_bytes)
        return messages_from_rows(topic, partition, rows, self._origins)

    def read_rows(
        self,
        stream: UUID,
        topic: str,
        partition: int,
        offset: int,
        *,
        limit: int = 1000,
        max_bytes: int = 1 << 20,
    ) -> list[tuple]:
        with self._pool.connection() as conn:
            pid = self._pid(conn, stream, topic, partition)
            rows = conn.cursor(binary=True).execute(READ, (pid, offset, offset + limit)).fetchall()
            if not rows or rows[0][0] != offset:
                low, high = self._range(conn, stream, topic, pid)
                if not low <= offset <= high:
                    raise OffsetOutOfRange(offset, low, high)
        return rows[: cut_to_bytes(map(itemgetter(7), rows), max_bytes)]

    def _range(
        self, conn: psycopg.Connection, stream: UUID, topic: str, pid: int
    ) -> tuple[int, int]:
        row = conn.execute(
            "SELECT low_offset, next_offset FROM partitions WHERE id = %s", (pid,)
        ).fetchone()
        if row is None:  # dropped by another process after this one cached the id
            self._pids = {k: v for k, v in self._pids.items() if v != pid}
            raise UnknownTopic(f"topic {topic!r} does not exist in stream {stream}")
        return row

    def watermarks(self, stream: UUID, topic: str) -> dict[int, tuple[int, int]]:
        with self._pool.connection() as conn:
            rows = conn.execute(
                "SELECT partition, low_offset, next_offset FROM partitions "
                "WHERE stream = %s AND topic = %s ORDER BY partition",
                (stream, topic),
            ).fetchall()
        if not rows:
            raise UnknownTopic(f"topic {topic!r} does not exist in stream {stream}")
        return {p: (low, high) for p, low, high in rows}

    def partition_stats(self, stream: UUID, topic: str) -> list[PartitionStats]:
        with self._pool.connection() as conn:
            rows = conn.execute(PARTITION_STATS.format(p="%s"), (stream, topic)).fetchall()
        return partition_stats_from(rows, topic)

    def sizes(self, stream: UUID) -> dict:
        """logicalsize: maintained counters of key+value+header bytes. physicalsize: the message
        table's real size on disk (heap, TOAST, indexes; bloat included until vacuum),
        apportioned to the stream by its share of the counted bytes and rows."""
        with self._pool.connection() as conn:
            topics, nbytes, nrows = conn.execute(
                "SELECT count(DISTINCT topic), coalesce(sum(bytes), 0), coalesce(sum(rows), 0) "
                "FROM partitions WHERE stream = %s",
                (stream,),
            ).fetchone()
            all_bytes, all_rows, disk = conn.execute(
                "SELECT coalesce(sum(bytes), 0), coalesce(sum(rows), 0), "
                "pg_total_relation_size('messages') FROM partitions"
            ).fetchone()
        weight, total = nbytes + ROW_OVERHEAD * nrows, all_bytes + ROW_OVERHEAD * all_rows
        physical = disk * weight // total if total else 0
        return {"logicalsize": int(nbytes), "physicalsize": int(physical), "numtopics": topics}

    # --- retention ---------------------------------------------------------------------------

    def expire(self, stream: UUID, *, before_ms: int, batch: int = 10_000) -> int:
        with self._pool.connection() as conn:
            parts = conn.execute(
                "SELECT id, low_offset FROM partitions WHERE stream = %s ORDER BY id", (stream,)
            ).fetchall()
            done = 0
            for pid, low in parts:
                if done >= batch:
                    break
                done += self._expire_partition(conn, pid, low, before_ms, batch - done)
        return done

    @staticmethod
    def _expire_partition(
        conn: psycopg.Connection, pid: int, low: int, before_ms: int, limit: int
    ) -> int:
        # The DELETE locks only the old rows, which appenders never touch; the partitions row
        # (which appenders lock) is updated last, just before the commit, so an appender waits
        # at most for that commit, never for the delete.
        with conn.transaction():
            young, last = conn.execute(EXPIRE_CUT, (before_ms, pid, low, limit)).fetchone()
            end = expire_end(young, last)
            if end is None or end <= low:
                return 0
            count, size = conn.execute(EXPIRE_DELETE, (pid, low, end)).fetchone()
            conn.execute(
                "UPDATE partitions SET low_offset = greatest(low_offset, %s), "
                "rows = rows - %s, bytes = bytes - %s WHERE id = %s",
                (end, count, size, pid),
            )
        return count

    # --- consumer cursors --------------------------------------------------------------------

    def commit_cursor(
        self, stream: UUID, group: str, topic: str, partition: int, offset: int
    ) -> None:
        with self._pool.connection() as conn:
            pid = self._pid(conn, stream, topic, partition)
            conn.execute(
                'INSERT INTO consumer_cursors (pid, grp, "offset") VALUES (%s, %s, %s) '
                'ON CONFLICT (pid, grp) DO UPDATE SET "offset" = excluded."offset"',
                (pid, group, offset),
            )

    def commit_cursors(
        self, stream: UUID, group: str, cursors: Sequence[tuple[str, int, int]]
    ) -> None:
        with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            rows = [(self._pid(conn, stream, topic, partition), group, offset)
                    for topic, partition, offset in cursors]
            cur.executemany(
                'INSERT INTO consumer_cursors (pid, grp, "offset") VALUES (%s, %s, %s) '
                'ON CONFLICT (pid, grp) DO UPDATE SET "offset" = excluded."offset"', rows)

    def delete_cursors(
        self, stream: UUID, *, group: str | None = None, topic: str | None = None,
        partition: int | None = None,
    ) -> int:
        with self._pool.connection() as conn:
            return conn.execute(
                "DELETE FROM consumer_cursors c USING partitions p WHERE p.id = c.pid "
                "AND p.stream = %s AND (%s::text IS NULL OR c.grp = %s) "
                "AND (%s::text IS NULL OR p.topic = %s) "
                "AND (%s::int IS NULL OR p.partition = %s)",
                (stream, group, group, topic, topic, partition, partition),
            ).rowcount

    def fetch_cursor(self, stream: UUID, group: str, topic: str, partition: int) -> int | None:
        with self._pool.connection() as conn:
            pid = self._pid(conn, stream, topic, partition)
            row = conn.execute(
                'SELECT "offset" FROM consumer_cursors WHERE pid = %s AND grp = %s', (pid, group)
            ).fetchone()
        return row[0] if row else None

    def cursors(self, stream: UUID) -> list[tuple[str, str, int, int]]:
        with self._pool.connection() as conn:
            rows = conn.execute(
                'SELECT c.grp, p.topic, p.partition, c."offset" FROM consumer_cursors c '
                "JOIN partitions p ON p.id = c.pid WHERE p.stream = %s "
                "ORDER BY c.grp, p.topic, p.partition",
                (stream,),
            ).fetchall()
        return [tuple(r) for r in rows]

    def merge_cursors(
        self, stream: UUID, cursors: Sequence[tuple[str, str, int, int]]
    ) -> dict[CursorKey, int]:
        if not cursors:
            return {}
        groups, topics, parts, offsets = map(list, zip(*cursors, strict=True))
        with self._pool.connection() as conn:
            rows = conn.execute(MERGE_CURSORS, (groups, topics, parts, offsets, stream)).fetchall()
        return {(g, t, p): o for g, t, p, o in rows}

    def truncate(self, stream: UUID, topic: str, partition: int, offset: int) -> int:
        with self._pool.connection() as conn, conn.transaction():
            pid = self._pid(conn, stream, topic, partition)
            nxt = conn.execute(LOCK, ([pid],)).fetchone()[2]
            if offset >= nxt:
                return 0
            count, size = conn.execute(EXPIRE_DELETE, (pid, offset, nxt)).fetchone()
            conn.execute(TRUNCATE, {"off": offset, "n": count, "b": size, "id": pid})
            for table in ("replication_cursors", "consumer_cursors"):
                column = "next_offset" if table == "replication_cursors" else "offset"
                conn.execute(
                    sql.SQL("UPDATE {t} SET {c} = %s WHERE pid = %s AND {c} > %s").format(
                        t=sql.Identifier(table), c=sql.Identifier(column)),
                    (offset, pid, offset),
                )
        return count

    def drop_stream(self, stream: UUID) -> None:
        self._drop(stream, None)

    def drop_topic(self, stream: UUID, topic: str) -> None:
        self._drop(stream, topic)

    def _drop(self, stream: UUID, topic: str | None) -> None:
        with self._pool.connection() as conn, conn.transaction():
            ids = [
                r[0]
                for r in conn.execute(
                    "SELECT id FROM partitions WHERE stream = %s AND (%s::text IS NULL OR "
                    "topic = %s) ORDER BY id FOR UPDATE", (stream, topic, topic)
                ).fetchall()
            ]
            for table in ("messages", "replication_cursors", "consumer_cursors",
                          "producer_sequences", "partitions"):
                column = "id" if table == "partitions" else "pid"
                conn.execute(
                    sql.SQL("DELETE FROM {} WHERE {} = ANY(%s)").format(
                        sql.Identifier(table), sql.Identifier(column)),
                    (ids,),
                )
        gone = set(ids)
        self._pids = {k: v for k, v in self._pids.items() if v not in gone}
        self._topics = {k: v for k, v in self._topics.items()
                        if k[0] != stream or (topic is not None and k[1] != topic)}
