"""Consumer-group administration with real admin clients: ListGroups with its state and type
filters, DescribeGroups, DeleteGroups, OffsetDelete, the offsets and lag a describe-with-lag
flow reads (OffsetFetch beside ListOffsets), and altering offsets (OffsetCommit). A group
shows to a user of its tenant with consumeperm on its streams only; another tenant's group
is neither listed, nor described, nor deleted."""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    KafkaError,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec
from kafka import KafkaAdminClient
from kafka.structs import TopicPartition as PyTopicPartition

from replication.engine.store import Record
from replication.services.cursors import cursor_report, cursors_commit
from replication.services.messages import messages_produce
from tests.broker.test_consumer_groups import wait_for
from tests.broker.test_group_apis import assignment, connect
from tests.factories import ClusterFactory, StreamFactory, TopicFactory

pytestmark = pytest.mark.slow
TOPIC, OTHER = "/mapr/c1/apps:orders", "/mapr/c1/apps:refunds"
NONE, UNKNOWN_TOPIC = 0, 3
NON_EMPTY, NOT_FOUND, SUBSCRIBED = 68, 69, 86


@pytest.fixture
def apps(owner):  # type: ignore[no-untyped-def]
    """alice's stream with orders (2 partitions, 3 messages each) and refunds (1, 2), and the
    group billing's committed offsets in both."""
    stream = StreamFactory(cluster=ClusterFactory(name="c1"), name="apps", created_by=owner,
                           tenant=owner.memberships.get().tenant)
    TopicFactory(stream=stream, name="orders", partitions=2)
    TopicFactory(stream=stream, name="refunds", partitions=1)
    messages_produce(actor=owner, stream=stream, topic="orders",
                     records=[Record(value=b"o", partition=p) for p in (0, 1) * 3])
    messages_produce(actor=owner, stream=stream, topic="refunds",
                     records=[Record(value=b"r", partition=0)] * 2)
    cursors_commit(actor=owner, stream=stream, group="billing",
                   commits=[("orders", 0, 1), ("orders", 1, 2), ("refunds", 0, 2)])
    return stream


def committed(owner, stream, group: str = "billing") -> dict:  # type: ignore[no-untyped-def]
    return {(r.topic, r.partition): r.committed
            for r in cursor_report(actor=owner, stream=stream, group=group)}


def subscription(*topics: str) -> bytes:
    """Kafka's ConsumerProtocolSubscription v0."""
    body = b"".join(struct.pack(">h", len(t.encode())) + t.encode() for t in topics)
    return struct.pack(">hi", 0, len(topics)) + body + struct.pack(">i", -1)


@pytest.fixture
def live_member(kafka, owner, apps) -> Iterator[tuple]:  # type: ignore[type-arg]
    """billing, live: one member subscribed to orders and assigned both of its partitions."""
    wire = connect(kafka, owner)
    protocols = [{"name": "range", "metadata": subscription(TOPIC)}]

    def join(member_id: str = "") -> object:
        return wire.call(11, 5, group_id="billing", session_timeout=30_000,
                         rebalance_timeout=30_000, member_id=member_id, group_instance_id=None,
                         protocol_type="consumer", protocols=protocols)

    joined = join(join().member_id)
    assert joined.error_code == NONE
    synced = wire.call(14, 3, group_id="billing", generation_id=joined.generation_id,
                       member_id=joined.member_id, group_instance_id=None, assignments=[
                           {"member_id": joined.member_id,
                            "assignment": assignment(TOPIC, [0, 1])}])
    assert synced.error_code == NONE
    yield wire, joined.member_id
    wire.call(13, 3, group_id="billing", members=[{"member_id": joined.member_id,
                                                   "group_instance_id": None}])


def listed(admin: AdminClient, **filters: object) -> dict[str, ConsumerGroupState]:
    result = admin.list_consumer_groups(**filters).result(timeout=30)
    assert result.errors == []
    return {g.group_id: g.state for g in result.valid}


