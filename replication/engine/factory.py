"""A message store from its URL: PostgreSQL (production) or SQLite (the embedded default)."""

from __future__ import annotations

from pathlib import Path

from replication.engine.pg import PostgresStore, create_pg_database
from replication.engine.sqlitestore import SqliteStore
from replication.engine.store import StoreError
from replication.engine.storebase import MessageStore


def _sqlite_path(url: str) -> Path:
    # django-environ's convention: sqlite:///relative/path, sqlite:////absolute/path.
    return Path(url.removeprefix("sqlite:///"))


def open_store(url: str, *, wait: float = 5.0) -> MessageStore:
    """`wait`: seconds a call waits for a PostgreSQL store that does not answer."""
    if url.startswith(("postgresql://", "postgres://")):
        return PostgresStore(url, wait=wait)
    if url.startswith("sqlite:///"):
        return SqliteStore(_sqlite_path(url))
    raise StoreError(f"unsupported store URL {url!r}: use postgresql://... or sqlite:///path")


def create_database(url: str) -> None:
    """Create the store's database if missing (PostgreSQL) or its folder (SQLite)."""
    if url.startswith(("postgresql://", "postgres://")):
        create_pg_database(url)
    elif url.startswith("sqlite:///"):
        _sqlite_path(url).parent.mkdir(parents=True, exist_ok=True)
    else:
        raise StoreError(f"unsupported store URL {url!r}: use postgresql://... or sqlite:///path")
