"""The batches a process serving Kafka fetches holds (issue 30: consume speed,
replication/engine/pgbatch/tailcache.py): a fetch sends a held batch only while the store's
row is still that batch (same offsets, CRC and length), and reads every other from the store:
a truncated and rewritten tail, a batch changed in place, another process's appends."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from replication.engine import open_store
from replication.engine.recordbatch import decode_batches, encode_batch
from replication.engine.store import Record
from replication.engine.stored import check_batches

ORIGIN = uuid.UUID("0b1f6f0e-8d7c-4a6e-9d0a-5b0e0f4c2a11")


@pytest.fixture
def stores(pg_batch_url):
    """(a store holding batches for fetches, one holding none) on the same database."""
    held, plain = (open_store(pg_batch_url, fetch_cache=1 << 20),
                   open_store(pg_batch_url, fetch_cache=0))
    yield held, plain
    held.close()
    plain.close()


def _raw(n: int, tag: bytes = b"v"):
    (raw,) = check_batches(encode_batch(
        [Record(tag + b"%d" % i, timestamp_ms=1_000 + i) for i in range(n)]))
    return raw


def _append(store, stream, *raws, partition=0):
    return store.append_batches(stream, "t", {partition: list(raws)}, origin=ORIGIN)


def _fetched(store, stream, offset=0, max_bytes=1 << 20):
    _, (got,), _ = store.fetch_partitions(stream, "t", [(0, offset, max_bytes)])
    return got


def _values(data: bytes) -> list[bytes]:
    return [r.value for b in decode_batches(data) for r in b.records]


def _sql(url, statement, *args):
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(statement, args)


def test_held_batches_are_sent_only_while_the_row_is_the_same(stores, pg_batch_url):
    held, plain = stores
    stream = uuid.uuid4()
    held.ensure_topic(stream, "t", 1)
    assert _fetched(held, stream).records == 0  # a fetch: this process now keeps what it writes
    _append(held, stream, _raw(3, b"a"), _raw(2, b"b"))
    assert held._tail.size > 0
    assert _fetched(held, stream) == _fetched(plain, stream)
    # The bytes of a held batch are the process's own: a row whose data changed but whose
    # offsets, CRC and length did not (no writer does this; it shows what travels) is
    # answered from the cache...
    original = _fetched(plain, stream).data
    _sql(pg_batch_url, "UPDATE batches SET data = overlay(data placing '\\xff'::bytea from 70)"
         " WHERE base_offset = 0 AND pid = (SELECT max(pid) FROM batches)")
    assert _fetched(held, stream).data == original
    assert held.fetch(stream, "t", 0, 0, 1 << 20).data == original  # one partition's fetch too
    assert _fetched(plain, stream).data != original
    # ...and a row whose CRC differs (compaction's rewrite, say) is read from the store.
    _sql(pg_batch_url, "UPDATE batches SET crc = crc + 1 WHERE base_offset = 0 "
         "AND pid = (SELECT max(pid) FROM batches)")
    assert _fetched(held, stream).data == _fetched(plain, stream).data != original


def test_a_truncated_and_rewritten_tail_is_read_from_the_store(stores):
    held, plain = stores
    stream = uuid.uuid4()
    held.ensure_topic(stream, "t", 1)
    _fetched(held, stream)
    _append(held, stream, _raw(3, b"a"), _raw(2, b"old"))
    assert _values(_fetched(held, stream, 3).data) == [b"old0", b"old1"]
    held.truncate(stream, "t", 0, 3)
    _append(plain, stream, _raw(2, b"new"))  # another process writes offsets 3 and 4 again
    assert _values(_fetched(held, stream, 3).data) == [b"new0", b"new1"]
    assert _fetched(held, stream) == _fetched(plain, stream)


def test_the_cache_keeps_to_its_size_and_a_process_that_never_fetches_keeps_nothing(
        pg_batch_url):
    small = open_store(pg_batch_url, fetch_cache=2_000)
    try:
        stream = uuid.uuid4()
        small.ensure_topic(stream, "t", 1)
        _append(small, stream, _raw(5))
        assert small._tail.size == 0  # no fetch yet: appends keep nothing
        _fetched(small, stream)
        for i in range(20):
            _append(small, stream, _raw(20, b"%d-" % i))
            assert 0 < small._tail.size <= 2_000
        got = _fetched(small, stream)
        assert got.records == 405 and len(_values(got.data)) == 405
    finally:
        small.close()


def test_a_negative_cache_size_stops_the_settings_naming_it():
    import os
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", "import portal.settings"], capture_output=True,
                          text=True, env={**os.environ, "STREAMGATE_FETCH_CACHE_BYTES": "-1"})
    assert done.returncode != 0
    assert "STREAMGATE_FETCH_CACHE_BYTES=-1 must be 0 or more" in done.stderr
