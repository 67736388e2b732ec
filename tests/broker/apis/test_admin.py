"""CreateTopics, DeleteTopics, CreatePartitions and DescribeConfigs with real admin clients,
MapR names and plain names, through the topic services (topicperm, origins)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

from replication.models import Stream, Topic
from replication.services.defaultstreams import default_stream_set
from tests.factories import ClusterFactory, StreamFactory

pytestmark = pytest.mark.slow


def done(futures: dict) -> dict:  # type: ignore[type-arg]
    """Each future's exception (None for success), by key."""
    return {key: future.exception(timeout=30) for key, future in futures.items()}


@pytest.fixture
def apps(owner):  # type: ignore[no-untyped-def]
    return StreamFactory(cluster=ClusterFactory(name="c1"), name="apps", created_by=owner,
                         tenant=owner.memberships.get().tenant, ttl=3600)


def test_confluent_admin_creates_grows_describes_and_deletes_a_mapr_topic(kafka, apps):
    admin = AdminClient(kafka.confluent())
    name = "/mapr/c1/apps:orders"
    created = done(admin.create_topics([NewTopic(name, 3, 1, config={
        "message.timestamp.type": "LogAppendTime"})]))
    assert created == {name: None}
    topic = Topic.objects.get(stream=apps, name="orders")
    assert (topic.partitions, topic.timestamptype) == (3, "logappendtime")
    assert done(admin.create_partitions([NewPartitions(name, 5)])) == {name: None}
    assert Topic.objects.get(pk=topic.pk).partitions == 5
    [configs] = admin.describe_configs([ConfigResource("topic", name)]).values()
    values = {k: v.value for k, v in configs.result(timeout=30).items()}
    assert values["retention.ms"] == "3600000"
    assert values["message.timestamp.type"] == "LogAppendTime"
    assert done(admin.delete_topics([name])) == {name: None}
    assert not Topic.objects.filter(pk=topic.pk).exists()


def test_create_topics_refusals_name_the_problem_and_change_nothing(kafka, apps):
    admin = AdminClient(kafka.confluent())
    apps.topics.create(name="taken", origin_uuid=apps.uuid)
    errors = done(admin.create_topics([
        NewTopic("/mapr/c1/apps:taken", 1, 1),
        NewTopic("/mapr/c1/apps:triple", 1, 3),
        NewTopic("/mapr/c1/apps:shredded", 1, 1, config={"cleanup.policy": "shred"}),
        NewTopic("/mapr/c1/apps:ttl", 1, 1, config={"retention.ms": "5"}),
    ]))
    codes = {name.split(":")[1]: e.args[0].code() for name, e in errors.items()}
    assert codes == {"taken": KafkaError.TOPIC_ALREADY_EXISTS,
                     "triple": KafkaError.INVALID_REPLICATION_FACTOR,
                     "shredded": KafkaError.INVALID_CONFIG, "ttl": KafkaError.INVALID_CONFIG}
    assert "change the stream's setting first" in str(errors["/mapr/c1/apps:ttl"])
    assert set(apps.topics.values_list("name", flat=True)) == {"taken"}
    shrink = done(admin.create_partitions([NewPartitions("/mapr/c1/apps:taken", 1)]))
    assert shrink["/mapr/c1/apps:taken"].args[0].code() == KafkaError.INVALID_PARTITIONS


def test_validate_only_creates_nothing(kafka, apps):
    admin = AdminClient(kafka.confluent())
    result = done(admin.create_topics([NewTopic("/mapr/c1/apps:dry", 2, 1)],
                                      validate_only=True))
    assert result == {"/mapr/c1/apps:dry": None}
    assert not apps.topics.exists()


def test_kafka_python_creates_plain_topics_in_each_tenants_own_default_stream(
        kafka, owner, outsider):
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic as PyNewTopic

    ClusterFactory(name="c1")
    default_stream_set(actor=owner, cluster="c1", path="/mapr/c1/acme-kafka")
    default_stream_set(actor=outsider, cluster="c1", path="/mapr/c1/globex-kafka")
    for endpoint in (kafka, kafka.as_user(outsider)):
        admin = KafkaAdminClient(**endpoint.kafka_python())
        try:
            admin.create_topics([PyNewTopic("payments", 2, 1)])
            assert "payments" in admin.list_topics()
        finally:
            admin.close()
    streams = Stream.objects.filter(topics__name="payments").values_list("path", flat=True)
    assert sorted(streams) == ["/mapr/c1/acme-kafka", "/mapr/c1/globex-kafka"]


def test_outsider_can_neither_create_nor_delete_nor_describe_in_another_tenants_stream(
        kafka, apps, outsider):
    apps.topics.create(name="orders", origin_uuid=apps.uuid)
    admin = AdminClient(kafka.as_user(outsider).confluent())
    name = "/mapr/c1/apps:orders"
    created = done(admin.create_topics([NewTopic("/mapr/c1/apps:new", 1, 1)]))
    assert created["/mapr/c1/apps:new"].args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    deleted = done(admin.delete_topics([name]))
    assert deleted[name].args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    [configs] = admin.describe_configs([ConfigResource("topic", name)]).values()
    with pytest.raises(Exception, match="does not exist"):
        configs.result(timeout=30)
    assert list(apps.topics.values_list("name", flat=True)) == ["orders"]


def test_member_without_topicperm_is_refused_with_an_authorization_error(kafka, apps, member):
    admin = AdminClient(kafka.as_user(member).confluent())
    created = done(admin.create_topics([NewTopic("/mapr/c1/apps:new", 1, 1)]))
    error = created["/mapr/c1/apps:new"].args[0]
    assert error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED and "topicperm" in str(error)
    assert not apps.topics.exists()


def test_create_partitions_needs_topicperm_and_another_tenants_topic_does_not_exist(
        kafka, apps, member, outsider):
    topic = apps.topics.create(name="orders", origin_uuid=apps.uuid, partitions=2)
    name = "/mapr/c1/apps:orders"
    theirs = AdminClient(kafka.as_user(outsider).confluent())
    grown = done(theirs.create_partitions([NewPartitions(name, 4)]))
    assert grown[name].args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    bobs = AdminClient(kafka.as_user(member).confluent())
    grown = done(bobs.create_partitions([NewPartitions(name, 4)]))
    error = grown[name].args[0]
    assert error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED and "topicperm" in str(error)
    topic.refresh_from_db()
    assert topic.partitions == 2
