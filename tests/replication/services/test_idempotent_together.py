"""An idempotent producer's Produce request with batches of several partitions (issue 31's
transactional produce, and every Kafka 3.x Java producer, idempotent by default): on the
PostgreSQL batch store one transaction, one commit, for the request; a batch among them that
is a retry or refused is answered alone as Kafka answers it, the others written once."""

from __future__ import annotations

import psycopg
import pytest

from replication import placement
from replication.engine.producers import ProducerBatch
from replication.engine.recordbatch import encode_batch
from replication.engine.sequences import SequenceError
from replication.engine.store import Record
from replication.engine.stored import check_batches
from replication.services import topic_create
from replication.services.messages import PartitionWrite, messages_append
from replication.stores import store_for
from tests.replication.services.test_storegroups import grow, held


def _write(partition: int, n: int, seq: int, *, pid: int = 41) -> PartitionWrite:
    records = [Record(b"p%d-s%d-%d" % (partition, seq, i)) for i in range(n)]
    (raw,) = check_batches(encode_batch(records, producer_id=pid, producer_epoch=0,
                                        base_sequence=seq))
    return PartitionWrite(partition, [], ProducerBatch(pid, 0, seq, n), batches=[raw])


def _produce(owner, stream, writes: list[PartitionWrite]) -> list[PartitionWrite]:
    messages_append(actor=owner, stream=stream, topic="orders", writes=writes)
    return writes


def _transactions(stream) -> int:
    """How many transactions wrote the stream's batch rows."""
    with psycopg.connect(stream.cluster.store_url) as conn:
        return conn.execute("SELECT count(DISTINCT b.xmin::text) FROM batches b JOIN partitions"
                            " p ON p.id = b.pid WHERE p.stream = %s",
                            (stream.uuid,)).fetchone()[0]


@pytest.fixture
def orders(layout, owner, activity):
    topic_create(actor=owner, stream=activity, name="orders", partitions=3)
    assert store_for(activity.cluster).SEQUENCES_TOGETHER
    return activity


@pytest.mark.parametrize("layout", ["batches"], indirect=True)
def test_one_request_of_three_partitions_is_one_transaction(owner, orders):
    writes = _produce(owner, orders, [_write(p, 3, 0) for p in range(3)])
    assert [(w.base_offset, w.error) for w in writes] == [(0, None)] * 3
    assert _transactions(orders) == 1
    writes = _produce(owner, orders, [_write(p, 2, 3) for p in range(3)])
    assert [(w.base_offset, w.error) for w in writes] == [(3, None)] * 3
    assert _transactions(orders) == 2


@pytest.mark.parametrize("layout", ["batches"], indirect=True)
def test_a_retry_and_a_gap_among_them_are_answered_alone_and_the_rest_written_once(
        owner, orders):
    _produce(owner, orders, [_write(0, 3, 0)])
    retry, new, gap = _produce(owner, orders, [_write(0, 3, 0), _write(1, 4, 0),
                                               _write(2, 2, 7)])
    assert (retry.base_offset, retry.error) == (0, None)  # its first offset again
    assert (new.base_offset, new.error) == (0, None)
    assert isinstance(gap.error, SequenceError) and gap.base_offset == -1
    store = store_for(orders.cluster)
    assert store.watermarks(orders.uuid, "orders") == {0: (0, 3), 1: (0, 4), 2: (0, 0)}


def test_over_two_store_groups_each_group_commits_its_share_once(owner, operator, activity):
    """Four partitions over two groups: each group's share in one transaction of its own;
    then a retry of all four (a reply lost) writes nothing and answers every first offset."""
    placement.forget()
    try:
        urls = grow(operator, activity.cluster, "s2")
        topic_create(actor=owner, stream=activity, name="orders", partitions=4)
        first = _produce(owner, activity, [_write(p, 2, 0) for p in range(4)])
        assert [(w.base_offset, w.error) for w in first] == [(0, None)] * 4
        again = _produce(owner, activity, [_write(p, 2, 0) for p in range(4)])
        assert [(w.base_offset, w.error) for w in again] == [(0, None)] * 4
        counts = {}
        for url in urls.values():
            assert sum(1 for _ in held(url, activity)) == 2  # two partitions each
            with psycopg.connect(url) as conn:
                counts[url] = conn.execute(
                    "SELECT count(*), count(DISTINCT b.xmin::text) FROM batches b JOIN "
                    "partitions p ON p.id = b.pid WHERE p.stream = %s",
                    (activity.uuid,)).fetchone()
        assert sorted(counts.values()) == [(2, 1), (2, 1)]
    finally:
        placement.forget()
