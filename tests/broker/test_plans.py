"""Plan limits on the Kafka listener, through the same topic and produce services as every
other interface: a real client is refused with POLICY_VIOLATION and the plan's words."""

from __future__ import annotations

import pytest

from accounts.models import Plan
from replication.models import Topic
from replication.stores import store_for
from tests.broker.conftest import orders_topic

pytestmark = pytest.mark.slow


@pytest.fixture
def topic(owner):
    """/mapr/c1/apps:orders (2 partitions) in alice's tenant, whose plan allows 3."""
    made = orders_topic(owner, 2)
    tenant = owner.memberships.get().tenant
    tenant.plan = Plan.objects.create(name="free", max_partitions=3)
    tenant.save()
    return made


def test_create_topics_and_partitions_past_the_plan_are_a_policy_violation(kafka, topic):
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    admin = AdminClient(kafka.confluent())
    [created] = admin.create_topics([NewTopic("/mapr/c1/apps:more", 2)]).values()
    with pytest.raises(KafkaException) as refused:
        created.result(20)
    error = refused.value.args[0]
    assert error.code() == KafkaError.POLICY_VIOLATION
    assert "plan 'free' allows 3 partitions" in error.str()
    [grown] = admin.create_partitions([NewPartitions("/mapr/c1/apps:orders", 4)]).values()
    with pytest.raises(KafkaException) as too_many:
        grown.result(20)
    assert too_many.value.args[0].code() == KafkaError.POLICY_VIOLATION
    [within] = admin.create_partitions([NewPartitions("/mapr/c1/apps:orders", 3)]).values()
    within.result(20)
    assert list(Topic.objects.values_list("name", "partitions")) == [("orders", 3)]


def test_a_produce_when_stored_bytes_reach_the_plan_fails_without_retry(kafka, topic):
    from confluent_kafka import KafkaError, Producer

    Plan.objects.filter(name="free").update(max_stored_bytes=0)
    errors: list[KafkaError] = []
    producer = Producer(kafka.confluent(**{"message.timeout.ms": 20000}))
    producer.produce("/mapr/c1/apps:orders", b"x", partition=0,
                     on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(30) == 0
    assert [e.code() for e in errors] == [KafkaError.POLICY_VIOLATION]
    # librdkafka shows only the code; the plan's words travel in the answer's error_message
    assert store_for(topic.stream.cluster).watermarks(topic.stream.uuid, "orders")[0] == (0, 0)


def test_metadata_auto_creation_past_the_plan_answers_the_topic_with_policy_violation(
        kafka, topic, owner):
    from broker.errors import NONE, POLICY_VIOLATION
    from tests.broker.conftest import sasl_token
    from tests.broker.wire import Wire

    Topic.objects.filter(pk=topic.pk).update(partitions=3)  # the plan's 3 all used
    wire = Wire(kafka.bootstrap)
    assert wire.authenticate(owner.get_username(), sasl_token(owner)).error_code == NONE
    answer = wire.call(3, 4, topics=[{"name": "/mapr/c1/apps:auto"}],
                       allow_auto_topic_creation=True)
    assert [(t.name, t.error_code) for t in answer.topics] == [
        ("/mapr/c1/apps:auto", POLICY_VIOLATION)]
    assert not Topic.objects.filter(name="auto").exists()
    assert kafka.listeners.processes["k1"][0].poll() is None  # the listener goes on
