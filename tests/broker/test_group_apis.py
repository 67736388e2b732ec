"""The group and offset APIs on the wire: Kafka's error codes, tenant scoping, the ACE checks
of invariant 9, the coordinator spread over listeners, and the state `stream assign list`
shows in the portal."""

from __future__ import annotations

import struct

import pytest
from kio.schema.offset_fetch.v7.request import OffsetFetchRequestTopic
from kio.static.primitive import i32

from portal.rest.commands import REGISTRY
from replication.engine.store import Record
from replication.services.messages import messages_produce
from tests.broker.conftest import sasl_token
from tests.broker.wire import Wire
from tests.factories import ClusterFactory, StreamFactory, TopicFactory
from tests.workers.conftest import wait_until

pytestmark = pytest.mark.slow
TOPIC = "/mapr/c1/apps:orders"
NONE, OFFSET_OUT_OF_RANGE, UNKNOWN_TOPIC, NOT_COORDINATOR = 0, 1, 3, 16
ILLEGAL_GENERATION = 22
UNKNOWN_MEMBER, TOPIC_AUTHORIZATION, MEMBER_ID_REQUIRED = 25, 29, 79


@pytest.fixture
def orders(owner):
    stream = StreamFactory(cluster=ClusterFactory(name="c1"), name="apps", created_by=owner,
                           tenant=owner.memberships.get().tenant)
    TopicFactory(stream=stream, name="orders", partitions=2)
    messages_produce(actor=owner, stream=stream, topic="orders",
                     records=[Record(value=b"x", partition=p) for p in (0, 1, 0, 1)])
    return stream


def connect(kafka, user, bootstrap: str | None = None) -> Wire:  # type: ignore[no-untyped-def]
    wire = Wire(bootstrap or kafka.bootstrap)
    assert wire.authenticate(user.get_username(), sasl_token(user)).error_code == NONE
    return wire


def assignment(topic: str, partitions: list[int]) -> bytes:
    """Kafka's ConsumerProtocolAssignment v0."""
    name = topic.encode()
    return (struct.pack(">hih", 0, 1, len(name)) + name + struct.pack(">i", len(partitions))
            + b"".join(struct.pack(">i", p) for p in partitions) + struct.pack(">i", -1))


def join(wire: Wire, group: str = "billing", member_id: str = "") -> object:
    return wire.call(11, 5, group_id=group, session_timeout=10_000, rebalance_timeout=10_000,
                     member_id=member_id, group_instance_id=None, protocol_type="consumer",
                     protocols=[{"name": "range", "metadata": b""}])


def join_and_sync(wire: Wire, group: str = "billing") -> tuple[str, int]:
    first = join(wire, group)
    assert first.error_code == MEMBER_ID_REQUIRED
    joined = join(wire, group, first.member_id)
    assert joined.error_code == NONE and joined.leader == joined.member_id
    synced = wire.call(14, 3, group_id=group, generation_id=joined.generation_id,
                       member_id=joined.member_id, group_instance_id=None, assignments=[
                           {"member_id": joined.member_id,
                            "assignment": assignment(TOPIC, [0, 1])}])
    assert synced.error_code == NONE
    return joined.member_id, joined.generation_id


def commit(wire: Wire, member: str, generation: int, offset: int = 2,
           topic: str = TOPIC) -> list[int]:
    response = wire.call(8, 7, group_id="billing", generation_id_or_member_epoch=generation,
                         member_id=member,
                         group_instance_id=None, topics=[{"name": topic, "partitions": [
                             {"partition_index": 0, "committed_offset": offset,
                              "committed_leader_epoch": -1, "committed_metadata": ""}]}])
    return [p.error_code for t in response.topics for p in t.partitions]


def fetch_offsets(wire: Wire, topic: str = TOPIC) -> list[tuple[int, int]]:
    # An entity, not a dict: the field is nullable (`tuple | None`), which `build` leaves as is.
    asked = OffsetFetchRequestTopic(name=topic, partition_indexes=(i32(0), i32(1)))
    response = wire.call(9, 7, group_id="billing", require_stable=False, topics=(asked,))
    return [(p.committed_offset, p.error_code) for t in response.topics for p in t.partitions]


def test_commit_checks_member_and_generation_and_fetch_reads_the_cursor(kafka, owner, orders):
    wire = connect(kafka, owner)
    member, generation = join_and_sync(wire)
    assert commit(wire, member, generation + 1) == [ILLEGAL_GENERATION]
    assert commit(wire, "stranger", generation) == [UNKNOWN_MEMBER]
    assert commit(wire, "", -1) == [UNKNOWN_MEMBER]  # a simple commit into a live group
    assert commit(wire, member, generation, offset=-2) == [OFFSET_OUT_OF_RANGE]
    assert commit(wire, member, generation, offset=3) == [NONE]  # past the end: kept, as Kafka
    assert fetch_offsets(wire) == [(3, NONE), (-1, NONE)]
    assert commit(wire, member, generation, offset=2) == [NONE]
    assert fetch_offsets(wire) == [(2, NONE), (-1, NONE)]
    assert commit(wire, member, generation, topic="/mapr/c1/apps:nope") == [UNKNOWN_TOPIC]
    heartbeat = wire.call(12, 3, group_id="billing", generation_id=generation,
                          member_id=member, group_instance_id=None)
    assert heartbeat.error_code == NONE
    left = wire.call(13, 3, group_id="billing", members=[
        {"member_id": member, "group_instance_id": None}])
    assert [m.error_code for m in left.members] == [NONE]
    assert commit(wire, "", -1, offset=1) == [NONE]  # the group is empty: simple commits pass
    assert fetch_offsets(wire)[0] == (1, NONE)


