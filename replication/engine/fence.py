"""The placement fence of a message store in a cluster of several store groups (issue 33).

Every group's store keeps a row for every partition of the cluster's topics (so each store's
partition numbering stays dense, as its code expects), but only the group a partition is
placed on *holds* it. A trigger refuses every update of a partitions row the store does not
hold, and every write of messages (append, apply, retention, truncation) updates that row in
its own transaction, so a write sent to the wrong group by a stale placement cache rolls back
whole and fails with NOT_HELD in its message: the router reloads the placement and retries
(DESIGN.md invariant 12). Rows are made not held by default once the fence is installed: a
partition becomes writable in a group only when the control plane says it lives there.

Installed only on the stores of a cluster with a second group: a cluster of one group runs
exactly as before, with no trigger (removing the second-to-last group takes it off again).
"""

from __future__ import annotations

from collections.abc import Iterable
from uuid import UUID

from replication.engine.storebase import MessageStore

NOT_HELD = "partition not held by this store group"

_PG_INSTALL = f"""
ALTER TABLE partitions ADD COLUMN IF NOT EXISTS held boolean NOT NULL DEFAULT true;
ALTER TABLE partitions ALTER COLUMN held SET DEFAULT false;
UPDATE partitions SET held = true WHERE NOT held;
CREATE OR REPLACE FUNCTION sg_refuse_not_held() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '{NOT_HELD}: topic %, partition %', OLD.topic, OLD.partition
        USING ERRCODE = 'SG001';
END $$;
CREATE OR REPLACE TRIGGER sg_not_held BEFORE UPDATE ON partitions FOR EACH ROW
    WHEN (NOT OLD.held AND NOT NEW.held) EXECUTE FUNCTION sg_refuse_not_held();
"""
# SQLite cannot change a column's default: the trigger on INSERT marks new rows not held.
_SQLITE_INSTALL = (
    f"""CREATE TRIGGER IF NOT EXISTS sg_not_held BEFORE UPDATE ON partitions FOR EACH ROW
    WHEN NOT OLD.held AND NOT NEW.held BEGIN SELECT RAISE(ABORT, '{NOT_HELD}'); END""",
    """CREATE TRIGGER IF NOT EXISTS sg_new_not_held AFTER INSERT ON partitions FOR EACH ROW
    BEGIN UPDATE partitions SET held = 0 WHERE id = NEW.id; END""",
)
_HELD_COLUMN = "SELECT 1 FROM pragma_table_info('partitions') WHERE name = 'held'"
_SQLITE_INSTALLED = "SELECT 1 FROM sqlite_master WHERE type = 'trigger' AND name = 'sg_not_held'"


def install(store: MessageStore) -> None:
    """Add the fence (idempotent). Rows already there are held: a store that was a cluster's
    only group keeps every partition it has until the placement says otherwise."""
    with store._writing() as conn:
        if store.DIALECT == "sqlite":
            if conn.execute(_HELD_COLUMN).fetchone() is None:
                conn.execute("ALTER TABLE partitions ADD COLUMN held INTEGER NOT NULL DEFAULT 1")
            if conn.execute(_SQLITE_INSTALLED).fetchone() is None:
                conn.execute("UPDATE partitions SET held = 1 WHERE NOT held")
                for statement in _SQLITE_INSTALL:
                    conn.execute(statement)
        elif not _pg_installed(conn):
            conn.execute(_PG_INSTALL)


_PG_UNINSTALL = """
DROP TRIGGER IF EXISTS sg_not_held ON partitions;
ALTER TABLE partitions ALTER COLUMN held SET DEFAULT true;
UPDATE partitions SET held = true WHERE NOT held;
"""
_SQLITE_UNINSTALL = ("DROP TRIGGER IF EXISTS sg_not_held",
                     "DROP TRIGGER IF EXISTS sg_new_not_held",
                     "UPDATE partitions SET held = 1 WHERE NOT held")


def uninstall(store: MessageStore) -> None:
    """Take the fence off the store of a cluster back to one group: it has no router to mark
    new partitions held, so every row is its own again (idempotent)."""
    with store._writing() as conn:
        if store.DIALECT == "sqlite":
            if conn.execute(_HELD_COLUMN).fetchone() is not None:
                for statement in _SQLITE_UNINSTALL:
                    conn.execute(statement)
        elif _pg_installed(conn):
            conn.execute(_PG_UNINSTALL)


def _pg_installed(conn) -> bool:
    # Looked at first: ALTER TABLE waits for every appender of the store, even as a no-op.
    return conn.execute("SELECT 1 FROM pg_trigger WHERE tgname = 'sg_not_held'").fetchone() \
        is not None


_PG_SET_HELD = ("UPDATE partitions SET held = {want} WHERE held <> {want} AND stream = %s "
                "AND topic = %s")
