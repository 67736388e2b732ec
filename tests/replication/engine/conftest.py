"""Fixtures for the engine core: every store test runs on both implementations.

These tests need no Django database: PostgreSQL gets a scratch database per test module
(`sgstore_test_<pid>_<n>`, dropped at teardown) on the server DATABASE_URL names (or the local
default), SQLite a file in the test's tmp_path.
"""

import itertools
import os
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql

from replication.engine import MessageStore, create_database, open_store

_databases = itertools.count()


def _server_url() -> str:
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        url = "postgresql://postgres@127.0.0.1:5432/postgres"
    return url


def _with_db(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL database for the module, dropped afterwards."""
    name = f"sgstore_test_{os.getpid()}_{next(_databases)}"
    url = _with_db(_server_url(), name)
    create_database(url)
    yield url
    with psycopg.connect(_with_db(_server_url(), "postgres"), autocommit=True) as conn:
        drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
        conn.execute(drop.format(sql.Identifier(name)))


@pytest.fixture(params=["postgres", "sqlite"])
def store_url(request: pytest.FixtureRequest, tmp_path) -> str:
    if request.param == "postgres":
        return request.getfixturevalue("pg_url")
    return f"sqlite:///{tmp_path / 'cluster.sqlite3'}"


@pytest.fixture
def store(store_url: str) -> Iterator[MessageStore]:
    opened = open_store(store_url)
    yield opened
    opened.close()


@pytest.fixture
def stream() -> uuid.UUID:
    """A stream of its own per test: PostgreSQL tests of a module share one database."""
    return uuid.uuid4()
