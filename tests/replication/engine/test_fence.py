"""The failover fence in the store (`append(admit=...)`, `fence_appends`), on PostgreSQL and
SQLite alike, and how long a call waits for a store whose server is down."""

import contextlib
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from bench.pgserver import PrivatePostgres
from replication.engine import Record, create_database, open_store
from replication.engine.producers import ProducerBatch
from replication.engine.store import StoreError

ORIGIN = uuid.UUID("0b1f6f0e-8d7c-4a6e-9d0a-5b0e0f4c2a11")


class Stopped(Exception):
    pass


def _refuse() -> None:
    raise Stopped("producers stopped")


def _ends(store, stream) -> dict[int, int]:
    return {p: high for p, (_low, high) in store.watermarks(stream, "t").items()}


def test_an_append_its_admit_refuses_writes_nothing(store, stream):
    store.ensure_topic(stream, "t", 2)
    with pytest.raises(Stopped):
        store.append(stream, "t", [Record(b"a", partition=0), Record(b"b", partition=1)],
                     origin=ORIGIN, admit=_refuse)
    assert _ends(store, stream) == {0: 0, 1: 0}
    # The offsets it had reserved are given back: the next append starts at 0.
    assert store.append(stream, "t", [Record(b"c", partition=0)], origin=ORIGIN) == [(0, 0)]


def test_a_retried_idempotent_batch_answers_its_offsets_even_when_producers_are_stopped(
        store, stream):
    store.ensure_topic(stream, "t", 1)
    batch = ProducerBatch(producer_id=7, epoch=0, first_seq=0, count=1)
    first = store.append(stream, "t", [Record(b"a", partition=0)], origin=ORIGIN,
                         sequence=batch)
    # Written before the stop: the client's retry learns where, and nothing is written twice.
    again = store.append(stream, "t", [Record(b"a", partition=0)], origin=ORIGIN,
                         sequence=batch, admit=_refuse)
    assert again == first and _ends(store, stream) == {0: 1}


@contextlib.contextmanager
def admitted_append(store, stream) -> Iterator[threading.Thread]:  # type: ignore[no-untyped-def]
    """An append admitted and holding its partition (a busy store, say) until the block ends;
    yields its thread, which then commits."""
    admitted, release = threading.Event(), threading.Event()

    def slow_admit() -> None:
        admitted.set()
        release.wait(10)

    appender = threading.Thread(target=lambda: store.append(
        stream, "t", [Record(b"in flight", partition=0)], origin=ORIGIN, admit=slow_admit))
    appender.start()
    assert admitted.wait(10)
    try:
        yield appender
    finally:
        release.set()
        appender.join(10)


def test_the_fence_waits_for_an_append_admitted_before_it(store, stream):
    store.ensure_topic(stream, "t", 1)
    fenced = threading.Event()
    with admitted_append(store, stream):
        fence = threading.Thread(target=lambda: (store.fence_appends(stream, timeout=10),
                                                 fenced.set()))
        fence.start()
        time.sleep(0.5)
        assert not fenced.is_set()  # the admitted append still holds its partition
    fence.join(10)
    # Once the fence returned, what was admitted before it is stored.
    assert fenced.is_set() and _ends(store, stream) == {0: 1}


def test_the_fence_gives_up_after_its_timeout(store, stream):
    store.ensure_topic(stream, "t", 1)
    with admitted_append(store, stream):
        started = time.monotonic()
        with pytest.raises(StoreError, match=r"did not finish within 0\.5s"):
            store.fence_appends(stream, timeout=0.5)
        assert time.monotonic() - started < 3


def test_on_postgresql_a_fence_waits_for_its_own_stream_only(pg_url, stream):
    # (SQLite has one writer for the whole file: there every fence waits for every append.)
    store, other = open_store(pg_url), uuid.uuid4()
    store.ensure_topic(stream, "t", 1)
    store.ensure_topic(other, "t", 1)
    try:
        with admitted_append(store, stream):
            started = time.monotonic()
            store.fence_appends(other, timeout=2)
            assert time.monotonic() - started < 1
    finally:
        store.close()


def test_a_store_whose_server_is_down_fails_a_call_within_its_wait_and_recovers():
    with PrivatePostgres(durable=False) as server:
        url = server.url("fenced")
        create_database(url)
        store, stream = open_store(url, wait=2), uuid.uuid4()
        try:
            store.ensure_topic(stream, "t", 1)
            server.stop("immediate")
            for _ in range(3):  # the pooled connection fails at once; then the wait
                started = time.monotonic()
                with pytest.raises(Exception):  # noqa: B017 - any failure to answer
                    store.append(stream, "t", [Record(b"x")], origin=ORIGIN)
                assert time.monotonic() - started < 4  # the pool's default was 30 s
            server.start()
            deadline = time.monotonic() + 10
            while True:
                try:
                    store.append(stream, "t", [Record(b"y")], origin=ORIGIN)
                    break
                except Exception:  # each connection that died with the server fails once
                    assert time.monotonic() < deadline
            assert _ends(store, stream) == {0: 1}
        finally:
            store.close()
