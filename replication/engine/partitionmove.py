"""Moving one partition's history between two message stores of a cluster (issue 33): the
engine half of `stream topic partition move` (replication/services/partitionmove.py has the
workflow and its crash-safety argument).

Everything of a partition is keyed by its partitions row's id (`pid`) in each store: the
messages (a batch a row, or a message a row), the counters of the row itself (next and low
offsets, rows, bytes), consumer cursors, idempotent producers' sequences, transaction ranges,
the compaction state and replication cursors. The history is copied by offset in chunks with
binary COPY piped from one server to the other while producers go on; `cut_over` copies the
tail and the small tables under the source row's lock (FOR UPDATE: every write of the
partition updates that row), so nothing lands at the source between the copy and the switch.

The target row is not held (the placement fence, fence.py) the whole time, so nothing but
the move writes there; its counters are set through a held=true/held=false pair of updates in
one transaction, which the fence's trigger allows and no other session can see. PostgreSQL
only: the SQLite store is one file for one server, and a move is refused there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from uuid import UUID

import psycopg
from psycopg import sql

from replication.engine.fence import NOT_HELD
from replication.engine.store import StoreError
from replication.engine.storebase import MessageStore

# Tables of a partition's small state, every row keyed by its pid.
STATE_TABLES = ("consumer_cursors", "producer_sequences", "replication_cursors", "txn_ranges",
                "compaction_state")
ROW_COUNTERS = ("next_offset", "low_offset", "rows", "bytes")
MOVE_LOCK = 0x5367_4D76  # advisory lock key space: a partition's move, by its pid
DDL_LOCK = 0x5367_4D44  # the moves' tables and triggers made in a store, one session at a time
CHUNK_OFFSETS = 200_000
# (offsets copied, offsets known): a move's copy reports each chunk (copy_history).
Progress = Callable[[int, int], None]
CATCH_UP_PASSES = 4
SMALL_TAIL = 5_000  # offsets: what the cut-over copies with the partition's writers waiting
# A partition moved out of a store, not yet cleaned up there: fence.set_held never holds it
# again (a router's repair from a placement that still names this store would otherwise undo
# the cut-over, see the service's docstring), and a retried move finds what was left.
MOVED_OUT = """
CREATE TABLE IF NOT EXISTS moved_out (
    pid integer PRIMARY KEY,
    target text NOT NULL
)
"""
# A partition moved out of a store and cleaned up there: the placement version its clean-up
# saw (at or after the move's switch). fence.set_held never holds it here again for a view
# older than that: a repair from a placement read before the move still names this store.
MOVED_AWAY = """
CREATE TABLE IF NOT EXISTS moved_away (
    pid integer PRIMARY KEY,
    version bigint NOT NULL
)
"""


@contextmanager
def move_lock(url: str, pid: int) -> Iterator[bool]:
    """Whether this process moves the partition (`pid` in the store at `url`) alone: a session
    advisory lock on a connection of its own, let go when the block ends or the process dies."""
    with psycopg.connect(url, autocommit=True) as conn:
        yield bool(conn.execute("SELECT pg_try_advisory_lock(%s, %s)", (MOVE_LOCK, pid)
                                ).fetchone()[0])

# A consumer's offset commit writes no partitions row, so the placement fence alone would let
# a process with a stale placement commit to the group a partition just left (and the commit
# be lost with its copy). This refuses a cursor write to a partition the store does not hold;
# FOR KEY SHARE waits for a cut-over's lock of the row (FOR UPDATE) but not for appends.
CURSOR_FENCE = f"""
CREATE OR REPLACE FUNCTION sg_cursor_not_held() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT (SELECT held FROM partitions WHERE id = NEW.pid FOR KEY SHARE) THEN
        RAISE EXCEPTION '{NOT_HELD}: consumer cursor of partition id %', NEW.pid
            USING ERRCODE = 'SG001';
    END IF;
    RETURN NEW;
END $$;
CREATE OR REPLACE TRIGGER sg_cursor_not_held BEFORE INSERT OR UPDATE ON consumer_cursors
    FOR EACH ROW EXECUTE FUNCTION sg_cursor_not_held();
