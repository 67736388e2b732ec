"""Exactly-once across two clusters (issue 31, invariant 13): confluent-kafka's transactional
producer commits and aborts transactions over several partitions of an origin stream while
real gateway and replicator processes replicate it to a replica stream on another cluster,
one gateway killed -9 mid-way. A read_committed consumer of the replica then sees exactly what
one of the origin sees: the same records at the same offsets, every committed one once, no
aborted one; read_uncommitted shows the aborted records did travel, with their markers."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from replication.services.replicas import replica_add
from replication.services.topics import topic_create
from replication.services.upstreams import upstream_add
from replication.stores import store_for
from tests.factories import ClusterFactory, StreamFactory
from tests.workers.conftest import start_gateways, wait_until

pytestmark = pytest.mark.slow
PARTITIONS, TRANSACTIONS, PER_TXN = 3, 24, 9
ORIGIN, REPLICA = "/mapr/etxa/apps:pay", "/mapr/etxb/apps:pay"


@pytest.fixture
def txn_pair(owner, settings, engine):  # type: ignore[no-untyped-def]
    """apps on cluster etxa replicating to apps on etxb (batch stores), topic pay of 3, two
    gateways on etxb and the replicator running."""
    settings.STORE_LAYOUT = "batches"
    tenant = owner.memberships.get().tenant
    origin, replica = (StreamFactory(cluster=ClusterFactory(name=name), name="apps",
                                     created_by=owner, tenant=tenant) for name in ("etxa", "etxb"))
    for stream in (origin, replica):
        assert store_for(stream.cluster).KEEPS_BATCHES
    topic_create(actor=owner, stream=origin, name="pay", partitions=PARTITIONS)
    replica_add(actor=owner, source=origin, replica=replica)
    upstream_add(actor=owner, replica=replica, source=origin)
    start_gateways(engine, replica.cluster, "gw1", "gw2")
    engine.replicator()
    return origin, replica


def _ends(stream) -> dict[int, int]:  # type: ignore[no-untyped-def]
    try:
        marks = store_for(stream.cluster).watermarks(stream.uuid, "pay")
    except Exception:  # the replica's store has not heard of the topic yet
        return {}
    return {p: high for p, (_, high) in marks.items()}


def _read(config: dict, name: str, isolation: str) -> list[tuple[int, int, bytes]]:
    """Every record (partition, offset, value) a fresh consumer gets from the start, once
    nothing more arrives for two seconds."""
    consumer = Consumer({**config, "group.id": f"r-{uuid.uuid4().hex[:6]}",
                         "isolation.level": isolation, "enable.auto.commit": False})
    consumer.assign([TopicPartition(name, p, 0) for p in range(PARTITIONS)])
    got: list[tuple[int, int, bytes]] = []
    quiet_since, deadline = time.monotonic(), time.monotonic() + 60
    while time.monotonic() - quiet_since < 2 and time.monotonic() < deadline:
        batch = [m for m in consumer.consume(500, timeout=0.5) if m.error() is None]
        if batch:
            quiet_since = time.monotonic()
        got += [(m.partition(), m.offset(), m.value()) for m in batch]
    consumer.close()
    return sorted(got)


def test_read_committed_on_the_replica_sees_what_it_sees_on_the_origin_through_a_gateway_kill(
        kafka, engine, txn_pair):
    origin, replica = txn_pair
    producer = Producer(kafka.confluent(**{"transactional.id": "etx-1", "linger.ms": 2}))
    producer.init_transactions(30)
    committed, aborted = set(), set()
    for n in range(TRANSACTIONS):
        if n == TRANSACTIONS // 2:  # SIGKILL while the first half is being applied
            wait_until(lambda: sum(_ends(replica).values()) > 0, timeout=30, every=0.05)
            engine.stop("gw-etxb-gw1", kill=True)
        producer.begin_transaction()
        values = {b"t%d-%d" % (n, i) for i in range(PER_TXN)}
        for i, value in enumerate(sorted(values)):
            producer.produce(ORIGIN, value, partition=i % PARTITIONS)
        if n % 3 == 2:
            assert producer.flush(30) == 0  # stored, then aborted (not purged unsent)
            producer.abort_transaction(30)
            aborted |= values
        else:
            producer.commit_transaction(30)
            committed |= values
    wait_until(lambda: _ends(replica) == _ends(origin), timeout=90, every=0.3)

    on_origin = _read(kafka.confluent(), ORIGIN, "read_committed")
    on_replica = _read(kafka.confluent(), REPLICA, "read_committed")
    assert on_replica == on_origin  # same records, same partitions, same offsets
    values = [v for _, _, v in on_replica]
    assert sorted(values) == sorted(committed)  # each committed record once, no aborted one
    everything = {v for _, _, v in _read(kafka.confluent(), REPLICA, "read_uncommitted")}
    assert aborted <= everything  # the aborted records travelled, and stay hidden
    # Offsets: the markers (one per partition per transaction) keep their places too.
    assert sum(_ends(replica).values()) == TRANSACTIONS * PER_TXN + TRANSACTIONS * PARTITIONS


def test_a_consume_transform_produce_loops_offsets_reach_the_replica_with_its_output(
        kafka, engine, owner, txn_pair):
    """The loop's input offsets are committed in each transaction (send_offsets_to_
    transaction): the replica ends with the same output, read_committed, and the same
    committed offset for the group, so the loop could go on there with nothing doubled."""
    from replication.services.cursors import cursors_fetch

    origin, replica = txn_pair
    topic_create(actor=owner, stream=origin, name="in", partitions=1)
    source = Producer(kafka.confluent(**{"linger.ms": 2}))
    for i in range(40):
        source.produce("/mapr/etxa/apps:in", b"in-%d" % i, partition=0)
    assert source.flush(30) == 0
    consumer = Consumer(kafka.confluent(**{"group.id": "etx-app", "enable.auto.commit": False,
                                           "isolation.level": "read_committed"}))
    consumer.assign([TopicPartition("/mapr/etxa/apps:in", 0, 0)])
    producer = Producer(kafka.confluent(**{"transactional.id": "etx-loop", "linger.ms": 2}))
    producer.init_transactions(30)
    done, deadline = 0, time.monotonic() + 90
    while done < 40:
        assert time.monotonic() < deadline, f"the loop did {done} of 40"
        batch = [m for m in consumer.consume(5, timeout=1) if m.error() is None]
        if not batch:
            continue
        if done >= 20 and "gw-etxb-gw1" in engine.processes:
            engine.stop("gw-etxb-gw1", kill=True)  # mid-way
        producer.begin_transaction()
        for m in batch:
            producer.produce(ORIGIN, b"out-" + m.value(), partition=m.offset() % PARTITIONS)
        producer.send_offsets_to_transaction(
            [TopicPartition("/mapr/etxa/apps:in", 0, batch[-1].offset() + 1)],
            consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        done += len(batch)
    consumer.close()
    wait_until(lambda: _ends(replica) == _ends(origin), timeout=90, every=0.3)
    committed = cursors_fetch(actor=owner, stream=origin, group="etx-app")
    assert sum(c.offset for c in committed.values()) == 40
    wait_until(lambda: cursors_fetch(actor=owner, stream=replica, group="etx-app") == committed,
               timeout=60)
    on_origin = _read(kafka.confluent(), ORIGIN, "read_committed")
    assert _read(kafka.confluent(), REPLICA, "read_committed") == on_origin
    assert sorted(v for _, _, v in on_origin) == sorted(b"out-in-%d" % i for i in range(40))
