"""ConsumerGroupHeartbeat and ConsumerGroupDescribe (KIP-848) on the wire, beside the classic
protocol: topic ids as Metadata names them, commits checked against the member epoch, one
group id for one protocol, regex subscriptions, tenant scoping; and librdkafka's AdminClient
describing and listing such a group."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import ConsumerGroupType
from confluent_kafka.admin import AdminClient

from tests.broker.conftest import orders_topic, sasl_token
from tests.broker.test_group_apis import commit, connect, join
from tests.broker.wire import Wire
from tests.factories import TopicFactory

pytestmark = pytest.mark.slow
TOPIC = "/mapr/c1/apps:orders"
NONE, INCONSISTENT_PROTOCOL, UNKNOWN_MEMBER, GROUP_ID_NOT_FOUND = 0, 23, 25, 69
FENCED_EPOCH, UNSUPPORTED_ASSIGNOR, STALE_EPOCH, INVALID_REGEX = 110, 112, 113, 128
UNKNOWN_TOPIC_ID = 100


@pytest.fixture
def orders(owner):  # type: ignore[no-untyped-def]
    return orders_topic(owner, 2).stream


def heartbeat(wire: Wire, member: str, epoch: int, *, group: str = "billing",
              names: list[str] | None = None, regex: str | None = None,
              owned: list | None = None, assignor: str | None = None) -> object:
    return wire.call(68, 1, group_id=group, member_id=member, member_epoch=epoch,
                     instance_id=None, rack_id=None,
                     rebalance_timeout=60_000 if epoch == 0 else -1,
                     subscribed_topic_names=names, subscribed_topic_regex=regex,
                     server_assignor=assignor, topic_partitions=owned)


def metadata_topic_id(wire: Wire, name: str = TOPIC) -> uuid.UUID:
    [topic] = wire.call(3, 12, topics=[{"name": name, "topic_id": uuid.UUID(int=0)}],
                        allow_auto_topic_creation=False,
                        include_topic_authorized_operations=False).topics
    return topic.topic_id


def assigned(response) -> dict[uuid.UUID, list[int]]:  # type: ignore[no-untyped-def]
    return {t.topic_id: sorted(t.partitions) for t in response.assignment.topic_partitions}


def test_a_member_joins_gets_the_partitions_by_topic_id_and_commits_with_its_epoch(kafka, owner,
                                                                                  orders):
    wire = connect(kafka, owner)
    member = str(uuid.uuid4())
    joined = heartbeat(wire, member, 0, names=[TOPIC])
    assert joined.error_code == NONE and joined.member_id == member
    assert joined.member_epoch > 0 and joined.heartbeat_interval.total_seconds() == 0.3
    assert assigned(joined) == {metadata_topic_id(wire): [0, 1]}
    epoch = joined.member_epoch
    assert commit(wire, member, epoch) == [NONE]
    assert commit(wire, member, epoch - 1) == [STALE_EPOCH]
    assert commit(wire, member, epoch + 1) == [FENCED_EPOCH]
    assert commit(wire, "stranger", epoch) == [UNKNOWN_MEMBER]
    assert commit(wire, "", -1) == [UNKNOWN_MEMBER]  # an admin's commit while members consume
    fetched = wire.call(9, 9, groups=[{"group_id": "billing", "member_id": member,
                                       "member_epoch": epoch - 1, "topics": None}],
                        require_stable=False)
    assert [g.error_code for g in fetched.groups] == [STALE_EPOCH]
    fetched = wire.call(9, 9, groups=[{"group_id": "billing", "member_id": member,
                                       "member_epoch": epoch, "topics": None}],
                        require_stable=False)
    assert [(p.partition_index, p.committed_offset) for g in fetched.groups
            for t in g.topics for p in t.partitions] == [(0, 2)]
    steady = heartbeat(wire, member, epoch)
    assert steady.error_code == NONE and steady.assignment is None  # nothing changed
    assert heartbeat(wire, member, epoch + 7).error_code == FENCED_EPOCH
    left = heartbeat(wire, member, -1)
    assert (left.error_code, left.member_epoch) == (NONE, -1)
    assert commit(wire, "", -1, offset=1) == [NONE]  # empty now: an admin's commit passes


def test_one_group_id_is_one_protocol_and_refusals_say_why(kafka, owner, orders):
    wire = connect(kafka, owner)
    assert heartbeat(wire, "m1", 0, names=[TOPIC]).error_code == NONE
    classic = join(wire, "billing")
    assert classic.error_code == INCONSISTENT_PROTOCOL
    first = join(wire, "ledger")
    join(wire, "ledger", first.member_id)
    refused = heartbeat(wire, "m2", 0, group="ledger", names=[TOPIC])
    assert refused.error_code == GROUP_ID_NOT_FOUND and "classic" in refused.error_message
    unsupported = heartbeat(wire, "m3", 0, group="other", names=[TOPIC], assignor="sticky")
    assert unsupported.error_code == UNSUPPORTED_ASSIGNOR
    assert "uniform" in unsupported.error_message
    bad = heartbeat(wire, "m4", 0, group="other", regex="orders[")
    assert bad.error_code == INVALID_REGEX and "does not compile" in bad.error_message
    huge = heartbeat(wire, "m4", 0, group="other", regex="a{99999999999}")
    assert huge.error_code == INVALID_REGEX and "does not compile" in huge.error_message
    assert heartbeat(wire, "m5", 3, group="nobody").error_code == UNKNOWN_MEMBER
    # A name that is no topic name subscribes to nothing; the others still count.
    odd = heartbeat(wire, "m6", 0, group="odd", names=["/mapr/", "//::", TOPIC])
    assert odd.error_code == NONE and list(assigned(odd).values()) == [[0, 1]]


def test_a_regex_that_backtracks_for_ever_is_refused_and_the_listener_goes_on(kafka, owner,
                                                                              orders):
    """Kafka matches subscriptions with RE2, which never backtracks; Python's engine would,
    for ever, on (a|aa)+ against a long name of a's that does not end in one."""
    TopicFactory(stream=orders, name="a" * 40 + "b", partitions=1)
    wire = connect(kafka, owner)
    slow = heartbeat(wire, "m1", 0, regex="/mapr/c1/apps:(a|aa)+")
    assert slow.error_code == INVALID_REGEX and "takes too long" in slow.error_message
    assert heartbeat(wire, "m2", 0, names=[TOPIC]).error_code == NONE  # still serving


