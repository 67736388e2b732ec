"""acks through the listener: acks=all waits for a synchronous replica as REST produce does
(the same replicas_await), acks=0 gets no response but the messages are stored, and producing
to a replica's copy of a topic is refused with an authorization error naming the origin."""

from __future__ import annotations

import os

import pytest
from confluent_kafka import KafkaError, Producer

from replication.services import replica_add, topic_create, upstream_add
from replication.stores import store_for
from tests.broker.conftest import (
    LISTENER_SETTINGS,
    KafkaEndpoint,
    KafkaListeners,
    sasl_token,
)
from tests.factories import ClusterFactory, StreamFactory, TopicFactory
from tests.workers import conftest as workers_conftest
from tests.workers.conftest import wait_until
from tests.workers.test_sync import replica_holds, running_engine

pytestmark = pytest.mark.slow


def deliver(config: dict, topic: str, values: list[bytes], **extra: object) -> list:
    reports: list = []
    producer = Producer({**config, **extra})
    for value in values:
        producer.produce(topic, value, on_delivery=lambda e, m: reports.append((e, m)))
        producer.flush(30)  # one at a time: each acknowledgement is checked on its own
    return reports


def test_acks_all_returns_only_once_the_synchronous_replica_holds_it(
    engine, owner, newyork, activity, activity_ny, tmp_path
):
    for cluster in (activity.cluster, activity_ny.cluster):
        store_for(cluster)
    topic_create(actor=owner, stream=activity, name="clicks", partitions=3)
    replica_add(actor=owner, source=activity, replica=activity_ny, synchronous=True)
    upstream_add(actor=owner, replica=activity_ny, source=activity)
    running_engine(engine, owner, newyork, activity, activity_ny)
    # The listener shares the engine's presence namespace, where gateways announce batches.
    listeners = KafkaListeners(tmp_path, {**os.environ, **LISTENER_SETTINGS,
                                          "DATABASE_URL": workers_conftest.test_database_url(),
                                          "STREAMGATE_NAMESPACE": engine.namespace})
    try:
        kafka = KafkaEndpoint(listeners.start("k1"), owner.get_username(), sasl_token(owner),
                              listeners)
        held = []

        def report(err, msg) -> None:  # type: ignore[no-untyped-def]
            assert err is None, err
            held.append(replica_holds(activity_ny, [(msg.partition(), msg.offset())]))

        producer = Producer(kafka.confluent(acks="all", **{"linger.ms": 0}))
        for i in range(15):
            producer.produce(f"{activity.path}:clicks", b"sync-%d" % i, on_delivery=report)
            producer.flush(30)
        assert held == [True] * 15
    finally:
        listeners.close()


def test_acks_0_gets_no_response_but_stores_the_messages(kafka, owner):
    stream = StreamFactory(cluster=ClusterFactory(name="c1"), name="apps", created_by=owner,
                           tenant=owner.memberships.get().tenant)
    TopicFactory(stream=stream, name="orders", partitions=1)
    store = store_for(stream.cluster)
    store.ensure_topic(stream.uuid, "orders", 1)
    deliver(kafka.confluent(), "/mapr/c1/apps:orders", [b"a", b"b", b"c"], acks=0)
    wait_until(lambda: store.watermarks(stream.uuid, "orders")[0][1] == 3, timeout=20)


def test_producing_to_a_replicas_topic_is_refused_naming_its_origin(kafka, owner):
    tenant = owner.memberships.get().tenant
    origin = StreamFactory(cluster=ClusterFactory(name="c1"), name="src", created_by=owner,
                           tenant=tenant)
    replica = StreamFactory(cluster=ClusterFactory(name="c2"), name="copy", created_by=owner,
                            tenant=tenant)
    TopicFactory(stream=replica, name="orders", origin_uuid=origin.uuid)
    seen: list = []
    reports = deliver(kafka.confluent(error_cb=seen.append), "/mapr/c2/copy:orders", [b"x"],
                      **{"message.timeout.ms": 5000})
    (err, _), = reports
    assert err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # librdkafka does not surface Produce's error_message; the listener logs it.
    assert "is replicated from /mapr/c1/src: produce to it there" in kafka.listeners.log()
