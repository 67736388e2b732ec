"""Replication across a store failover: a source or a replica cluster whose message store is a
Patroni group (bench/hagroup) loses its primary, killed -9 with its data folder, while producers
write and real replicator and gateway processes replicate. Once the standby is promoted,
replication resumes by itself, and the replica holds every acknowledged message exactly once,
in the origin's order and offsets (invariants 2, 10 and 11 across a failover)."""

from __future__ import annotations

import time

import pytest

from portal.unavailable import STORE_DOWN
from replication.engine.checker import check_replica
from replication.engine.store import Record, StoreError
from replication.errors import StreamgateError
from replication.services import topic_create
from replication.services.messages import messages_produce
from replication.stores import close_stores, store_for
from tests.factories import ClusterFactory, StreamFactory
from tests.workers.conftest import engine, replicate_with_engine, wait_until  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def streams(owner, ha_group, ha_side: str):  # type: ignore[no-untyped-def]
    """Stream `apps` on c1 replicated to c2; the `ha_side` ("source" or "replica") cluster's
    store is the Patroni group, the other's the local server."""
    tenant = owner.memberships.get().tenant
    made = {}
    for side, name in (("source", "c1"), ("replica", "c2")):
        url = ha_group.url(f"store_{name}_{ha_side}") if side == ha_side else ""
        made[side] = StreamFactory(cluster=ClusterFactory(name=name, store_url=url),
                                   name="apps", created_by=owner, tenant=tenant)
        store_for(made[side].cluster)
    return made["source"], made["replica"]


class Writer:
    """REST-path produces of 10 messages each, a message id in a header; what raised during
    the failover (the REST API's 503) was not acknowledged, though it may have been written."""

    def __init__(self, owner, stream) -> None:  # type: ignore[no-untyped-def]
        self.owner, self.stream, self.next = owner, stream, 0
        self.acked: dict[tuple[str, int], set[int]] = {}
        self.refused = 0

    def produce(self, batches: int) -> None:
        for _ in range(batches):
            ids = range(self.next, self.next + 10)
            self.next += 10
            records = [Record(value=b"m%d" % i, headers=(("id", b"%d" % i),)) for i in ids]
            try:
                placed = messages_produce(actor=self.owner, stream=self.stream, topic="orders",
                                          records=records)
            except (StreamgateError, StoreError, *STORE_DOWN):  # what /rest answers 503
                self.refused += 1
                time.sleep(0.1)
                continue
            for partition, offset in placed:
                self.acked.setdefault(("orders", partition), set()).add(offset)


@pytest.mark.parametrize("ha_side", ["source", "replica"])
def test_replication_resumes_across_a_store_failover_with_nothing_lost_or_doubled(
        engine, owner, ha_group, ha_side):  # noqa: F811
    source, replica = streams(owner, ha_group, ha_side)
    topic_create(actor=owner, stream=source, name="orders", partitions=2)
    replicate_with_engine(engine, owner, source, replica)
    writer = Writer(owner, source)
    writer.produce(100)
    victim = ha_group.primary()
    ha_group.kill(victim, wipe=True)
    deadline = time.monotonic() + 120
    while ha_group.primary() in (None, victim):  # through the failover: on the source side,
        assert time.monotonic() < deadline, (writer.refused, writer.next)  # refusals meanwhile
        writer.produce(10)
    writer.produce(100)
    assert writer.refused == 0 or ha_side == "source", writer.refused
    total = sum(len(offsets) for offsets in writer.acked.values())

    def caught_up() -> bool:
        try:
            return check_replica(store_for(source.cluster), source.uuid,
                                 store_for(replica.cluster), replica.uuid, ["orders"],
                                 acknowledged=writer.acked).ok
        except STORE_DOWN:  # this process's pooled connections to the dead primary
            return False

    try:
        wait_until(caught_up, timeout=120, every=0.5)
        report = check_replica(store_for(source.cluster), source.uuid,
                               store_for(replica.cluster), replica.uuid, ["orders"],
                               acknowledged=writer.acked)
        # Every acknowledged offset on both sides, the replica the origin's copy (same
        # messages at the same offsets), and no message id stored twice on either.
        assert report.ok and report.checked >= total, report.summary()
    finally:
        close_stores()
        ha_group.start(victim)
        ha_group.wait_healthy(120)
    print(f"{ha_side} store failed over: {writer.refused} produces refused, {total} acknowledged")