"""


# A cut-back (store truncate: a failback's, diffstreams' repair) of a partition while it moves
# rewrites offsets the bulk copy took already. It moves the row's next offset back, which no
# other write does: this notes the lowest one per partition, and the cut-over drops what the
# target holds from there and copies it again.
CUT_NOTE = """
CREATE TABLE IF NOT EXISTS cut_back (
    pid integer PRIMARY KEY,
    next_offset bigint NOT NULL
);
CREATE OR REPLACE FUNCTION sg_note_cut_back() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO cut_back (pid, next_offset) VALUES (NEW.id, NEW.next_offset)
        ON CONFLICT (pid) DO UPDATE SET next_offset = least(cut_back.next_offset,
                                                            excluded.next_offset);
    RETURN NEW;
END $$;
CREATE OR REPLACE TRIGGER sg_note_cut_back AFTER UPDATE OF next_offset ON partitions
    FOR EACH ROW WHEN (NEW.next_offset < OLD.next_offset) EXECUTE FUNCTION sg_note_cut_back();
"""


def check_store(store: MessageStore) -> None:
    if store.DIALECT != "postgresql":
        raise StoreError("moving a partition needs PostgreSQL store groups: an embedded (SQLite) "
                         "store is one server, so there is nowhere to move to")


def check_pair(source: MessageStore, target: MessageStore) -> None:
    if source.KEEPS_BATCHES != target.KEEPS_BATCHES:
        layouts = ["batches" if s.KEEPS_BATCHES else "rows" for s in (source, target)]
        raise StoreError(f"the groups keep different store layouts ({layouts[0]} at the source, "
                         f"{layouts[1]} at the target): convert the row-layout store to "
                         "batches first (manage.py convertstores), then move")


def ensure_marker_table(store: MessageStore) -> None:
    """The marker table, the cursors' fence and the cut-back note, once per store (looked at
    first: DDL waits for every transaction on the tables). Two moves starting at once take
    turns: CREATE ... IF NOT EXISTS does not wait for another session's uncommitted one, and
    fails on the catalog instead."""
    with store._writing() as conn:
        conn.execute("SELECT pg_advisory_xact_lock(%s, 0)", (DDL_LOCK,))
        for table, ddl in (("moved_out", MOVED_OUT), ("moved_away", MOVED_AWAY)):
            if conn.execute("SELECT to_regclass(%s)", (table,)).fetchone()[0] is None:
                conn.execute(ddl)
        for trigger, ddl in (("sg_cursor_not_held", CURSOR_FENCE),
                             ("sg_note_cut_back", CUT_NOTE)):
            if conn.execute("SELECT 1 FROM pg_trigger WHERE tgname = %s", (trigger,)
                            ).fetchone() is None:
                conn.execute(ddl)


def moved_out(store: MessageStore, pid: int) -> str | None:
    """The group the partition was moved to from this store, while not cleaned up here."""
    with store._reading() as conn:
        if conn.execute("SELECT to_regclass('moved_out')").fetchone()[0] is None:
            return None
        row = conn.execute("SELECT target FROM moved_out WHERE pid = %s", (pid,)).fetchone()
    return row[0] if row else None


def marked(store: MessageStore) -> list[tuple[int, UUID, str, int]]:
    """(pid, stream, topic, partition) of every partition moved out of the store and not yet
    cleaned up there."""
    with store._reading() as conn:
        if conn.execute("SELECT to_regclass('moved_out')").fetchone()[0] is None:
            return []
        rows = conn.execute("SELECT m.pid, p.stream, p.topic, p.partition FROM moved_out m "
                            "JOIN partitions p ON p.id = m.pid ORDER BY m.pid").fetchall()
    return [(pid, s if isinstance(s, UUID) else UUID(bytes=s), t, p) for pid, s, t, p in rows]


def pid_of(store: MessageStore, stream: UUID, topic: str, partition: int) -> int:
    with store._reading() as conn:
        return store._pid(conn, stream, topic, partition)


def is_held(store: MessageStore, pid: int) -> bool:
    with store._reading() as conn:
        return bool(conn.execute("SELECT held FROM partitions WHERE id = %s", (pid,)).fetchone()[0])


def marks(store: MessageStore, pid: int) -> tuple[int, int]:
    """(low, next offset) of the partition as its row says."""
    with store._reading() as conn:
        low, nxt = conn.execute("SELECT low_offset, next_offset FROM partitions WHERE id = %s",
                                (pid,)).fetchone()
    return int(low), int(nxt)


def size(store: MessageStore, pid: int) -> int:
    """The partition's bytes as its row counts them."""
    with store._reading() as conn:
        return int(conn.execute("SELECT bytes FROM partitions WHERE id = %s", (pid,)
                                ).fetchone()[0])