_WANT = "(partition = ANY(%s))"
_WANT_NOT_MOVED = ("(partition = ANY(%s) AND NOT EXISTS (SELECT 1 FROM moved_out m "
                   "WHERE m.pid = partitions.id))")
_WANT_NOT_MOVED_AWAY = _WANT_NOT_MOVED[:-1] + (
    " AND NOT EXISTS (SELECT 1 FROM moved_away a WHERE a.pid = partitions.id "
    "AND a.version > %s))")


def set_held(store: MessageStore, stream: UUID, topic: str, held: Iterable[int],
             version: int | None = None) -> None:
    """Make exactly the partitions `held` of the topic writable in this store, as a placement
    of `version` says (None: whatever moved)."""
    mine = sorted(set(held))
    with store._writing() as conn:
        key = store._key(stream)
        if store.DIALECT == "sqlite":
            conn.execute("UPDATE partitions SET held = 0 WHERE stream = ? AND topic = ? "
                         "AND held", (key, topic))
            conn.executemany("UPDATE partitions SET held = 1 WHERE stream = ? AND topic = ? "
                             "AND partition = ?", [(key, topic, p) for p in mine])
            return
        out, away = conn.execute("SELECT to_regclass('moved_out'), to_regclass('moved_away')"
                                 ).fetchone()
        if out is None:
            conn.execute(_PG_SET_HELD.format(want=_WANT), (*[mine] * 2, key, topic))
        elif away is None or version is None:
            # A partition moved out of this store (engine/partitionmove.py) is never held
            # here again, whatever a stale placement says, until the move is finished or
            # undone. Looked at in the update itself: a cut-over committing between a look
            # and the update would find its partition held again at its source, in the
            # placement's eyes still its home, and writers would follow.
            conn.execute(_PG_SET_HELD.format(want=_WANT_NOT_MOVED), (*[mine] * 2, key, topic))
        else:
            # Nor, once cleaned up here, by a placement older than the move (MOVED_AWAY).
            conn.execute(_PG_SET_HELD.format(want=_WANT_NOT_MOVED_AWAY),
                         (*[mine, version] * 2, key, topic))


def held(store: MessageStore, stream: UUID, topic: str) -> list[int]:
    """The partitions of the topic this store holds (all of them before the fence)."""
    with store._reading() as conn:
        if not _has_column(store, conn):
            return [p for (p,) in conn.execute(
                store._sql("SELECT partition FROM partitions WHERE stream = %s AND topic = %s "
                           "ORDER BY partition"), (store._key(stream), topic)).fetchall()]
        return [p for (p,) in conn.execute(store._sql(
            "SELECT partition FROM partitions WHERE stream = %s AND topic = %s AND held "
            "ORDER BY partition"), (store._key(stream), topic)).fetchall()]


def _has_column(store: MessageStore, conn) -> bool:
    if store.DIALECT == "sqlite":
        return conn.execute(_HELD_COLUMN).fetchone() is not None
    return conn.execute("SELECT 1 FROM information_schema.columns WHERE table_schema = "
                        "current_schema() AND table_name = 'partitions' AND column_name = 'held'"
                        ).fetchone() is not None


def catalog(store: MessageStore) -> list[tuple[UUID, str, int]]:
    """(stream, topic, partitions) of every topic the store has rows for."""
    with store._reading() as conn:
        rows = conn.execute("SELECT stream, topic, max(partition) + 1 FROM partitions "
                            "GROUP BY stream, topic ORDER BY stream, topic").fetchall()
    return [(s if isinstance(s, UUID) else UUID(bytes=s), t, n) for s, t, n in rows]


def held_parts(store: MessageStore) -> list[tuple[UUID, str, int, int]]:
    """(stream, topic, partition, logical bytes) of every partition the store holds."""
    with store._reading() as conn:
        where = " WHERE held" if _has_column(store, conn) else ""
        rows = conn.execute(f"SELECT stream, topic, partition, bytes FROM partitions{where} "
                            "ORDER BY stream, topic, partition").fetchall()
    return [(s if isinstance(s, UUID) else UUID(bytes=s), t, p, int(b)) for s, t, p, b in rows]


def load(store: MessageStore) -> tuple[int, int, int]:
    """(logical bytes, partitions, messages ever written) of what the store holds: what
    placement weighs a group by, and (sampled over time) its write rate."""
    with store._reading() as conn:
        column = _has_column(store, conn)
        where = " WHERE held" if column else ""
        nbytes, count, written = conn.execute(
            "SELECT coalesce(sum(bytes), 0), count(*), coalesce(sum(next_offset), 0) "
            f"FROM partitions{where}").fetchone()
    return int(nbytes), int(count), int(written)


def is_not_held(err: BaseException) -> bool:
    return NOT_HELD in str(err)
