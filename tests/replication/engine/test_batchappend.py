"""The batch store's append of Kafka batches (issue 30, speed): on PostgreSQL its rows, the
producer's new state and the COMMIT ride one pipeline sent before the fence's read, so a
refusal there, a stale producer state or an acks=1 commit must each leave what the rules say.
Run on both batch stores (the SQLite one keeps its own path; the rules are the same)."""

from __future__ import annotations

import threading
import uuid

import psycopg
import pytest

from replication.engine import open_store
from replication.engine.durability import primary_commit_only
from replication.engine.producers import ProducerBatch
from replication.engine.recordbatch import encode_batch
from replication.engine.sequences import SequenceError, SequencesApart
from replication.engine.store import Record
from replication.engine.stored import check_batches

ORIGIN = uuid.UUID("0b1f6f0e-8d7c-4a6e-9d0a-5b0e0f4c2a11")


class Stopped(Exception):
    pass


def _refuse() -> None:
    raise Stopped("producers stopped")


@pytest.fixture(params=["pg_batch_url", "sqlite_batch_url"])
def store(request: pytest.FixtureRequest):
    opened = open_store(request.getfixturevalue(request.param))
    yield opened
    opened.close()


def _raw(n: int, *, pid: int = -1, seq: int = -1, epoch: int = 0, tag: bytes = b"v"):
    records = [Record(tag + b"%d" % i, timestamp_ms=1_000 + i) for i in range(n)]
    data = encode_batch(records, producer_id=pid, producer_epoch=epoch if pid >= 0 else -1,
                        base_sequence=seq)
    (raw,) = check_batches(data)
    return raw


def _seq(raw) -> ProducerBatch:
    return ProducerBatch(raw.producer_id, raw.epoch, raw.base_sequence, raw.records)


def _append(store, stream, batches, **how):
    return store.append_batches(stream, "t", batches, origin=ORIGIN, **how)


def test_a_refused_admit_after_the_rows_went_out_writes_nothing_and_keeps_the_state(store):
    stream = uuid.uuid4()
    store.ensure_topic(stream, "t", 2)
    with pytest.raises(Stopped):
        _append(store, stream, {0: [_raw(3)], 1: [_raw(2), _raw(4)]}, admit=_refuse)
    first = _raw(3, pid=9, seq=0)
    with pytest.raises(Stopped):
        _append(store, stream, {0: [first]}, sequence=_seq(first), admit=_refuse)
    assert store.watermarks(stream, "t") == {0: (0, 0), 1: (0, 0)}
    assert store.fetch(stream, "t", 0, 0, 1 << 20).records == 0
    # The producer's state did not move: its first batch is still the one expected.
    assert _append(store, stream, {0: [first]}, sequence=_seq(first)) == {0: 0}
    assert _append(store, stream, {1: [_raw(2), _raw(4)]}) == {1: 0}
    assert store.watermarks(stream, "t") == {0: (0, 3), 1: (0, 6)}


def test_a_retried_batch_is_written_once_and_a_gap_is_refused(store):
    stream = uuid.uuid4()
    store.ensure_topic(stream, "t", 1)
    batches = [_raw(5, pid=4, seq=5 * i, tag=b"b%d-" % i) for i in range(7)]
    for i, raw in enumerate(batches):
        assert _append(store, stream, {0: [raw]}, sequence=_seq(raw)) == {0: 5 * i}
    # The last five are remembered, as Kafka's broker does: each retry answers its offset.
    for i, raw in enumerate(batches[2:], start=2):
        assert _append(store, stream, {0: [raw]}, sequence=_seq(raw)) == {0: 5 * i}
    with pytest.raises(SequenceError):
        gap = _raw(1, pid=4, seq=40)
        _append(store, stream, {0: [gap]}, sequence=_seq(gap))
    assert store.watermarks(stream, "t") == {0: (0, 35)}


def test_an_acks_1_append_commits_on_the_primary_alone_and_is_stored(store):
    stream = uuid.uuid4()
    store.ensure_topic(stream, "t", 1)
    with primary_commit_only():
        raw = _raw(2, pid=5, seq=0)
        assert _append(store, stream, {0: [raw]}, sequence=_seq(raw)) == {0: 0}
        assert _append(store, stream, {0: [_raw(3)]}) == {0: 2}
    assert store.watermarks(stream, "t") == {0: (0, 5)}


