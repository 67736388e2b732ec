"""Idempotent producers on both stores: a retried batch is written once, gaps and fenced
epochs are refused, and the state lives in the store (a new store object, as after a restart,
still knows it). Plus ListOffsets by time."""

from __future__ import annotations

import uuid

import pytest

from replication.engine import open_store
from replication.engine.sequences import ProducerBatch, SequenceError
from replication.engine.store import Record
from replication.engine.storebase import MessageStore
from tests.replication.engine.test_store import rows_only


def _batch(n: int, partition: int = 1, tag: str = "") -> list[Record]:
    return [Record(f"{tag}{i}".encode(), partition=partition, timestamp_ms=1000 + i)
            for i in range(n)]


def _count(store: MessageStore, stream: uuid.UUID, partition: int = 1) -> int:
    return store.watermarks(stream, "t")[partition][1]


def test_retried_batch_is_acknowledged_with_its_offsets_and_written_once(
    store: MessageStore, stream: uuid.UUID
) -> None:
    store.ensure_topic(stream, "t", 2)
    first = store.append(stream, "t", _batch(3), origin=stream,
                         sequence=ProducerBatch(7, 0, 0, 3))
    second = store.append(stream, "t", _batch(2, tag="b"), origin=stream,
                          sequence=ProducerBatch(7, 0, 3, 2))
    again = store.append(stream, "t", _batch(3), origin=stream, sequence=ProducerBatch(7, 0, 0, 3))
    assert first == again == [(1, 0), (1, 1), (1, 2)]
    assert second == [(1, 3), (1, 4)]
    assert _count(store, stream) == 5
    assert store.read(stream, "t", 1, 3)[0].value == b"b0"


def test_sequence_gap_is_refused_and_writes_nothing(store: MessageStore, stream: uuid.UUID) -> None:
    store.ensure_topic(stream, "t", 2)
    store.append(stream, "t", _batch(3), origin=stream, sequence=ProducerBatch(7, 0, 0, 3))
    with pytest.raises(SequenceError, match="expected 3") as err:
        store.append(stream, "t", _batch(1), origin=stream, sequence=ProducerBatch(7, 0, 5, 1))
    assert not err.value.fenced
    with pytest.raises(SequenceError, match="sequence 0"):
        store.append(stream, "t", _batch(1), origin=stream, sequence=ProducerBatch(8, 0, 4, 1))
    assert _count(store, stream) == 3


def test_older_epoch_is_fenced_and_a_new_epoch_starts_at_zero(
    store: MessageStore, stream: uuid.UUID
) -> None:
    store.ensure_topic(stream, "t", 2)
    store.append(stream, "t", _batch(2), origin=stream, sequence=ProducerBatch(7, 1, 0, 2))
    with pytest.raises(SequenceError) as err:
        store.append(stream, "t", _batch(1), origin=stream, sequence=ProducerBatch(7, 0, 2, 1))
    assert err.value.fenced
    assert store.append(stream, "t", _batch(1), origin=stream,
                        sequence=ProducerBatch(7, 2, 0, 1)) == [(1, 2)]


def test_producer_state_survives_a_new_store_object(store_url: str, stream: uuid.UUID) -> None:
    store = open_store(store_url)
    store.ensure_topic(stream, "t", 2)
    store.append(stream, "t", _batch(4), origin=stream, sequence=ProducerBatch(9, 0, 0, 4))
    store.close()
    reopened = open_store(store_url)
    try:
        assert reopened.append(stream, "t", _batch(4), origin=stream,
                               sequence=ProducerBatch(9, 0, 0, 4)) == [(1, i) for i in range(4)]
        assert _count(reopened, stream) == 4
        assert reopened.producer_state(stream, "t", 1, 9).lasts == (3,)
    finally:
        reopened.close()


def test_only_the_last_five_batches_are_remembered(store: MessageStore, stream: uuid.UUID) -> None:
    store.ensure_topic(stream, "t", 2)
    for i in range(7):
        store.append(stream, "t", _batch(1), origin=stream, sequence=ProducerBatch(7, 0, i, 1))
    assert store.append(stream, "t", _batch(1), origin=stream,
                        sequence=ProducerBatch(7, 0, 2, 1)) == [(1, 2)]
    with pytest.raises(SequenceError):
        store.append(stream, "t", _batch(1), origin=stream, sequence=ProducerBatch(7, 0, 1, 1))


def test_offset_for_time_finds_the_first_message_at_or_after(
    store: MessageStore, stream: uuid.UUID
) -> None:
    store.ensure_topic(stream, "t", 1)
    store.append(stream, "t", [Record(b"x", partition=0, timestamp_ms=100 + 10 * i)
                               for i in range(50)], origin=stream)
    assert store.offset_for_time(stream, "t", 0, 0) == (0, 100)
    assert store.offset_for_time(stream, "t", 0, 255) == (16, 260)
    assert store.offset_for_time(stream, "t", 0, 590) == (49, 590)
    assert store.offset_for_time(stream, "t", 0, 591) is None


@rows_only
def test_records_naming_partitions_in_runs_keep_their_timestamps_and_offsets(
    store: MessageStore, stream: uuid.UUID
) -> None:
    store.ensure_topic(stream, "t", 3)
    records = [Record(b"a%d" % i, partition=p, timestamp_ms=500 + i)
               for i, p in enumerate([2, 2, 0, 0, 0, 2, 1])]
    placed = store.append(stream, "t", records, origin=stream)
    assert placed == [(2, 0), (2, 1), (0, 0), (0, 1), (0, 2), (2, 2), (1, 0)]
    assert [m.timestamp_ms for m in store.read(stream, "t", 2, 0)] == [500, 501, 505]
    assert store.read_rows(stream, "t", 0, 1)[0][:4] == (1, 503, None, b"a3")
    assert store.partition_stats(stream, "t")[2].bytes == 6
