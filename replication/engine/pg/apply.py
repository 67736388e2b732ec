"""Replicated batches into the PostgreSQL store: the replica's apply rule (prefix of its
origin, DESIGN.md invariant 2) with the link's cursor advanced in the same transaction."""

from __future__ import annotations

import contextlib
from uuid import UUID

import psycopg

from replication.engine.batches import Ends, Trimmed, layout_apply, trim_runs
from replication.engine.pg.catalog import Catalog
from replication.engine.pg.pipe import Overtaken, PartitionGone, pipe_into, source_range
from replication.engine.pg.schema import ADVANCE, COPY_IN, COPY_TYPES, LINK_CURSORS, LOCK, START
from replication.engine.store import (
    Applied,
    Key,
    Message,
    Misordered,
    ReturnToOrigin,
    StoreError,
)
from replication.engine.storebase import MessageStore


class Applying(Catalog):
    """Replicated batches, as messages or piped from the source's database."""

    @staticmethod
    def _advance(cur: psycopg.Cursor, ends: Ends) -> None:
        cur.execute(ADVANCE, (list(ends), *map(list, zip(*ends.values(), strict=True))))

    def _apply(self, stream: UUID, runs: dict[Key, list[Message]], link: str,
               origin_low: dict[Key, int] | None) -> tuple[Trimmed, Ends]:
        with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            pids = self._apply_pids(conn, stream, runs)
            # The partitions' row locks serialise every applier and appender of a partition,
            # so the ends read here stay true until the commit.
            rows = cur.execute(LOCK, (sorted(pids.values()),)).fetchall()
            self._refuse_ended(conn, link)
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
        return trimmed, ends

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
        a Python object per row. None when the source is not a PostgresStore of this layout."""
        if not isinstance(source, Catalog) or source.DATA_TABLE != self.DATA_TABLE:
            return None
        key, known = (topic, partition), (source_stream, stream, topic, partition)
        # Within one store the rows are copied by the server, on the replica's connection
        # (holding a second connection of the same pool could exhaust it).
        with contextlib.nullcontext() if source is self else source._pool.connection() as src:
            spid = source._spids.get(known)
            if spid is not None:
                # Its origin was checked (a partition id's messages keep their topic's origin),
                # and the pipe's count of rows proves [start, end) all there: no look-up at
                # the source, one round trip fewer a batch. A failed attempt wrote nothing;
                # the look-up then decides, a refusal included, as it does for a first batch.
                try:
                    return self._apply_piped(src, spid, None, stream, key, start, end, link)
                except (Overtaken, Misordered):
                    source._spids.pop(known, None)
            for _ in range(3):
                spid, low, high = self._source_range(source, src, known, start)
                first, upto = max(start, low), min(end, high)
                if first >= upto:
                    return Applied({})
                try:
                    return self._apply_piped(src, spid, low, stream, key, first, upto, link)
                except Overtaken:
                    continue  # retention moved the source's low watermark: look again
        raise StoreError(f"{topic}:{partition}: retention kept overtaking the batch")

    def _source_range(self, source: Catalog, src: psycopg.Connection | None,
                      known: tuple[UUID, UUID, str, int], start: int) -> tuple[int, int, int]:
        """The source partition's id, low and next offset, refused if its messages originate
        in the replica's stream; the id is cached for the next batches once that was checked
        (no message at `start`, nothing to check)."""
        source_stream, stream, topic, partition = known
        with contextlib.nullcontext(src) if src else self._pool.connection() as conn:
            spid, low, high, origin = source_range(conn, source_stream, topic, partition, start)
        if origin is not None:
            if UUID(bytes=origin) == stream:
                raise ReturnToOrigin(
                    f"{topic}:{partition}: its messages originate in stream {stream}, and a "
                    "message is never replicated back to its origin")
            source._spids[known] = spid
        return spid, low, high

    def _apply_piped(
        self,
        src: psycopg.Connection | None,
        spid: int,
        low: int | None,
        stream: UUID,
        key: Key,
        first: int,
        upto: int,
        link: str,
    ) -> Applied:
        with self._pool.connection() as conn, conn.cursor() as cur:

            def pipe(pid: int) -> tuple[int, int, int]:
                return pipe_into(src, cur, (spid, pid), key, first, upto, low=low, link=link)

            try:
                nxt, rows, nbytes = pipe(self._pids.get((stream, *key))
                                         or self._piped_pid(conn, stream, key))
            except PartitionGone:  # its topic was deleted (and made again) since it was cached
                nxt, rows, nbytes = pipe(self._piped_pid(conn, stream, key))
        return Applied({key: nxt}, {key: rows}, nbytes)

    def _piped_pid(self, conn: psycopg.Connection, stream: UUID, key: Key) -> int:
        """The replica partition's id, made if it is new (invariant 7), and cached: ids never
        change, and looking it up was two of a piped batch's round trips."""
        pid = self._pids[(stream, *key)] = self._apply_pids(conn, stream, {key: []})[key]
        return pid