def key_column(store: MessageStore) -> str:
    return "last_offset" if store.KEEPS_BATCHES else "offset"


def _columns(conn: psycopg.Connection, table: str) -> list[str]:
    return [c for (c,) in conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = "
        "current_schema() AND table_name = %s ORDER BY ordinal_position", (table,)).fetchall()
        if c != "pid"]


def wipe(conn: psycopg.Connection, store: MessageStore, pid: int) -> None:
    """Every row of the partition in this store, and its counters back to an empty row's (the
    row itself stays: each store keeps a row for every partition of the cluster)."""
    for table in (store.DATA_TABLE, *_state_tables(conn)):  # type: ignore[attr-defined]
        conn.execute(sql.SQL("DELETE FROM {} WHERE pid = %s").format(sql.Identifier(table)),
                     (pid,))
    _set_counters(conn, pid, dict.fromkeys(ROW_COUNTERS, 0))


def _set_counters(conn: psycopg.Connection, pid: int, values: dict[str, int]) -> None:
    """Set a not-held row's counters: held for one statement, in this transaction only (the
    fence refuses an update that leaves a not-held row not held)."""
    held = conn.execute("SELECT held FROM partitions WHERE id = %s FOR UPDATE",
                        (pid,)).fetchone()[0]
    assigns = sql.SQL(", ").join(sql.SQL("{} = %s").format(sql.Identifier(c)) for c in values)
    conn.execute(sql.SQL("UPDATE partitions SET held = true, {} WHERE id = %s").format(assigns),
                 (*values.values(), pid))
    if not held:
        conn.execute("UPDATE partitions SET held = false WHERE id = %s", (pid,))


def prepare(target: MessageStore, tpid: int) -> None:
    """The target row emptied of anything an interrupted move left (it is not held: nothing
    else writes there)."""
    with target._writing() as conn:
        wipe(conn, target, tpid)
        if conn.execute("SELECT to_regclass('moved_out')").fetchone()[0] is not None:
            conn.execute("DELETE FROM moved_out WHERE pid = %s", (tpid,))


def watch_cut_backs(source: MessageStore, spid: int) -> None:
    """Before the bulk copy: the source partition's cut-back note cleared, so the cut-over
    sees the cut-backs made from here on (CUT_NOTE)."""
    with source._writing() as conn:
        conn.execute("DELETE FROM cut_back WHERE pid = %s", (spid,))


def copy_range(source: MessageStore, target: MessageStore, spid: int, tpid: int, start: int,
               end: int, *, source_conn: psycopg.Connection | None = None,
               target_conn: psycopg.Connection | None = None) -> None:
    """Pipe the messages keyed in [start, end) from the source partition to the target one
    (binary COPY out, binary COPY in: no row is decoded)."""
    with _conn(source, source_conn, write=False) as src, _conn(target, target_conn) as dst:
        pipe_range(src, dst, source.DATA_TABLE, key_column(source),  # type: ignore[attr-defined]
                   spid, tpid, start, end)


def pipe_range(src: psycopg.Connection, dst: psycopg.Connection, table: str, key: str,
               spid: int, tpid: int, start: int, end: int) -> None:
    """copy_range on two open connections (a Spark task's, workers/spark/movecopy.py)."""
    columns = _columns(src, table)
    names = sql.SQL(", ").join(map(sql.Identifier, columns))
    out = sql.SQL("COPY (SELECT {tpid}::int4, {names} FROM {table} WHERE pid = {spid} AND "
                  "{key} >= {start} AND {key} < {end} ORDER BY {key}) TO STDOUT "
                  "(FORMAT BINARY)").format(
        tpid=sql.Literal(tpid), names=names, table=sql.Identifier(table),
        spid=sql.Literal(spid), key=sql.Identifier(key), start=sql.Literal(start),
        end=sql.Literal(end))
    into = sql.SQL("COPY {table} (pid, {names}) FROM STDIN (FORMAT BINARY)").format(
        table=sql.Identifier(table), names=names)
    with src.cursor().copy(out) as reading, dst.cursor().copy(into) as writing:
        for data in reading:
            writing.write(data)


