"""Kafka produce and fetch with confluent-kafka through the listener, on a cluster of three
store groups (issue 33): every message lands in, and is fetched from, the group holding its
partition (checked in the groups' databases)."""

from __future__ import annotations

import pytest

from replication import placement
from replication.stores import store_for
from tests.broker.test_produce_fetch import consume, produce
from tests.factories import ClusterFactory, StreamFactory, TopicFactory
from tests.replication.services.test_storegroups import grow, held

pytestmark = pytest.mark.slow


@pytest.fixture
def grouped(owner, operator):  # type: ignore[no-untyped-def]
    """/mapr/c1/apps:orders (3 partitions) on a cluster of three store groups."""
    placement.forget()
    cluster = ClusterFactory(name="c1")
    groups = grow(operator, cluster, "s2", "s3")
    stream = StreamFactory(cluster=cluster, name="apps", created_by=owner,
                           tenant=owner.memberships.get().tenant)
    TopicFactory(stream=stream, name="orders", partitions=3)
    store_for(cluster).ensure_topic(stream.uuid, "orders", 3)
    yield stream, groups
    placement.forget()


def test_kafka_produce_and_fetch_route_to_each_partitions_group(grouped, kafka):
    stream, groups = grouped
    sent = [(f"v{i}".encode(), f"k{i % 11}".encode(), None, None) for i in range(300)]
    reports = produce(kafka.confluent(), sent, **{"enable.idempotence": True})
    assert all(err is None for err, _ in reports)
    got = consume(kafka.confluent(), 300)
    assert sorted(m.value() for m in got) == sorted(v for v, *_ in sent)
    per_partition = {p: sum(1 for _, r in reports if r.partition() == p) for p in range(3)}
    found: dict[tuple[str, int], int] = {}
    for url in groups.values():
        mine = held(url, stream)
        assert len(mine) == 1  # three partitions over three empty groups: one each
        found.update(mine)
    assert found == {("orders", p): n for p, n in per_partition.items()}