def test_group_state_is_published_for_stream_assign_list(kafka, owner, orders):
    wire = connect(kafka, owner)
    member, _ = join_and_sync(wire)
    listing = REGISTRY["stream/assign/list"]

    def rows() -> list[dict]:
        return listing.run(owner, {"path": orders.path, "detail": "true"})

    wait_until(lambda: len(rows()) == 2, timeout=20)
    assert {(r["consumergroup"], r["topic"], r["partitionid"], r["consumerid"], r["state"])
            for r in rows()} == {("billing", "orders", p, member, "Stable") for p in (0, 1)}
    described = wire.call(15, 5, groups=["billing"], include_authorized_operations=False)
    [group] = described.groups
    assert group.group_state == "Stable" and [m.member_id for m in group.members] == [member]
    listed = wire.call(16, 4, states_filter=[])
    assert [(g.group_id, g.group_state) for g in listed.groups] == [("billing", "Stable")]
    wire.call(13, 3, group_id="billing", members=[{"member_id": member,
                                                   "group_instance_id": None}])
    wait_until(lambda: rows() == [], timeout=20)


def test_member_without_consumeperm_may_not_commit_or_read_offsets(kafka, owner, member, orders):
    owner_wire = connect(kafka, owner)
    assert commit(owner_wire, "", -1) == [NONE]
    wire = connect(kafka, member)  # bob: same tenant, in no ACE of alice's stream
    assert commit(wire, "", -1, offset=1) == [TOPIC_AUTHORIZATION]
    assert [code for _, code in fetch_offsets(wire)] == [TOPIC_AUTHORIZATION] * 2
    assert fetch_offsets(owner_wire)[0] == (2, NONE)  # unchanged by bob


def test_outsider_is_denied_and_has_a_group_namespace_of_its_own(kafka, owner, outsider,
                                                                orders):
    join_and_sync(connect(kafka, owner))
    assert commit(connect(kafka, owner), "", -1) == [UNKNOWN_MEMBER]  # billing is live
    wire = connect(kafka, outsider)
    assert commit(wire, "", -1) == [UNKNOWN_TOPIC]  # another tenant's topic does not exist
    assert [code for _, code in fetch_offsets(wire)] == [UNKNOWN_TOPIC] * 2
    assert wire.call(16, 4, states_filter=[]).groups == ()
    [group] = wire.call(15, 5, groups=["billing"], include_authorized_operations=False).groups
    assert group.group_state == "Dead" and group.members == ()
    own = join(wire, "billing")  # the same name is mallory's own, empty group
    assert own.error_code == MEMBER_ID_REQUIRED


def test_one_live_listener_coordinates_a_group_the_other_says_not_coordinator(kafka, owner,
                                                                              orders):
    second = kafka.listeners.start("k2")
    wires = [connect(kafka, owner), connect(kafka, owner, second)]

    def coordinators() -> set[int]:
        return {w.call(10, 3, key="billing", key_type=0).node_id for w in wires}

    wait_until(lambda: len(wires[0].call(3, 9, topics=None, allow_auto_topic_creation=False,
                                         include_cluster_authorized_operations=False,
                                         include_topic_authorized_operations=False
                                         ).brokers) == 2, timeout=20)
    wait_until(lambda: len(coordinators()) == 1, timeout=20)
    [node] = coordinators()
    ports = {kafka.listeners.processes[label][1]: label for label in ("k1", "k2")}
    answers = {label: join(w, "billing").error_code for label, w in zip(("k1", "k2"), wires,
                                                                        strict=True)}
    coordinator = next(label for label, code in answers.items() if code != NOT_COORDINATOR)
    assert answers[coordinator] == MEMBER_ID_REQUIRED
    assert sorted(answers.values()) == sorted([MEMBER_ID_REQUIRED, NOT_COORDINATOR])
    found = wires[0].call(10, 3, key="billing", key_type=0)
    assert ports[found.port] == coordinator and found.node_id == node
    other = wires[1] if coordinator == "k1" else wires[0]
    assert commit(other, "", -1) == [NOT_COORDINATOR]  # per partition: no request-level code
    fetched = other.call(9, 7, group_id="billing", require_stable=False, topics=None)
    assert fetched.error_code == NOT_COORDINATOR and fetched.topics == ()