def recopy_range(src: psycopg.Connection, dst: psycopg.Connection, table: str, key: str,
                 spid: int, tpid: int, start: int, end: int) -> None:
    """pipe_range idempotent by offset range: in one target transaction, whatever an earlier
    attempt of the same range left is deleted, then the range is piped again (a retried Spark
    task never doubles a row). The target row is not held, so nothing else writes there."""
    with dst.transaction():
        dst.execute(sql.SQL("DELETE FROM {} WHERE pid = %s AND {} >= %s AND {} < %s").format(
            sql.Identifier(table), sql.Identifier(key), sql.Identifier(key)),
            (tpid, start, end))
        pipe_range(src, dst, table, key, spid, tpid, start, end)


class _conn:
    """A given connection as is, or one of the store's for the block."""

    def __init__(self, store: MessageStore, given: Any, *, write: bool = True) -> None:
        self._given = given
        self._cm = None if given is not None else (store._writing() if write
                                                   else store._reading())

    def __enter__(self) -> psycopg.Connection:
        return self._given if self._cm is None else self._cm.__enter__()

    def __exit__(self, *exc: Any) -> None:
        if self._cm is not None:
            self._cm.__exit__(*exc)


def copy_history(source: MessageStore, target: MessageStore, spid: int, tpid: int,
                 chunk: int | None = None, bulk: Callable[[int, int], None] | None = None,
                 progress: Progress | None = None) -> int:
    """The bulk copy, without any lock: every message below the source's next offset, a chunk
    of offsets a transaction, then again what producers added meanwhile while that is more
    than a small tail (the cut-over copies the rest with producers waiting). `bulk(start,
    end)`, when given, copies the first pass instead (a Spark job: workers/spark/movecopy.py).
    `progress(done, total)` is called after each chunk (and after `bulk`) with the offsets
    copied and the offsets known so far, from the partition's low offset on; it may sleep (a
    throttle): no lock is held between chunks. Returns the offset copied up to."""
    chunk = chunk or CHUNK_OFFSETS
    low, end = marks(source, spid)
    start = low
    for n in range(CATCH_UP_PASSES):
        if n == 0 and bulk is not None and end > start:
            bulk(start, end)
            _report(progress, end - low, end - low)
        else:
            for at in range(start, end, chunk):
                copy_range(source, target, spid, tpid, at, min(at + chunk, end))
                _report(progress, min(at + chunk, end) - low, end - low)
        start, end = end, marks(source, spid)[1]
        if end - start <= SMALL_TAIL:
            break
    return start


def _report(progress: Progress | None, done: int, total: int) -> None:
    if progress is not None:
        progress(done, total)


def _state_rows(conn: psycopg.Connection, table: str, pid: int) -> tuple[list[str], list[tuple]]:
    columns = _columns(conn, table)
    names = sql.SQL(", ").join(map(sql.Identifier, columns))
    rows = conn.execute(sql.SQL("SELECT {} FROM {} WHERE pid = %s").format(
        names, sql.Identifier(table)), (pid,)).fetchall()
    return columns, rows


def _copy_state(src: psycopg.Connection, dst: psycopg.Connection, spid: int,
                tpid: int) -> None:
    for table in _state_tables(src):
        columns, rows = _state_rows(src, table, spid)
        dst.execute(sql.SQL("DELETE FROM {} WHERE pid = %s").format(sql.Identifier(table)),
                    (tpid,))
        if not rows:
            continue
        names = sql.SQL(", ").join(map(sql.Identifier, columns))
        marks_ = sql.SQL(", ").join(sql.Placeholder() * (len(columns) + 1))
        with dst.cursor() as cur:
            cur.executemany(sql.SQL("INSERT INTO {} (pid, {}) VALUES ({})").format(
                sql.Identifier(table), names, marks_), [(tpid, *row) for row in rows])


def _state_tables(conn: psycopg.Connection) -> list[str]:
    """STATE_TABLES the store has (the row layout keeps no transactions or compaction)."""
    return [t for t in STATE_TABLES
            if conn.execute("SELECT to_regclass(%s)", (t,)).fetchone()[0] is not None]


def _compaction_seen(conn: psycopg.Connection, pid: int) -> tuple | None:
    if "compaction_state" not in _state_tables(conn):
        return None
    return conn.execute("SELECT runs, cleaned_end FROM compaction_state WHERE pid = %s",
                        (pid,)).fetchone()


def compaction_mark(store: MessageStore, pid: int) -> tuple | None:
    with store._reading() as conn:
        return _compaction_seen(conn, pid)