def test_a_regex_subscription_takes_topics_created_later(kafka, owner, orders):
    wire = connect(kafka, owner)
    joined = heartbeat(wire, "m1", 0, regex="/mapr/c1/apps:ord.*")
    assert list(assigned(joined).values()) == [[0, 1]]
    TopicFactory(stream=orders, name="orders-eu", partitions=3)
    # The listener's resolution of names is reused for a few seconds; the regex is read anew.
    later = heartbeat(wire, "m1", joined.member_epoch)
    assert later.member_epoch > joined.member_epoch
    assert sorted(map(len, assigned(later).values())) == [2, 3]


def test_describe_and_list_show_the_group_to_its_tenant_only(kafka, owner, outsider, orders):
    wire = connect(kafka, owner)
    member = heartbeat(wire, "m1", 0, names=[TOPIC])
    described = wire.call(69, 0, group_ids=["billing", "ghost"],
                          include_authorized_operations=False)
    billing, ghost = described.groups
    assert (billing.error_code, billing.group_state, billing.assignor_name) == (
        NONE, "Stable", "uniform")
    [shown] = billing.members
    assert (shown.member_id, shown.member_epoch) == ("m1", member.member_epoch)
    assert [(t.topic_name, sorted(t.partitions)) for t in shown.assignment.topic_partitions] == [
        (TOPIC, [0, 1])]
    assert ghost.error_code == GROUP_ID_NOT_FOUND  # admin clients ask DescribeGroups next
    listed = wire.call(16, 5, states_filter=[], types_filter=["consumer"])
    assert [(g.group_id, g.group_state, g.group_type) for g in listed.groups] == [
        ("billing", "Stable", "consumer")]
    assert wire.call(16, 5, states_filter=[], types_filter=["classic"]).groups == ()
    stranger = Wire(kafka.bootstrap)
    assert stranger.authenticate(outsider.get_username(), sasl_token(outsider)).error_code == 0
    [hidden] = stranger.call(69, 0, group_ids=["billing"],
                             include_authorized_operations=False).groups
    assert hidden.error_code == GROUP_ID_NOT_FOUND


def test_librdkafka_admin_describes_and_lists_a_consumer_protocol_group(kafka, owner, orders):
    wire = connect(kafka, owner)
    heartbeat(wire, "m1", 0, names=[TOPIC])
    admin = AdminClient(kafka.confluent())
    [future] = admin.describe_consumer_groups(["billing"]).values()
    group = future.result(timeout=30)
    assert group.type == ConsumerGroupType.CONSUMER
    assert [m.member_id for m in group.members] == ["m1"]
    assert sorted(tp.partition for tp in group.members[0].assignment.topic_partitions) == [0, 1]
    listed = admin.list_consumer_groups().result(timeout=30)
    assert [(g.group_id, g.type) for g in listed.valid] == [("billing", ConsumerGroupType.CONSUMER)]


def test_metadata_names_the_topic_of_an_id_the_user_may_see_and_no_other(kafka, owner, outsider,
                                                                         orders):
    """A KIP-848 member learns the names of the topic ids it was assigned (Metadata v10+ with
    null names)."""
    wire = connect(kafka, owner)
    known = metadata_topic_id(wire)
    asked = [{"name": None, "topic_id": known}, {"name": None, "topic_id": uuid.uuid4()}]
    found, missing = wire.call(3, 12, topics=asked, allow_auto_topic_creation=False,
                               include_topic_authorized_operations=False).topics
    assert (found.error_code, found.name, found.topic_id) == (NONE, TOPIC, known)
    assert [p.partition_index for p in found.partitions] == [0, 1]
    assert missing.error_code == UNKNOWN_TOPIC_ID and missing.name is None
    stranger = Wire(kafka.bootstrap)
    assert stranger.authenticate(outsider.get_username(), sasl_token(outsider)).error_code == 0
    [hidden] = stranger.call(3, 12, topics=asked[:1], allow_auto_topic_creation=False,
                             include_topic_authorized_operations=False).topics
    assert (hidden.error_code, hidden.name) == (UNKNOWN_TOPIC_ID, None)
