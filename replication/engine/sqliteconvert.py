"""Upgrade in place (issue 30): a SQLite store of the row layout (the embedded default's)
becomes a batch store, as pgbatch/convert.py converts PostgreSQL's.

An embedded store is one file on one machine: the whole conversion is one transaction under
the file's write lock (BEGIN IMMEDIATE), so it is done or not done, never half, and the
processes sharing the file wait for it. Everything beside the messages (watermarks, consumer
and replication cursors, producers' sequences, ended links) is in the tables both layouts
share and stays as it is; the partitions' byte counters are recounted as the batch layout
counts them (records sections)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

from replication.engine.convertrows import batches_of_rows
from replication.engine.pgbatch.convert import Converted
from replication.engine.sqlitebatch import BATCHES, INSERT

ROWS = ('SELECT "offset", ts, key, value, headers, origin, producer FROM messages '
        'WHERE pid = ? ORDER BY "offset"')
RECOUNT = ("UPDATE partitions SET bytes = (SELECT coalesce(sum(size), 0) FROM batches "
           "WHERE pid = ?) WHERE id = ?")


def convert_sqlite_to_batches(path: Path | str, *,
                              progress: Callable[[int, int], None] | None = None) -> Converted:
    """Convert the store in the file at `path`; `progress(done, total)` after each partition."""
    done = Converted()
    with closing(sqlite3.connect(path, timeout=60, isolation_level=None)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        try:
            tables = {name for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
            if "messages" not in tables:
                done.already = "batches" in tables
                conn.execute("ROLLBACK")
                return done
            conn.execute(BATCHES)
            pids = [pid for (pid,) in conn.execute("SELECT id FROM partitions ORDER BY id")]
            for n, pid in enumerate(pids, 1):
                for batch in batches_of_rows(conn.execute(ROWS, (pid,)).fetchall()):
                    conn.execute(INSERT, (pid, *batch))
                    done.messages, done.batches = done.messages + batch.records, done.batches + 1
                conn.execute(RECOUNT, (pid, pid))
                done.partitions = n
                if progress is not None:
                    progress(n, len(pids))
            conn.execute("DROP TABLE messages")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    return done