def test_producers_appending_at_once_each_see_the_state_the_last_commit_left(store):
    """Each append reads its producer's state once its partition is locked: producers
    writing one partition from several threads, each retrying every batch, store each
    batch once and the partition's offsets stay contiguous."""
    stream = uuid.uuid4()
    store.ensure_topic(stream, "t", 1)
    failures: list[BaseException] = []

    def produce(producer: int) -> None:
        try:
            for i in range(15):
                raw = _raw(3, pid=producer, seq=3 * i, tag=b"p%d-%d-" % (producer, i))
                first = _append(store, stream, {0: [raw]}, sequence=_seq(raw))
                assert _append(store, stream, {0: [raw]}, sequence=_seq(raw)) == first
        except BaseException as error:  # reported by the main thread
            failures.append(error)

    threads = [threading.Thread(target=produce, args=(p,)) for p in (11, 12, 13)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not failures, failures
    assert store.watermarks(stream, "t") == {0: (0, 135)}
    values = [m.value for m in store.read(stream, "t", 0, 0, limit=1000)]
    assert len(values) == len(set(values)) == 135


def test_one_batch_sent_twice_at_once_is_written_once(store):
    """A producer's batch retried on a second connection while the first is still being
    written: the second append waits for the partition, then reads the state the first
    committed, so it answers the first one's offset instead of writing it again."""
    stream = uuid.uuid4()
    store.ensure_topic(stream, "t", 1)
    for i in range(20):
        raw = _raw(2, pid=21, seq=2 * i, tag=b"r%d-" % i)
        got: list = []
        twins = [threading.Thread(target=lambda r=raw, out=got: out.append(
            _append(store, stream, {0: [r]}, sequence=_seq(r)))) for _ in range(2)]
        for t in twins:
            t.start()
        for t in twins:
            t.join(30)
        assert got == [{0: 2 * i}, {0: 2 * i}]
    assert store.watermarks(stream, "t") == {0: (0, 40)}


def _xmins(url: str, stream: uuid.UUID) -> int:
    """How many transactions wrote the stream's batch rows."""
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT count(DISTINCT b.xmin::text) FROM batches b JOIN partitions"
                            " p ON p.id = b.pid WHERE p.stream = %s", (stream,)).fetchone()[0]


def test_an_idempotent_producers_batches_of_several_partitions_commit_together(pg_batch_url):
    """One request's batches of three partitions: one transaction, and each partition's
    producer state moved as if appended alone (the next is taken, a retry answered)."""
    store = open_store(pg_batch_url)
    stream = uuid.uuid4()
    store.ensure_topic(stream, "t", 3)
    firsts = {p: _raw(2 + p, pid=31, seq=0, tag=b"a%d-" % p) for p in range(3)}
    assert _append(store, stream, {p: [r] for p, r in firsts.items()},
                   sequences={p: _seq(r) for p, r in firsts.items()}) == {0: 0, 1: 0, 2: 0}
    assert _xmins(pg_batch_url, stream) == 1
    for p, raw in firsts.items():  # a retry of each: its offset, nothing written
        assert _append(store, stream, {p: [raw]}, sequence=_seq(raw)) == {p: 0}
    seconds = {p: _raw(3, pid=31, seq=2 + p, tag=b"b%d-" % p) for p in range(3)}
    assert _append(store, stream, {p: [r] for p, r in seconds.items()},
                   sequences={p: _seq(r) for p, r in seconds.items()}) == {0: 2, 1: 3, 2: 4}
    assert store.watermarks(stream, "t") == {0: (0, 5), 1: (0, 6), 2: (0, 7)}
    assert _xmins(pg_batch_url, stream) == 2
    store.close()


@pytest.mark.parametrize("odd", ["retry", "gap", "fenced"])
def test_batches_together_of_which_one_is_not_next_write_nothing(pg_batch_url, odd):
    """A retry, a gap or an older epoch among batches offered together: SequencesApart and
    nothing written or moved, so appending each alone answers each as Kafka would."""
    store = open_store(pg_batch_url)
    stream = uuid.uuid4()
    store.ensure_topic(stream, "t", 2)
    first = _raw(2, pid=32, seq=0, epoch=1)
    assert _append(store, stream, {0: [first]}, sequence=_seq(first)) == {0: 0}
    other = _raw(2, pid=32, seq=0, epoch=1, tag=b"o")
    zero = {"retry": first, "gap": _raw(2, pid=32, seq=5, epoch=1),
            "fenced": _raw(2, pid=32, seq=2, epoch=0)}[odd]
    with pytest.raises(SequencesApart):
        _append(store, stream, {0: [zero], 1: [other]},
                sequences={0: _seq(zero), 1: _seq(other)})
    assert store.watermarks(stream, "t") == {0: (0, 2), 1: (0, 0)}
    assert _append(store, stream, {1: [other]}, sequence=_seq(other)) == {1: 0}
    store.close()