def cut_over(source: MessageStore, target: MessageStore, spid: int, tpid: int, *,
             copied_to: int, compaction: tuple | None, target_name: str) -> int:
    """Under the source row's lock: copy the tail and every small table, set the target row's
    counters (still not held), commit there; then mark the source row moved out and not held
    and commit. Returns the messages the partition holds (now at the target). Writers of the
    partition wait on the lock, then find it not held (NOT_HELD: the router looks at the
    placement again)."""
    key = key_column(source)
    table = source.DATA_TABLE  # type: ignore[attr-defined]
    with source._writing() as src:
        counters = dict(zip(ROW_COUNTERS, src.execute(
            "SELECT next_offset, low_offset, rows, bytes FROM partitions WHERE id = %s FOR "
            "UPDATE", (spid,)).fetchone(), strict=True))
        with target._writing() as dst:
            # Held within this transaction only (cursors' fence, CURSOR_FENCE), not held again
            # before its commit.
            dst.execute("UPDATE partitions SET held = true WHERE id = %s", (tpid,))
            if _compaction_seen(src, spid) != compaction:  # batches rewritten since copied
                dst.execute(sql.SQL("DELETE FROM {} WHERE pid = %s").format(
                    sql.Identifier(table)), (tpid,))
                copied_to = counters["low_offset"]
            copied_to = _after_cut_back(src, dst, table, key, spid, tpid, copied_to)
            # Retention meanwhile removed a prefix the bulk copy took.
            dst.execute(sql.SQL("DELETE FROM {} WHERE pid = %s AND {} < %s").format(
                sql.Identifier(table), sql.Identifier(key)), (tpid, counters["low_offset"]))
            copy_range(source, target, spid, tpid, max(copied_to, counters["low_offset"]),
                       counters["next_offset"], source_conn=src, target_conn=dst)
            _copy_state(src, dst, spid, tpid)
            _set_counters(dst, tpid, counters)
            dst.execute("UPDATE partitions SET held = false WHERE id = %s", (tpid,))
        src.execute("INSERT INTO moved_out (pid, target) VALUES (%s, %s) ON CONFLICT (pid) DO "
                    "UPDATE SET target = excluded.target", (spid, target_name))
        src.execute("UPDATE partitions SET held = false WHERE id = %s", (spid,))
    return int(counters["rows"])


def _after_cut_back(src: psycopg.Connection, dst: psycopg.Connection, table: str, key: str,
                    spid: int, tpid: int, copied_to: int) -> int:
    """Where the cut-over copies on from when the source was cut back since `prepare`: the
    target's messages from the lowest offset it was cut back to are dropped (a batch holding
    it was written again, shorter), and the copy goes on after the last one left."""
    row = src.execute("SELECT next_offset FROM cut_back WHERE pid = %s", (spid,)).fetchone()
    if row is None or row[0] >= copied_to:
        return copied_to
    dst.execute(sql.SQL("DELETE FROM {} WHERE pid = %s AND {} >= %s").format(
        sql.Identifier(table), sql.Identifier(key)), (tpid, row[0]))
    last = dst.execute(sql.SQL("SELECT max({}) FROM {} WHERE pid = %s").format(
        sql.Identifier(key), sql.Identifier(table)), (tpid,)).fetchone()[0]
    return 0 if last is None else int(last) + 1


def unmark(store: MessageStore, pid: int) -> None:
    """Undo a cut-over whose placement was never switched: the store may hold it again."""
    with store._writing() as conn:
        if conn.execute("SELECT to_regclass('moved_out')").fetchone()[0] is not None:
            conn.execute("DELETE FROM moved_out WHERE pid = %s", (pid,))


def clean_up(store: MessageStore, pid: int, version: int) -> None:
    """Drop what a finished move left at its source (the row stays, empty and not held);
    `version`: a placement version at or after the move's switch (MOVED_AWAY)."""
    with store._writing() as conn:
        if conn.execute("SELECT held FROM partitions WHERE id = %s FOR UPDATE",
                        (pid,)).fetchone()[0]:
            raise StoreError("refusing to clean up a partition its store holds")
        wipe(conn, store, pid)
        conn.execute("DELETE FROM moved_out WHERE pid = %s", (pid,))
        conn.execute("INSERT INTO moved_away (pid, version) VALUES (%s, %s) ON CONFLICT (pid) "
                     "DO UPDATE SET version = greatest(moved_away.version, excluded.version)",
                     (pid, version))
