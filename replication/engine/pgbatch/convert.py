"""Upgrade in place: a PostgreSQL store of the row layout becomes a batch store (issue 30).

Each partition's messages, in offset order, become record batches of at most BATCH messages
(a batch holds one origin and one producer, as every batch the store writes does), written
and their rows deleted in one transaction per partition: an interrupted conversion is run
again and goes on where it stopped. Offsets, timestamps, keys, values (null kept apart from
empty), headers and origins are kept, and so is everything beside the messages: watermarks,
consumer and replication cursors with their metadata, idempotent producers' sequences, ended
links. The partitions' byte counters are recounted as the batch layout counts them (records
sections). Run it with the store's writers stopped: it locks each partition while it moves it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import psycopg

from replication.engine.convertrows import batches_of_rows
from replication.engine.pg.schema import SCHEMA_LOCK, configure_connection
from replication.engine.pgbatch import schema as s

CHUNK = 50_000
ROWS = """
SELECT "offset", ts, key, value, headers, uuid_send(origin), producer FROM messages
WHERE pid = %s ORDER BY "offset"
"""
RECOUNT = """
UPDATE partitions SET bytes = (SELECT coalesce(sum(size), 0) FROM batches WHERE pid = %s)
WHERE id = %s
"""


@dataclass
class Converted:
    partitions: int = 0
    messages: int = 0
    batches: int = 0
    already: bool = False  # the store was a batch store before


def layout_of(conn: psycopg.Connection) -> tuple[bool, bool]:
    """(has a messages table, has a batches table)."""
    return conn.execute("SELECT to_regclass('messages') IS NOT NULL, "
                        "to_regclass('batches') IS NOT NULL").fetchone()


def convert_to_batches(url: str, *, progress: Callable[[int, int], None] | None = None,
                       ) -> Converted:
    """Convert the store at `url`; `progress(done, total)` after each partition."""
    done = Converted()
    with psycopg.connect(url, autocommit=True) as conn:
        configure_connection(conn)
        messages, batches = layout_of(conn)
        if not messages:
            done.already = batches
            return done
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
            conn.execute(s.SCHEMA)
            conn.execute(s.STORAGE_SET)
        pids = [r[0] for r in conn.execute("SELECT id FROM partitions ORDER BY id")]
        for n, pid in enumerate(pids, 1):
            moved, written = _convert_partition(conn, pid)
            done.partitions, done.messages, done.batches = n, done.messages + moved, \
                done.batches + written
            if progress is not None:
                progress(n, len(pids))
        conn.execute("DROP TABLE messages")
    return done


def _convert_partition(conn: psycopg.Connection, pid: int) -> tuple[int, int]:
    """One partition, in one transaction; its rows read CHUNK at a time (a server-side
    cursor: a partition may hold more messages than fit in memory)."""
    with conn.transaction():
        conn.execute("SELECT 1 FROM partitions WHERE id = %s FOR UPDATE", (pid,))
        rows = conn.cursor(name=f"convert_{pid}", binary=True)
        rows.execute(ROWS, (pid,))
        count, written = 0, 0
        while chunk := rows.fetchmany(CHUNK):
            with conn.cursor().copy(s.COPY_IN) as copy:
                copy.set_types(s.COPY_TYPES)
                for batch in batches_of_rows(chunk):
                    copy.write_row((pid, *batch))
                    count, written = count + batch.records, written + 1
        rows.close()
        conn.execute("DELETE FROM messages WHERE pid = %s", (pid,))
        conn.execute(RECOUNT, (pid, pid))
    return count, written
