"""Retention, purge and truncation on a message store: the part of `MessageStore`
(storebase.py) that deletes a partition's prefix or suffix, written against the same hooks
(`_reading`, `_writing`, `_pid`, `_marks`, `_lock`, `_sql`) and each store's `_delete_range`."""

from __future__ import annotations

from typing import TYPE_CHECKING
from uuid import UUID

from replication.engine.batches import expire_end
from replication.engine.statements import (
    CUT_PREFIX,
    EXPIRE_CUT,
    HOLDING_STREAMS,
    STREAM_PIDS,
    TRUNCATE,
    TRUNCATE_CURSORS,
)
from replication.engine.storehooks import Connection, StoreHooks


class RetentionMethods(StoreHooks):
    """Mixed into MessageStore, which provides the hooks declared here."""

    if TYPE_CHECKING:
        def _marks(self, conn: Connection, pid: int) -> tuple[int, int]: ...
        def _lock(self, conn: Connection, pid: int) -> tuple[int, int]: ...
        def _delete_range(self, conn: Connection, pid: int, low: int,
                          end: int) -> tuple[int, int]: ...

    def holding_streams(self) -> set[UUID]:
        """The streams with a message in some partition, in one query."""
        with self._reading() as conn:
            rows = self._all(conn, HOLDING_STREAMS, ())
        return {UUID(bytes=s) if isinstance(s, bytes) else UUID(str(s)) for (s,) in rows}

    def expire(self, stream: UUID, *, before_ms: int, batch: int = 10_000,
               keep: frozenset[str] = frozenset()) -> int:
        """Delete up to `batch` messages older than before_ms (a prefix of each partition),
        but none of the topics in `keep` (compact-only ones); raises low watermarks, never
        touches next offsets. Callers loop until it returns 0."""
        with self._reading() as conn:
            pids = self._all(conn, STREAM_PIDS, (self._key(stream),))
        done = 0
        for pid, topic in pids:
            if topic in keep:
                continue
            if done >= batch:
                break
            done += self._expire_partition(pid, before_ms, batch - done)
        return done

    def _expire_partition(self, pid: int, before_ms: int, limit: int) -> int:
        # A bounded batch per transaction keeps the writers that wait on it waiting briefly.
        with self._writing() as conn:
            low = self._marks(conn, pid)[0]
            young, last = self._one(conn, EXPIRE_CUT, (before_ms, pid, low, limit))
            end = expire_end(young, last)
            if end is None or end <= low:
                return 0
            return self._cut_prefix(conn, pid, low, end)

    def trim(self, stream: UUID, topic: str, partition: int, end: int, *,
             batch: int = 10_000) -> int:
        """`stream purge`: delete up to `batch` of the partition's messages below `end` (a
        prefix, as retention removes); raises the low watermark, never touches the next
        offset. Callers loop until it returns 0."""
        with self._writing() as conn:
            pid = self._pid(conn, stream, topic, partition)
            low, nxt = self._marks(conn, pid)
            cut = min(end, nxt, low + batch)
            return self._cut_prefix(conn, pid, low, cut) if cut > low else 0

    def _cut_prefix(self, conn: Connection, pid: int, low: int, end: int) -> int:
        """Delete offsets [low, end) of a partition. The partitions row (which appenders lock)
        is updated last, just before the commit, so an appender waits at most for that
        commit, never for the delete."""
        count, size = self._delete_range(conn, pid, low, end)
        conn.execute(self._sql(CUT_PREFIX), (end, count, size, pid))
        return count

    def truncate(self, stream: UUID, topic: str, partition: int, offset: int) -> int:
        """diffstreams' repair: delete the partition's messages from `offset` on and move its
        next offset back there (replication and consumer cursors with it), in one
        transaction. Returns the messages deleted (0 when `offset` is at or past the end)."""
        with self._writing() as conn:
            pid = self._pid(conn, stream, topic, partition)
            nxt = self._lock(conn, pid)[1]
            if offset >= nxt:
                return 0
            count, size = self._delete_range(conn, pid, offset, nxt)
            conn.execute(self._sql(TRUNCATE), (offset, offset, count, size, pid))
            for statement in TRUNCATE_CURSORS:
                conn.execute(self._sql(statement), (offset, pid, offset))
        return count