def test_an_active_group_is_listed_described_and_not_deleted(kafka, owner, apps, live_member):
    _wire, member = live_member
    admin = AdminClient(kafka.confluent())
    assert listed(admin) == {"billing": ConsumerGroupState.STABLE}
    assert listed(admin, states={ConsumerGroupState.STABLE}) == {
        "billing": ConsumerGroupState.STABLE}
    assert listed(admin, states={ConsumerGroupState.EMPTY}) == {}
    assert listed(admin, types={ConsumerGroupType.CLASSIC}) == {
        "billing": ConsumerGroupState.STABLE}
    [future] = admin.describe_consumer_groups(["billing"]).values()
    group = future.result(timeout=30)
    assert (group.state, group.partition_assignor, group.is_simple_consumer_group) == (
        ConsumerGroupState.STABLE, "range", False)
    [described] = group.members
    assert described.member_id == member
    assert sorted((tp.topic, tp.partition) for tp in described.assignment.topic_partitions) == [
        (TOPIC, 0), (TOPIC, 1)]
    [deleted] = admin.delete_consumer_groups(["billing"]).values()
    assert deleted.exception(timeout=30).args[0].code() == KafkaError.NON_EMPTY_GROUP
    assert committed(owner, apps) == {("orders", 0): 1, ("orders", 1): 2, ("refunds", 0): 2}


def test_offset_delete_refuses_subscribed_topics_while_active_and_deletes_the_rest(
        kafka, owner, apps, live_member):
    wire, _ = live_member

    def offset_delete(group: str, *topics: tuple[str, list[int]]) -> object:
        return wire.call(47, 0, group_id=group, topics=[
            {"name": name, "partitions": [{"partition_index": p} for p in partitions]}
            for name, partitions in topics])

    answer = offset_delete("billing", (TOPIC, [0]), (OTHER, [0]), ("/mapr/c1/apps:gone", [0]))
    assert answer.error_code == NONE
    assert [(t.name, [p.error_code for p in t.partitions]) for t in answer.topics] == [
        (TOPIC, [SUBSCRIBED]), (OTHER, [NONE]), ("/mapr/c1/apps:gone", [UNKNOWN_TOPIC])]
    assert committed(owner, apps) == {("orders", 0): 1, ("orders", 1): 2}
    assert offset_delete("nobody", (TOPIC, [0])).error_code == NOT_FOUND
    member = live_member[1]
    wire.call(13, 3, group_id="billing", members=[{"member_id": member,
                                                   "group_instance_id": None}])
    answer = offset_delete("billing", (TOPIC, [0]))  # empty now: nothing is subscribed
    assert [p.error_code for t in answer.topics for p in t.partitions] == [NONE]
    assert committed(owner, apps) == {("orders", 1): 2}


def test_an_empty_group_shows_its_offsets_and_lag_and_is_deleted(kafka, owner, apps):
    admin = AdminClient(kafka.confluent())
    assert listed(admin, states={ConsumerGroupState.EMPTY}) == {
        "billing": ConsumerGroupState.EMPTY}
    [future] = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions("billing")]).values()
    offsets = {(tp.topic, tp.partition): tp.offset
               for tp in future.result(timeout=30).topic_partitions}
    assert offsets == {(TOPIC, 0): 1, (TOPIC, 1): 2, (OTHER, 0): 2}
    ends = admin.list_offsets({TopicPartition(t, p): OffsetSpec.latest() for t, p in offsets})
    lag = {(tp.topic, tp.partition): f.result(timeout=30).offset - offsets[(tp.topic,
                                                                           tp.partition)]
           for tp, f in ends.items()}
    assert lag == {(TOPIC, 0): 2, (TOPIC, 1): 1, (OTHER, 0): 0}
    [altered] = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
        "billing", [TopicPartition(TOPIC, 0, 3)])]).values()
    assert [tp.error for tp in altered.result(timeout=30).topic_partitions] == [None]
    assert committed(owner, apps)[("orders", 0)] == 3
    [deleted] = admin.delete_consumer_groups(["billing"]).values()
    assert deleted.result(timeout=30) is None
    assert committed(owner, apps) == {}
    assert listed(admin) == {}
    [again] = admin.delete_consumer_groups(["billing"]).values()
    assert again.exception(timeout=30).args[0].code() == KafkaError.GROUP_ID_NOT_FOUND


