"""A link a failover ended, in its replica's store (`end_link`, `reopen_link`): its batches are
refused under the partitions' locks by every apply path (messages, the PostgreSQL pipe), on
PostgreSQL and SQLite alike, and other links' batches still land."""

import uuid

import pytest

from replication.engine import Record, open_store
from replication.engine.replicator import BatchSpec, apply_spec
from replication.engine.store import LinkEnded, UnknownTopic

ORIGIN = uuid.UUID("6d0f1b3c-2a4e-4c1d-9a7b-3e5f0c8d1a22")


def _source(store, messages: int = 6):  # type: ignore[no-untyped-def]
    stream = uuid.uuid4()
    store.ensure_topic(stream, "t", 1)
    for i in range(messages):  # a batch each: the batch store applies whole batches
        store.append(stream, "t", [Record(b"m%d" % i, partition=0)], origin=stream)
    return stream


def _end(store, stream) -> int:  # type: ignore[no-untyped-def]
    try:
        return store.watermarks(stream, "t")[0][1]
    except UnknownTopic:  # the refused batch would have made it: rolled back with it
        return 0


def test_a_batch_of_an_ended_link_is_refused_and_writes_nothing(store, stream):
    source = _source(store)
    spec = lambda start, end: BatchSpec(source, stream, "t", 0, start, end)  # noqa: E731
    assert apply_spec(store, store, spec(0, 2), link="7").count == 2
    store.end_link(stream, "7", timeout=5)
    with pytest.raises(LinkEnded, match="link 7 was ended by a failover"):
        apply_spec(store, store, spec(2, 4), link="7")
    assert _end(store, stream) == 2
    # Another link (the one a failback makes, say) still applies; the ended one never again...
    assert apply_spec(store, store, spec(2, 4), link="8").count == 2
    with pytest.raises(LinkEnded):
        apply_spec(store, store, spec(4, 6), link="7")
    # ...unless a failover that did not switch reopens it.
    store.reopen_link("7")
    assert apply_spec(store, store, spec(4, 6), link="7").count == 2
    assert _end(store, stream) == 6


def test_the_message_apply_refuses_an_ended_link_too(store, stream):
    source = _source(store)
    messages = store.read(source, "t", 0, 0, limit=3)
    store.end_link(stream, "9", timeout=5)
    with pytest.raises(LinkEnded):
        store.apply(stream, messages, link="9")
    assert _end(store, stream) == 0


def test_between_two_postgresql_stores_the_pipe_refuses_an_ended_link(pg_url, fresh_pg_url):
    source_store, replica_store = open_store(pg_url), open_store(fresh_pg_url)
    try:
        source, replica = _source(source_store), uuid.uuid4()
        spec = BatchSpec(source, replica, "t", 0, 0, 3)
        assert apply_spec(source_store, replica_store, spec, link="11").count == 3
        replica_store.end_link(replica, "11", timeout=5)
        with pytest.raises(LinkEnded):
            apply_spec(source_store, replica_store, BatchSpec(source, replica, "t", 0, 3, 6),
                       link="11")
        assert _end(replica_store, replica) == 3
    finally:
        source_store.close()
        replica_store.close()
