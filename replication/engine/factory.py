"""A message store from its URL: PostgreSQL (production) or SQLite (the embedded default)."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import psycopg

from replication.engine.pg import PostgresStore, create_pg_database
from replication.engine.pgbatch import PgBatchStore
from replication.engine.sqlitebatch import SqliteBatchStore
from replication.engine.sqlitestore import SqliteStore
from replication.engine.store import StoreError
from replication.engine.storebase import MessageStore


def sqlite_path(url: str) -> Path:
    # django-environ's convention: sqlite:///relative/path, sqlite:////absolute/path.
    return Path(url.removeprefix("sqlite:///"))


# The layout of a new store (PostgreSQL or SQLite) when the caller names none (the Django processes
# pass STREAMGATE_STORE_LAYOUT): Kafka's record batches as sent (issue 30); a store made in rows
# keeps them until `manage.py convertstores` (docs/operations.md, "Message store layout").
default_layout = "batches"


def open_store(url: str, *, wait: float = 5.0, layout: str | None = None,
               fetch_cache: int = 0) -> MessageStore:
    """`wait`: seconds a call waits for a PostgreSQL store that does not answer. `layout`: for
    a database or file with no store yet, "rows" or "batches" (default_layout if None); an
    existing store keeps the layout its tables show. `fetch_cache`: bytes of recent batches a
    PostgreSQL batch store keeps for Kafka fetches (pgbatch/tailcache.py)."""
    if url.startswith(("postgresql://", "postgres://")):
        batches = _pg_layout(url, wait)
        if batches is None:
            batches = (layout or default_layout) == "batches"
        if batches:
            return PgBatchStore(url, wait=wait, fetch_cache=fetch_cache)
        return PostgresStore(url, wait=wait)
    if url.startswith("sqlite:///"):
        path = sqlite_path(url)
        batches = _sqlite_layout(path)
        if batches is None:
            batches = (layout or default_layout) == "batches"
        return (SqliteBatchStore if batches else SqliteStore)(path)
    raise StoreError(f"unsupported store URL {url!r}: use postgresql://... or sqlite:///path")


def _sqlite_layout(path: Path) -> bool | None:
    """Whether the file holds a batch store (None: no file, or no store in it yet). Looked at
    before the store opens it, since opening makes the tables."""
    if not path.exists():
        return None
    with closing(sqlite3.connect(path, timeout=60)) as conn:
        tables = {name for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' "
            "AND name IN ('batches', 'messages')")}
    return True if "batches" in tables else (False if "messages" in tables else None)


def _pg_layout(url: str, wait: float) -> bool | None:
    """Whether the database holds a batch store (None: no store yet, or not reachable now)."""
    try:
        with psycopg.connect(url, connect_timeout=max(2, round(wait))) as conn:
            batches, messages = conn.execute(
                "SELECT to_regclass('batches') IS NOT NULL, to_regclass('messages') IS NOT NULL"
            ).fetchone()
    except psycopg.OperationalError:
        return None
    return True if batches else (False if messages else None)


def create_database(url: str) -> None:
    """Create the store's database if missing (PostgreSQL) or its folder (SQLite)."""
    if url.startswith(("postgresql://", "postgres://")):
        create_pg_database(url)
    elif url.startswith("sqlite:///"):
        sqlite_path(url).parent.mkdir(parents=True, exist_ok=True)
    else:
        raise StoreError(f"unsupported store URL {url!r}: use postgresql://... or sqlite:///path")
