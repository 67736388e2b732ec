"""Consumer cursors on a message store: the part of `MessageStore` (storebase.py) that commits,
fetches, deletes and lists them, written against the same hooks (`_reading`, `_writing`,
`_pid`, `_sql`). Each store's dialect-specific merge of replicated cursors stays in the
store (`merge_cursors`)."""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

from replication.engine.statements import (
    COMMIT_CURSOR,
    CURSOR_MARKS,
    CURSOR_STREAMS,
    CURSORS,
    DELETE_CURSORS,
    FETCH_CURSOR,
    STREAM_MARKS,
)
from replication.engine.store import Committed
from replication.engine.storehooks import Connection, StoreHooks


class CursorMethods(StoreHooks):
    """Mixed into MessageStore, which provides the hooks declared here."""

    def commit_cursor(
        self, stream: UUID, group: str, topic: str, partition: int, offset: int
    ) -> None:
        self.commit_cursors(stream, group, [(topic, partition, offset)])

    def commit_cursors(
        self, stream: UUID, group: str,
        cursors: Sequence[tuple[str, int, int] | tuple[str, int, int, str]
                          | tuple[str, int, int, str, int]],
    ) -> None:
        """A group's (topic, partition, offset[, metadata[, leader epoch]]) commits in one
        transaction (Kafka's OffsetCommit carries many partitions), each stored exactly as
        given."""
        with self._writing() as conn:
            self._commit_cursors(conn, stream, group, cursors)

    def _commit_cursors(self, conn: Connection, stream: UUID, group: str,
                        cursors: Sequence[tuple]) -> None:
        """commit_cursors in the caller's transaction (a transaction's markers' too)."""
        rows = [(self._pid(conn, stream, c.topic, c.partition), group, c.offset,
                 c.metadata.encode(), c.leader_epoch)
                for c in (Committed(group, *cursor) for cursor in cursors)]
        conn.cursor().executemany(self._sql(COMMIT_CURSOR), rows)

    def delete_cursors(
        self, stream: UUID, *, group: str | None = None, topic: str | None = None,
        partition: int | None = None,
    ) -> int:
        """Delete the committed cursors matching every filter given; returns how many."""
        with self._writing() as conn:
            return conn.execute(self._sql(DELETE_CURSORS), (
                group, group, self._key(stream), topic, topic, partition, partition)).rowcount

    def fetch_cursor(self, stream: UUID, group: str, topic: str, partition: int) -> int | None:
        with self._reading() as conn:
            row = self._one(conn, FETCH_CURSOR, (self._pid(conn, stream, topic, partition), group))
        return row[0] if row else None

    def stream_marks(self) -> dict[UUID, tuple]:
        """Per stream of the store, figures that change whenever its messages, their
        retention or its consumer cursors do; two queries, whatever the number of streams."""
        with self._reading() as conn:
            rows = [*self._all(conn, STREAM_MARKS, ()), *self._all(conn, CURSOR_MARKS, ())]
        marks: dict[UUID, tuple] = {}
        for stream, *figures in rows:
            key = UUID(bytes=stream) if isinstance(stream, bytes) else stream
            marks[key] = (*marks.get(key, ()), *figures)
        return marks

    def cursor_streams(self) -> set[UUID]:
        """The streams of the store with a committed consumer cursor, in one query."""
        with self._reading() as conn:
            rows = self._all(conn, CURSOR_STREAMS, ())
        return {UUID(bytes=s) if isinstance(s, bytes) else UUID(str(s)) for (s,) in rows}

    def cursors(self, stream: UUID) -> list[tuple[str, str, int, int]]:
        """Every consumer cursor of the stream as (group, topic, partition, offset)."""
        return [(c.group, c.topic, c.partition, c.offset) for c in self.commits(stream)]

    def commits(self, stream: UUID) -> list[Committed]:
        """Every consumer cursor of the stream with its commit's metadata (stored as bytes:
        a Kafka string may hold NUL, which PostgreSQL's text refuses) and leader epoch."""
        with self._reading() as conn:
            rows = self._all(conn, CURSORS, (self._key(stream),))
        return [Committed(g, t, p, o, bytes(m or b"").decode(), e) for g, t, p, o, m, e in rows]
