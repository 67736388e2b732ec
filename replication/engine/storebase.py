"""The message store's interface, and the rules both stores run through it.

`MessageStore` is what callers type against and what `PostgresStore` and `SqliteStore` derive
from: every rule that is not SQL dialect or bulk transfer (COPY) lives here once, written
against a DB-API connection and a few hooks each store fills (connections, transactions, the
writes it does its own way). The statements (statements.py) are written in PostgreSQL's
dialect; `statements.sql()` turns them into SQLite's for the embedded store.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Unpack
from uuid import UUID

from replication.engine.batches import (
    OriginCache,
    Trimmed,
    cut_to_bytes,
    group_runs,
    messages_from_rows,
)
from replication.engine.copies import StoreGroup
from replication.engine.recordbatch import encode_rows
from replication.engine.sequences import sequence_check, sequence_next
from replication.engine.statements import (
    END_LINK,
    LINK_ENDED,
    LOGICAL_SIZES,
    MARKS,
    MAX_TS,
    PARTITION_STATS,
    REOPEN_LINK,
    REPLICATION_CURSOR,
    STREAM_SIZE,
    STREAMS_ENDS,
    TOPIC_IDS,
    TS_AT,
    WATERMARKS,
    sql,
)
from replication.engine.store import (
    Applied,
    Committed,
    CursorKey,
    Key,
    LinkEnded,
    Message,
    OffsetOutOfRange,
    PartitionOutOfRange,
    PartitionStats,
    Produce,
    ReadBounds,
    Record,
    StoreError,
    UnknownTopic,
    first_at_or_after,
    partition_stats_from,
)
from replication.engine.storecursors import CursorMethods
from replication.engine.stored import Fetched, RawBatch, records_of
from replication.engine.storehooks import Connection
from replication.engine.storeretention import RetentionMethods

if TYPE_CHECKING:
    from replication.engine.batches import Ends
    from replication.engine.producers import ProducerBatch, ProducerState

# Streams per query of `ends_of`: SQLite binds at most 32,766 variables (999 before 3.32).
ENDS_CHUNK = 500


class MessageStore(CursorMethods, RetentionMethods, ABC):
    """The message store of one cluster. Streams are named by UUID, partitions by number."""

    DIALECT = "postgresql"
    KEEPS_BATCHES = False  # the batch store (issue 30) takes Kafka's batches as they come
    # append_batches takes `sequences`: an idempotent producer's batches of several partitions
    # in one transaction (the PostgreSQL batch store)
    SEQUENCES_TOGETHER = False
    ROW_OVERHEAD = 0  # rough bytes a row costs on disk beyond its payload (see `sizes`)
    _STATEMENTS: dict[tuple[str, str], str] = {}  # sql() of each statement used, per dialect

    def __init__(self) -> None:
        self._pids: dict[tuple[UUID, str, int], int] = {}  # ids never change: cache them
        self._origins = OriginCache()
        # Sticky runs' counter (STICKY_RUN), started at random as MapR-ES does; a lost update
        # between threads only skews balance.
        self._rr = random.randrange(1 << 30)

    # --- what each store provides ------------------------------------------------------------

    @abstractmethod
    def _reading(self) -> AbstractContextManager[Connection]:
        """A connection for reads (autocommit)."""

    @abstractmethod
    def _writing(self) -> AbstractContextManager[Connection]:
        """A connection in a transaction, committed when the block ends."""

    @abstractmethod
    def _key(self, stream: UUID) -> Any:
        """The stream as the driver binds it."""

    @abstractmethod
    def _ensure(self, stream: UUID, topic: str, partitions: int) -> None: ...

    @abstractmethod
    def _append(self, stream: UUID, topic: str, records: Sequence[Record],
                produce: Produce) -> list[tuple[int, int]]: ...

    @abstractmethod
    def _apply(self, stream: UUID, runs: dict[Key, list[Message]], link: str,
               origin_low: dict[Key, int] | None) -> tuple[Trimmed, Ends]:
        """Write the runs under their partitions' locks; what `trim_runs` kept and wrote."""

    @abstractmethod
    def _partition_ids(self, conn: Connection, stream: UUID,
                       need: dict[str, int]) -> dict[Key, int]:
        """Grow each topic to `need` partitions; every partition id of those topics."""

    @abstractmethod
    def _rows(self, conn: Connection, pid: int, offset: int, end: int,
              max_bytes: int) -> list[tuple]:
        """The rows of [offset, end) as `read_rows` returns them, those whose bytes with their
        predecessors' stay within `max_bytes`, and always the first."""

    @abstractmethod
    def _state(self, conn: Connection, pid: int, producer_id: int) -> ProducerState | None: ...

    @abstractmethod
    def _states(self, conn: Connection, pid: int) -> dict[int, ProducerState]:
        """Every producer's state on the partition, by producer id."""

    @abstractmethod
    def _put_state(self, conn: Connection, pid: int, producer_id: int,
                   state: ProducerState) -> None: ...

    @abstractmethod
    def _disk(self, conn: Connection) -> tuple[int, int, int]:
        """(logical bytes, rows, bytes on disk) of every stream of the store."""

    @abstractmethod
    def _delete_range(self, conn: Connection, pid: int, low: int, end: int) -> tuple[int, int]:
        """Delete offsets [low, end); (rows, logical bytes) deleted."""

    @abstractmethod
    def _lock(self, conn: Connection, pid: int) -> tuple[int, int]:
        """(low, next offset) of the partition, locked until the commit."""

    @abstractmethod
    def _drop(self, stream: UUID, topic: str | None) -> None: ...

    @abstractmethod
    def fence_appends(self, stream: UUID, *, timeout: float) -> None:
        """Return once every append to the stream that took its partitions' locks before this
        call has committed or rolled back (StoreError after `timeout` seconds). Appends check
        their `admit` under those locks, so once the caller's refusal is visible to `admit`
        and this returns, no append of the stream can still land (DESIGN.md invariant 10)."""

    def end_link(self, stream: UUID, link: str, *, timeout: float) -> None:
        """Refuse the link's batches (LinkEnded, under the partitions' locks) and wait for those
        in flight (`fence_appends`): then nothing of the link lands. Before a failover's switch."""
        with self._writing() as conn:
            conn.execute(self._sql(END_LINK), (link,))
        self.fence_appends(stream, timeout=timeout)

    def reopen_link(self, link: str) -> None:  # undo `end_link`: a failover that did not switch
        with self._writing() as conn:
            conn.execute(self._sql(REOPEN_LINK), (link,))

    def _refuse_ended(self, conn: Connection, link: str) -> None:  # under the partitions' locks
        if link and self._one(conn, LINK_ENDED, (link,)):
            raise LinkEnded(link)

    @abstractmethod
    def merge_cursors(
        self, stream: UUID, cursors: Sequence[Committed | tuple[str, str, int, int]]
    ) -> dict[CursorKey, int]:
        """Replication of committed cursors, in one transaction: each (group, topic, partition,
        offset[, metadata]) is clamped to the partition's next offset (a replica's cursor past
        what it holds would skip messages on failover) and never moves a cursor back (a
        delete or a commit back at the origin leaves the replica where the group had been);
        the metadata goes with the offset kept. Partitions the stream does not have are
        skipped. Returns each merged cursor's stored offset."""

    @abstractmethod
    def close(self) -> None: ...

    @abstractmethod
    def group(self) -> StoreGroup: ...  # its servers and the copies a commit is on

    def _sql(self, statement: str) -> str:
        key = (self.DIALECT, statement)
        found = self._STATEMENTS.get(key)
        if found is None:
            found = self._STATEMENTS[key] = sql(statement, self.DIALECT)
        return found

    def _one(self, conn: Connection, statement: str, args: Sequence) -> tuple | None:
        return conn.execute(self._sql(statement), args).fetchone()

    def _all(self, conn: Connection, statement: str, args: Sequence) -> list[tuple]:
        return conn.execute(self._sql(statement), args).fetchall()

    # --- topics ------------------------------------------------------------------------------

    def ensure_topic(self, stream: UUID, topic: str, partitions: int) -> None:
        """Create the topic or grow it to `partitions`; never shrinks (fewer is a no-op)."""
        if partitions < 1:
            raise StoreError(f"a topic needs at least one partition, not {partitions}")
        self._ensure(stream, topic, partitions)

    def partitions(self, stream: UUID, topic: str) -> int:
        with self._reading() as conn:
            return len(self._topic_ids(conn, stream, topic))

    def _topic_ids(self, conn: Connection, stream: UUID, topic: str) -> list[int]:
        rows = self._all(conn, TOPIC_IDS, (self._key(stream), topic))
        if not rows:
            raise UnknownTopic(f"topic {topic!r} does not exist in stream {stream}")
        return [r[0] for r in rows]

    def _pid(self, conn: Connection, stream: UUID, topic: str, partition: int) -> int:
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

    def _marks(self, conn: Connection, pid: int) -> tuple[int, int]:
        return self._one(conn, MARKS, (pid,))

    def _range(self, conn: Connection, stream: UUID, topic: str, pid: int) -> tuple[int, int]:
        row = self._one(conn, MARKS, (pid,))
        if row is None:  # dropped by another process after this one cached the id
            self._pids = {k: v for k, v in self._pids.items() if v != pid}
            raise UnknownTopic(f"topic {topic!r} does not exist in stream {stream}")
        return row

    def drop_stream(self, stream: UUID) -> None:
        self._drop(stream, None)

    def drop_topic(self, stream: UUID, topic: str) -> None:
        self._drop(stream, topic)

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
        admit: Callable[[], None] | None = None,
        codec: int = 0,
    ) -> list[tuple[int, int]]:
        """Store a batch in one transaction; (partition, offset) per record, in input order.
        Offsets are gap-free per partition whatever the number of concurrent appenders.
        With `sequence` (an idempotent producer's batch; every record names one partition),
        the producer's state is checked and kept in the same transaction (`sequence_check`):
        a retried batch returns its original offsets and writes nothing."""
        if not records:
            return []
        return self._append(stream, topic, records, Produce(
            origin.bytes, producer, log_append_time, sequence, admit, codec))

    def append_batches(
        self,
        stream: UUID,
        topic: str,
        batches: dict[int, list[RawBatch]],
        *,
        origin: UUID,
        producer: str | None = None,
        log_append_time: bool = False,
        sequence: ProducerBatch | None = None,
        admit: Callable[[], None] | None = None,
    ) -> dict[int, int]:
        """A Kafka Produce's checked batches (stored.check_batches) per partition, in one
        transaction, as `append`; the first offset each partition gave them. The row layout
        stores their records (decoded here); the batch store keeps the batches as sent."""
        records = [record for partition, raws in batches.items() for raw in raws
                   for record in records_of(raw.data, partition)[1]]
        placed = self.append(stream, topic, records, origin=origin, producer=producer,
                             log_append_time=log_append_time, sequence=sequence, admit=admit)
        firsts: dict[int, int] = {}
        for partition, offset in placed:
            firsts.setdefault(partition, offset)
        return firsts

    def apply(
        self,
        stream: UUID,
        messages: Sequence[Message],
        *,
        link: str,
        origin_low: dict[Key, int] | None = None,
    ) -> Applied:
        """Replication: store messages keeping their origin offsets, timestamps and origin, in
        one transaction. Each (topic, partition) run must be contiguous. Under the partition's
        lock, its next offset decides, whichever link sends (see `trim_runs`): a run starting
        past it refuses the whole batch (Misordered, nothing written), an overlap is trimmed.
        `origin_low` names the origin's low watermark per partition: a partition that never
        held a message accepts a run starting exactly there. The link's status cursor moves
        in the same transaction."""
        runs = group_runs(messages)
        if not runs:
            return Applied({})
        trimmed, ends = self._apply(stream, runs, link, origin_low)
        return Applied(trimmed.ends, {key: len(run) for key, run in trimmed.todo.items()},
                       sum(nbytes for _, _, nbytes in ends.values()))

    def _sequence(self, conn: Connection, pid: int, batch: ProducerBatch,
                  first: int) -> int | None:
        """The batch's original first offset when it is a retry; else its producer's state
        is recorded as written at `first` (the caller writes the batch in this transaction,
        under the partition's lock)."""
        state = self._state(conn, pid, batch.producer_id)
        retried = sequence_check(state, batch)
        if retried is None:
            self._put_state(conn, pid, batch.producer_id, sequence_next(state, batch, first))
        return retried

    def _apply_pids(
        self, conn: Connection, stream: UUID, runs: dict[Key, list[Message]]
    ) -> dict[Key, int]:
        # Topics and partitions the origin has appear on the replica as messages arrive
        # (invariant 7): grow the replica's topic to cover every partition in the batch.
        need: dict[str, int] = {}
        for topic, partition in runs:
            need[topic] = max(need.get(topic, 0), partition + 1)
        ids = self._partition_ids(conn, stream, need)
        return {key: ids[key] for key in runs}

    def replication_cursor(self, stream: UUID, link: str, topic: str, partition: int) -> int:
        """For status only, never a check: the end of the furthest run this link delivered
        to the partition (0 before any). The replica holds every offset below it."""
        with self._reading() as conn:
            row = self._one(conn, REPLICATION_CURSOR,
                            (self._pid(conn, stream, topic, partition), link))
        return row[0] if row else 0

    # --- reads -------------------------------------------------------------------------------

    def read(self, stream: UUID, topic: str, partition: int, offset: int,
             **bounds: Unpack[ReadBounds]) -> list[Message]:
        """Messages from `offset` in order, at least one if any (even past max_bytes); [] at
        the high watermark; OffsetOutOfRange below the low one or past the high one."""
        rows = self.read_rows(stream, topic, partition, offset, **bounds)
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
        """`read` without building Messages, for the Kafka fetch path that re-encodes them at
        once: rows (offset, ts, key, value, encoded headers or None, origin bytes, producer,
        logical bytes), the same rules and errors as `read`."""
        with self._reading() as conn:
            pid = self._pid(conn, stream, topic, partition)
            rows = self._rows(conn, pid, offset, offset + limit, max_bytes)
            if not rows or rows[0][0] != offset:
                low, high = self._range(conn, stream, topic, pid)
                if not low <= offset <= high:
                    raise OffsetOutOfRange(offset, low, high)
        return rows[: cut_to_bytes(map(itemgetter(7), rows), max_bytes)]

    def fetch(self, stream: UUID, topic: str, partition: int, offset: int,
              max_bytes: int) -> Fetched:
        """Kafka's Fetch of one partition from `offset` (below the high watermark, checked by
        the caller): record batches, at least one record even past `max_bytes`."""
        rows = self.read_rows(stream, topic, partition, offset,
                              limit=min(10_000, max(max_bytes // 64, 1)), max_bytes=max_bytes)
        return Fetched((encode_rows(rows),) if rows else (), len(rows),
                       sum(map(itemgetter(7), rows)))

    def offset_for_time(
        self, stream: UUID, topic: str, partition: int, timestamp_ms: int
    ) -> tuple[int, int] | None:
        """Kafka's ListOffsets by time: (offset, timestamp) of the first retained message with
        a timestamp at or after `timestamp_ms`, None when there is none."""
        with self._reading() as conn:
            pid = self._pid(conn, stream, topic, partition)
            low, high = self._range(conn, stream, topic, pid)

            def ts_at(offset: int) -> int:
                return self._one(conn, TS_AT, (pid, offset))[0]

            found = first_at_or_after(low, high, ts_at, timestamp_ms)
            return (found, ts_at(found)) if found < high else None

    def max_timestamp(self, stream: UUID, topic: str, partition: int) -> tuple[int, int] | None:
        """Kafka's ListOffsets MAX_TIMESTAMP: (offset, timestamp) of the retained message with
        the largest timestamp, None when the partition holds none. Timestamps need not grow
        with offsets (CreateTime is the producer's), so every retained row is looked at."""
        with self._reading() as conn:
            row = self._one(conn, MAX_TS, (self._pid(conn, stream, topic, partition),))
        return (row[0], row[1]) if row else None

    def producer_state(
        self, stream: UUID, topic: str, partition: int, producer_id: int
    ) -> ProducerState | None:
        """An idempotent producer's state on a partition (None before its first batch)."""
        with self._reading() as conn:
            return self._state(conn, self._pid(conn, stream, topic, partition), producer_id)

    def producer_states(self, stream: UUID, topic: str, partition: int
                        ) -> dict[int, ProducerState]:
        """Every idempotent producer's state on a partition (Kafka's DescribeProducers)."""
        with self._reading() as conn:
            return self._states(conn, self._pid(conn, stream, topic, partition))

    def watermarks(self, stream: UUID, topic: str) -> dict[int, tuple[int, int]]:
        """partition -> (low, high): earliest retained offset, next offset."""
        with self._reading() as conn:
            rows = self._all(conn, WATERMARKS, (self._key(stream), topic))
        if not rows:
            raise UnknownTopic(f"topic {topic!r} does not exist in stream {stream}")
        return {p: (low, high) for p, low, high in rows}

    def partition_stats(self, stream: UUID, topic: str) -> list[PartitionStats]:
        with self._reading() as conn:
            rows = self._all(conn, PARTITION_STATS, (self._key(stream), topic))
        return partition_stats_from(rows, topic)

    def ends_of(self, streams: Sequence[UUID]) -> dict[tuple[UUID, str, int], tuple[int, int]]:
        """(stream, topic, partition) -> (low, high) of every partition of `streams` that ever
        held a message (an absent one is empty: 0, 0); a few queries for any number of
        streams (chunks within SQLite's bound variables)."""
        ends = {}
        with self._reading() as conn:
            for at in range(0, len(streams), ENDS_CHUNK):
                chunk = streams[at:at + ENDS_CHUNK]
                statement = STREAMS_ENDS.format(", ".join(["%s"] * len(chunk)))
                for s, topic, p, low, high in self._all(conn, statement,
                                                        [self._key(x) for x in chunk]):
                    stream = UUID(bytes=s) if isinstance(s, bytes) else UUID(str(s))
                    ends[(stream, topic, p)] = (low, high)
        return ends

    def logical_sizes(self) -> dict[UUID, int]:
        """Every stream's logicalsize (as `sizes` reports it), in one query."""
        with self._reading() as conn:
            rows = self._all(conn, LOGICAL_SIZES, ())
        return {UUID(bytes=s) if isinstance(s, bytes) else UUID(str(s)): int(n)
                for s, n in rows}

    def sizes(self, stream: UUID) -> dict:
        """{"logicalsize", "physicalsize", "numtopics"}, as maprcli stream info reports.
        logicalsize: maintained counters of key+value+header bytes. physicalsize: the store's
        bytes on disk (`_disk`), apportioned to the stream by its share of the counted bytes
        and rows (each row weighed with ROW_OVERHEAD, the store's rough cost of a row beyond
        its payload, so streams of small messages are weighed fairly)."""
        with self._reading() as conn:
            topics, nbytes, nrows = self._one(conn, STREAM_SIZE, (self._key(stream),))
            all_bytes, all_rows, disk = self._disk(conn)
        weight = nbytes + self.ROW_OVERHEAD * nrows
        total = all_bytes + self.ROW_OVERHEAD * all_rows
        physical = disk * weight // total if total else 0
        return {"logicalsize": int(nbytes), "physicalsize": int(physical), "numtopics": topics}
