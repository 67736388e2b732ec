"""Fixtures for the engine core: every store test runs on both databases, in both layouts.

These tests need no Django database: PostgreSQL gets scratch databases per test module
(`sgstore_test_<pid>_<n>`, dropped at teardown) on the server DATABASE_URL names (or the local
default), SQLite files in the test's tmp_path. Replication tests get a `Net`: streams spread
over two clusters' stores, with the control plane's record of each topic's origin.
"""

import contextlib
import itertools
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql

from replication.engine import MessageStore, Record, UnknownTopic, create_database, open_store
from replication.engine.checker import Report, check_replica
from replication.engine.replicator import (
    MAX_BYTES,
    MAX_MESSAGES,
    BatchSpec,
    apply_spec,
    plan_batches,
)
from replication.engine.store import Key, Misordered

_databases = itertools.count()


def wait_for_session(url: str, condition: str, never: str, *, timeout: float = 30,
                     every: float = 0.005) -> None:
    """Poll pg_stat_activity of `url`'s database until a session matches `condition` (SQL
    over its columns); AssertionError(`never`) after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(url, autocommit=True) as probe:
        while time.monotonic() < deadline:
            if probe.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = "
                             f"current_database() AND {condition}").fetchone()[0]:
                return
            time.sleep(every)
    raise AssertionError(never)


def _server_url() -> str:
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        url = "postgresql://postgres@127.0.0.1:5432/postgres"
    return url


def _with_db(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


def _scratch_database(layout: str | None = "rows") -> Iterator[str]:
    """A database of its own holding an empty store of `layout` (none if None): the tests
    that name no layout are the row layout's, kept for conversion (batches are the default)."""
    name = f"sgstore_test_{os.getpid()}_{next(_databases)}"
    url = _with_db(_server_url(), name)
    create_database(url)
    if layout is not None:
        open_store(url, layout=layout).close()
    yield url
    with psycopg.connect(_with_db(_server_url(), "postgres"), autocommit=True) as conn:
        drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
        conn.execute(drop.format(sql.Identifier(name)))


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL database for the module, dropped afterwards."""
    yield from _scratch_database()


@pytest.fixture(scope="module")
def pg_url_b() -> Iterator[str]:
    """A second database for the module: another cluster's store, for replication tests."""
    yield from _scratch_database()


@pytest.fixture
def fresh_pg_url() -> Iterator[str]:
    """An empty database of the test's own, for tests that make a store of their own."""
    yield from _scratch_database(None)


@pytest.fixture(scope="module")
def pg_batch_url() -> Iterator[str]:
    """A fresh PostgreSQL database for the module holding a batch store (issue 30)."""
    yield from _scratch_database("batches")


@pytest.fixture
def sqlite_batch_url(tmp_path) -> str:
    """A SQLite file holding a batch store (issue 30), in the test's tmp_path."""
    url = f"sqlite:///{tmp_path / 'batches.sqlite3'}"
    open_store(url, layout="batches").close()
    return url


@pytest.fixture
def batch_net() -> Iterator["Net"]:
    """Streams spread over two clusters' batch stores, databases of the test's own."""
    for first in _scratch_database("batches"):
        for second in _scratch_database("batches"):
            yield from _open_net([first, second])


@pytest.fixture(params=["postgres", "postgres-batches", "sqlite", "sqlite-batches"])
def store_url(request: pytest.FixtureRequest, tmp_path) -> str:
    if request.param == "postgres":
        return request.getfixturevalue("pg_url")
    if request.param == "postgres-batches":
        return request.getfixturevalue("pg_batch_url")
    if request.param == "sqlite-batches":
        return request.getfixturevalue("sqlite_batch_url")
    return sqlite_rows(tmp_path / "cluster.sqlite3")


def sqlite_rows(path) -> str:
    """A SQLite file holding an empty row store."""
    url = f"sqlite:///{path}"
    open_store(url, layout="rows").close()
    return url


@pytest.fixture
def store(store_url: str) -> Iterator[MessageStore]:
    opened = open_store(store_url)
    yield opened
    opened.close()


@pytest.fixture
def stream() -> uuid.UUID:
    """A stream of its own per test: PostgreSQL tests of a module share one database."""
    return uuid.uuid4()


# --- replication: streams on several clusters' stores ------------------------------------------