def test_kafka_python_lists_describes_reads_and_deletes_a_group(kafka, owner, apps):
    admin = KafkaAdminClient(**kafka.kafka_python())
    try:
        assert admin.list_consumer_groups() == [("billing", "consumer")]
        [group] = admin.describe_consumer_groups(["billing"])
        assert (group.group, group.state, group.protocol_type, group.members) == (
            "billing", "Empty", "consumer", [])
        offsets = admin.list_consumer_group_offsets("billing")
        assert {(tp.topic, tp.partition): meta.offset for tp, meta in offsets.items()} == {
            (TOPIC, 0): 1, (TOPIC, 1): 2, (OTHER, 0): 2}
        partial = admin.list_consumer_group_offsets("billing",
                                                    partitions=[PyTopicPartition(OTHER, 0)])
        assert [meta.offset for meta in partial.values()] == [2]
        assert [(g, error.errno) for g, error in admin.delete_consumer_groups(["billing"])] == [
            ("billing", NONE)]
        assert committed(owner, apps) == {}
        assert admin.list_consumer_groups() == []
    finally:
        admin.close()


def test_another_tenants_group_is_invisible_and_cannot_be_deleted(kafka, owner, outsider,
                                                                  apps):
    mallory = kafka.as_user(outsider)
    admin = AdminClient(mallory.confluent())
    assert listed(admin) == {}
    [future] = admin.describe_consumer_groups(["billing"]).values()
    assert future.result(timeout=30).state == ConsumerGroupState.DEAD
    [deleted] = admin.delete_consumer_groups(["billing"]).values()
    assert deleted.exception(timeout=30).args[0].code() == KafkaError.GROUP_ID_NOT_FOUND
    py = KafkaAdminClient(**mallory.kafka_python())
    try:
        assert py.list_consumer_groups() == []
        assert py.delete_consumer_groups(["billing"])[0][1].errno == NOT_FOUND
    finally:
        py.close()
    assert committed(owner, apps) == {("orders", 0): 1, ("orders", 1): 2, ("refunds", 0): 2}


def test_a_user_without_consumeperm_neither_sees_nor_deletes_the_group(kafka, owner, member,
                                                                       apps):
    bob = AdminClient(kafka.as_user(member).confluent())  # acme too, in no ACE of apps
    assert listed(bob) == {}
    [deleted] = bob.delete_consumer_groups(["billing"]).values()
    assert deleted.exception(timeout=30).args[0].code() == KafkaError.GROUP_ID_NOT_FOUND
    assert committed(owner, apps) == {("orders", 0): 1, ("orders", 1): 2, ("refunds", 0): 2}


def test_a_real_consumers_group_is_kept_while_it_runs_and_deleted_once_it_closed(
        kafka, owner, apps):
    from confluent_kafka import Consumer

    admin = AdminClient(kafka.confluent())
    consumer = Consumer(kafka.confluent(**{"group.id": "billing", "enable.auto.commit": False,
                                           "auto.offset.reset": "earliest"}))
    try:
        consumer.subscribe([OTHER])
        wait_for(lambda: bool(consumer.poll(0.2) or consumer.assignment()), "an assignment",
                 kafka)
        [refused] = admin.delete_consumer_groups(["billing"]).values()
        assert refused.exception(timeout=30).args[0].code() == KafkaError.NON_EMPTY_GROUP
    finally:
        consumer.close()
    deadline = time.monotonic() + 30
    while True:  # the member's LeaveGroup has reached the coordinator
        [deleted] = admin.delete_consumer_groups(["billing"]).values()
        if deleted.exception(timeout=30) is None or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert deleted.exception(timeout=1) is None
    assert committed(owner, apps) == {}
