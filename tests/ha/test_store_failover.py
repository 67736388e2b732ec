"""A cluster's message store as a Patroni group (bench/hagroup): its primary killed -9 with its
data folder deleted while an idempotent librdkafka producer (acks=all) writes through the
listener. Every acknowledged message is on the promoted standby exactly once (invariant 10 and
11: acks=all was acknowledged only once the synchronous standby had the commit), producing
resumes without a manual step, and the lost member, started again, rejoins as a standby."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from confluent_kafka import Producer

from replication.services.clusters import cluster_info
from replication.stores import close_stores
from tests.broker.test_idempotence import NAME, stored_values
from tests.factories import ClusterFactory, StreamFactory, TopicFactory

pytestmark = pytest.mark.slow


@pytest.fixture
def topic(owner, ha_group):
    from replication.stores import store_for

    cluster = ClusterFactory(name="c1", store_url=ha_group.url("store_c1"))
    stream = StreamFactory(cluster=cluster, name="apps", created_by=owner,
                           tenant=owner.memberships.get().tenant)
    made = TopicFactory(stream=stream, name="orders", partitions=2)
    store_for(cluster).ensure_topic(stream.uuid, "orders", 2)
    yield made
    close_stores()


class Producing:
    """An idempotent acks=all producer, its acknowledged values and when each came."""

    def __init__(self, kafka) -> None:  # type: ignore[no-untyped-def]
        self.acked: list[tuple[float, bytes]] = []
        self.failed: list = []
        self.sent = 0
        self.producer = Producer(kafka.confluent(**{
            "enable.idempotence": True, "acks": "all", "linger.ms": 5,
            "message.timeout.ms": 120000, "retry.backoff.ms": 100,
            "reconnect.backoff.max.ms": 500}))

    def _report(self, err, msg) -> None:  # type: ignore[no-untyped-def]
        if err:
            self.failed.append(err)
        else:
            self.acked.append((time.monotonic(), msg.value()))

    def until(self, done, timeout: float) -> None:  # type: ignore[no-untyped-def]
        """Produce 20 messages a poll until `done()`, AssertionError after `timeout` s."""
        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, f"{len(self.acked)} acknowledged of {self.sent}"
            for _ in range(20):
                self.producer.produce(NAME, b"m%07d" % self.sent, on_delivery=self._report)
                self.sent += 1
            self.producer.poll(0.02)


def test_store_primary_killed_with_its_disk_loses_no_acknowledged_message(
    kafka, topic, ha_group
):
    producing = Producing(kafka)
    producing.until(lambda: len(producing.acked) >= 500, 60)
    primary = ha_group.primary()
    before = cluster_info(topic.stream.cluster)
    ha_group.kill(primary, wipe=True)
    died, first_new = time.monotonic(), b"m%07d" % producing.sent
    killed_at = datetime.now(UTC).replace(microsecond=0)

    # Acknowledgements of messages produced after the kill: the promoted standby wrote them.
    def after() -> list[float]:
        return [t for t, v in producing.acked if v >= first_new]

    producing.until(lambda: len(after()) >= 500, 120)
    assert producing.producer.flush(120) == 0
    first_after = min(after()) - died
    new_primary = ha_group.primary()
    assert new_primary not in (None, primary)

    assert not producing.failed, producing.failed[:3]
    close_stores()
    # The operator sees the failover: a new timeline that began after the kill, a new leader.
    after_info = cluster_info(topic.stream.cluster)
    assert after_info["timeline"] > before["timeline"]
    assert datetime.fromisoformat(after_info["lastFailover"]) > killed_at
    (leader,) = [m for m in after_info["members"] if m["role"] == "leader"]
    assert leader["name"].endswith(str(ha_group.ports.pg(int(new_primary[2:]))))
    counts = stored_values(topic)
    values = [v for _, v in producing.acked]
    assert len(values) == producing.sent
    assert all(counts[v] == 1 for v in values), [v for v in values if counts[v] != 1][:5]
    assert sum(counts.values()) == producing.sent  # nothing written twice
    print(f"first acknowledged produce {first_after:.1f}s after the primary died")

    # The lost member, its disk gone, comes back as a standby of the new primary.
    ha_group.start(primary)
    ha_group.wait_healthy(120)
    roles = {m["name"]: m["role"] for m in ha_group.patroni()["members"]}
    assert roles[primary] in ("replica", "sync_standby") and roles[new_primary] == "leader"