@dataclass
class Net:
    """Streams, each on a store of its own cluster, and the control plane's record of each
    topic's origin stream. Produced offsets are remembered as acknowledged, for the checker."""

    urls: list[str]  # the clusters' store URLs; streams are spread over them in turn
    stores: dict[str, MessageStore] = field(default_factory=dict)  # by URL
    streams: dict[str, tuple[str, uuid.UUID]] = field(default_factory=dict)  # name -> (url, id)
    origins: dict[str, uuid.UUID] = field(default_factory=dict)  # topic -> origin stream
    acked: dict[str, dict[Key, set[int]]] = field(default_factory=dict)  # topic -> offsets

    def add(self, *names: str) -> None:
        for name in names:
            url = self.urls[len(self.streams) % len(self.urls)]
            if url not in self.stores:
                self.stores[url] = open_store(url)
            self.streams[name] = (url, uuid.uuid4())

    def url(self, name: str) -> str:
        return self.streams[name][0]

    def id(self, name: str) -> uuid.UUID:
        return self.streams[name][1]

    def store(self, name: str) -> MessageStore:
        return self.stores[self.url(name)]

    def produce(
        self, name: str, topic: str, count: int, *, partitions: int = 3, size: int = 40
    ) -> dict[Key, set[int]]:
        """`count` keyed records with headers (a producer id among them) and timestamps."""
        store, stream = self.store(name), self.id(name)
        assert self.origins.setdefault(topic, stream) == stream, "one origin per topic"
        store.ensure_topic(stream, topic, partitions)
        first = sum(len(offsets) for offsets in self.acked.get(topic, {}).values())
        records = [
            Record(
                value=os.urandom(size),
                key=b"key-%d" % (i % 97),
                headers=(("id", b"%s-%d" % (topic.encode(), i)), ("n", b"%d" % i)),
                timestamp_ms=1_700_000_000_000 + i,
            )
            for i in range(first, first + count)
        ]
        acked = self.acked.setdefault(topic, {})
        for partition, offset in store.append(stream, topic, records, origin=stream):
            acked.setdefault((topic, partition), set()).add(offset)
        return acked

    def topics(self, name: str) -> dict[str, uuid.UUID]:
        """The topics the stream holds, own and replicated, with their origins: all of them are
        replicated (invariant 7)."""
        held = {}
        for topic, origin in self.origins.items():
            with contextlib.suppress(UnknownTopic):
                self.store(name).watermarks(self.id(name), topic)
                held[topic] = origin
        return held

    def plan(self, src: str, dst: str, **kwargs) -> list[BatchSpec]:
        args = (self.store(src), self.id(src), self.store(dst), self.id(dst), self.topics(src))
        return plan_batches(*args, **kwargs)

    def pump(self, src: str, dst: str, *, max_messages: int = MAX_MESSAGES,
             max_bytes: int = MAX_BYTES, max_rounds: int = 1000) -> int:
        """Plan and apply until caught up (or max_rounds plans, when producers outpace it), as
        a replicator's plans and a gateway's applies do; return the messages applied. Raises
        Misordered when a round is refused and makes no progress: a gap nothing can fill, such
        as a lagging replica whose next messages expired at the source."""
        source, replica, total = self.store(src), self.store(dst), 0
        for _ in range(max_rounds):
            specs = plan_batches(source, self.id(src), replica, self.id(dst), self.topics(src),
                                 max_messages=max_messages, max_bytes=max_bytes)
            if not specs:
                break
            applied, refused, skip = 0, None, set()
            for spec in specs:
                if spec.key in skip:
                    continue  # a partition's later batches would be refused too: re-plan it
                try:
                    applied += apply_spec(source, replica, spec, link=f"{src}->{dst}",
                                          max_bytes=max_bytes).count
                except Misordered as error:
                    refused = error
                    skip.add(spec.key)
            total += applied
            if refused is not None and not applied:
                raise refused
        return total

    def check(self, origin: str, replica: str, **kwargs) -> Report:
        """Check the replica against the origin for every topic that originates there."""
        topics = [t for t, o in self.origins.items() if o == self.id(origin)]
        acked = {k: v for t in topics for k, v in self.acked.get(t, {}).items()}
        kwargs.setdefault("acknowledged", acked)
        args = (self.store(origin), self.id(origin), self.store(replica), self.id(replica))
        return check_replica(*args, topics, **kwargs)

    def assert_replica(self, origin: str, replica: str, **kwargs) -> Report:
        report = self.check(origin, replica, **kwargs)
        assert report.ok, report.summary()
        return report

    def close(self) -> None:
        for store in self.stores.values():
            store.close()


def _open_net(urls: list[str]) -> Iterator[Net]:
    net = Net(urls)
    yield net
    net.close()


@pytest.fixture(params=["postgres", "sqlite"])
def net(request: pytest.FixtureRequest, tmp_path) -> Iterator[Net]:
    """Streams spread over two clusters' stores, on PostgreSQL and on SQLite."""
    if request.param == "postgres":
        urls = [request.getfixturevalue("pg_url"), request.getfixturevalue("pg_url_b")]
    else:
        urls = [sqlite_rows(tmp_path / f"{name}.sqlite3") for name in ("east", "west", "north")]
    yield from _open_net(urls)


@pytest.fixture
def pg_net(pg_url: str, pg_url_b: str) -> Iterator[Net]:
    """Streams spread over two clusters' stores on PostgreSQL."""
    yield from _open_net([pg_url, pg_url_b])


@pytest.fixture
def fresh_pg_net(fresh_pg_url: str, pg_url_b: str) -> Iterator[Net]:
    """Like pg_net, its first store on a database of the test's own."""
    open_store(fresh_pg_url, layout="rows").close()
    yield from _open_net([fresh_pg_url, pg_url_b])
