"""Kafka transactions on a batch store (issue 31), with confluent-kafka's transactional
producer against real listener processes: commit and abort with markers, read_committed and
read_uncommitted consumers, offsets committed with the transaction, fencing by epoch, a
listener killed -9 mid-transaction, another tenant refused the transactional id."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from rest_framework.test import APIClient

from replication.models import KafkaTransaction, TxnState
from replication.stores import store_for
from tests.factories import ClusterFactory, StreamFactory, TopicFactory

pytestmark = pytest.mark.slow
NAME = "/mapr/ktxn/apps:orders"


@pytest.fixture
def txn_topic(owner, settings):
    settings.STORE_LAYOUT = "batches"
    stream = StreamFactory(cluster=ClusterFactory(name="ktxn"), name="apps", created_by=owner,
                           tenant=owner.memberships.get().tenant)
    topic = TopicFactory(stream=stream, name="orders", partitions=2)
    store = store_for(stream.cluster)
    assert store.KEEPS_BATCHES
    store.ensure_topic(stream.uuid, "orders", 2)
    return topic


def _producer(kafka, tid: str, **extra: object) -> Producer:
    producer = Producer(kafka.confluent(**{"transactional.id": tid, **extra}))
    producer.init_transactions(30)
    return producer


def _values(kafka, isolation: str, expect: int) -> list[bytes]:
    consumer = Consumer(kafka.confluent(**{"group.id": f"r-{uuid.uuid4().hex[:6]}",
                                           "isolation.level": isolation,
                                           "enable.auto.commit": False}))
    consumer.assign([TopicPartition(NAME, p, 0) for p in (0, 1)])
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and len(got) <= expect:
        got += [m.value() for m in consumer.consume(100, timeout=1) if m.error() is None]
        if len(got) == expect:  # and nothing more within a second
            got += [m.value() for m in consumer.consume(100, timeout=1) if m.error() is None]
            break
    consumer.close()
    return sorted(got)


def test_read_committed_sees_committed_transactions_only_and_offsets_commit_with_them(
        kafka, txn_topic):
    producer = _producer(kafka, "billing-tx")
    group = Consumer(kafka.confluent(**{"group.id": "billing", "enable.auto.commit": False}))
    producer.begin_transaction()
    for p in (0, 1):
        producer.produce(NAME, b"kept-%d" % p, partition=p)
    producer.send_offsets_to_transaction([TopicPartition(NAME, 0, 7)],
                                         group.consumer_group_metadata(), 30)
    producer.commit_transaction(30)
    producer.begin_transaction()
    for p in (0, 1):
        producer.produce(NAME, b"dropped-%d" % p, partition=p)
    producer.send_offsets_to_transaction([TopicPartition(NAME, 0, 99)],
                                         group.consumer_group_metadata(), 30)
    producer.abort_transaction(30)
    assert _values(kafka, "read_committed", 2) == [b"kept-0", b"kept-1"]
    assert _values(kafka, "read_uncommitted", 4) == [b"dropped-0", b"dropped-1", b"kept-0",
                                                      b"kept-1"]
    committed = group.committed([TopicPartition(NAME, 0)], timeout=20)
    group.close()
    assert committed[0].offset == 7  # the aborted transaction's 99 never landed
    stream = txn_topic.stream
    stored = store_for(stream.cluster).fetch(stream.uuid, "orders", 0, 0, 1 << 20).data
    assert len(stored) > 0 and _control_types(stored) == [1, 0]  # COMMIT, then ABORT


def _control_types(data: bytes) -> list[int]:
    """The control records' types (1 commit, 0 abort) of the stored batches, in order."""
    from replication.engine.stored import records_of
    from tests.batches import split_batches

    out = []
    for raw in split_batches(data):
        if int.from_bytes(raw[21:23], "big") & 0x20:
            out.append(int.from_bytes(records_of(raw)[1][0].key[2:4], "big"))
    return out


def test_an_open_transaction_holds_read_committed_at_its_first_offset(kafka, txn_topic, owner,
                                                                     outsider):
    plain = Producer(kafka.confluent())
    plain.produce(NAME, b"before", partition=0)
    plain.flush(10)
    producer = _producer(kafka, "open-tx")
    producer.begin_transaction()
    producer.produce(NAME, b"pending", partition=0)
    producer.flush(10)
    plain.produce(NAME, b"after", partition=0)
    plain.flush(10)
    assert _values(kafka, "read_committed", 1) == [b"before"]  # stops at the open one
    lister = Consumer(kafka.confluent(**{"group.id": "lso", "isolation.level": "read_committed"}))
    low, high = lister.get_watermark_offsets(TopicPartition(NAME, 0), timeout=10, cached=False)
    lister.close()
    assert (low, high) == (0, 1)  # the last stable offset
    assert _shown(txn_topic, owner, outsider) == (1, [1])
    producer.commit_transaction(30)
    assert _shown(txn_topic, owner, outsider) == (4, [])  # the marker took offset 3
    assert _values(kafka, "read_committed", 3) == [b"after", b"before", b"pending"]


def _shown(topic, owner, outsider) -> tuple[int, list[int]]:  # type: ignore[no-untyped-def]
    """Partition 0's last stable offset and open transactions' first offsets, as `stream topic
    info` (/rest, the CLI) and the API show them alike; the outsider sees no such topic."""
    client = APIClient()
    client.force_authenticate(owner)
    rest = client.get("/rest/stream/topic/info", {"path": topic.stream.path,
                                                  "topic": topic.name}).json()["data"][0]
    url = f"/api/v1/streams/{topic.stream.uuid}/topics/{topic.name}/transactions/"
    api = client.get(url).json()[0]
    assert (api["last_stable_offset"], [t["first_offset"] for t in api["open_transactions"]]) \
        == (rest["laststableoffset"], [t["firstoffset"] for t in rest["opentransactions"]])
    assert all(t["transactionalid"] == "open-tx" for t in rest["opentransactions"])
    client.force_authenticate(outsider)
    assert client.get(url).status_code == 404
    return rest["laststableoffset"], [t["firstoffset"] for t in rest["opentransactions"]]


def test_a_second_producer_with_the_same_transactional_id_fences_the_first(kafka, txn_topic):
    first = _producer(kafka, "fence-tx")
    first.begin_transaction()
    first.produce(NAME, b"zombie", partition=0)
    first.flush(10)
    second = _producer(kafka, "fence-tx")  # aborts the first's open transaction
    second.begin_transaction()
    second.produce(NAME, b"fresh", partition=1)
    second.commit_transaction(30)
    with pytest.raises(KafkaException) as fenced:
        first.commit_transaction(30)
    assert fenced.value.args[0].code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                           KafkaError.INVALID_PRODUCER_EPOCH)
    assert _values(kafka, "read_committed", 1) == [b"fresh"]


def test_a_listener_killed_mid_transaction_leaves_it_aborted_by_its_timeout(
        kafka_listeners, kafka, txn_topic):
    victim = kafka_listeners.start("k2")
    endpoint = type(kafka)(victim, kafka.username, kafka.password, kafka_listeners)
    producer = _producer(endpoint, "crash-tx", **{"transaction.timeout.ms": 3000})
    producer.begin_transaction()
    producer.produce(NAME, b"lost", partition=0)
    producer.flush(10)
    kafka_listeners.stop("k2", kill=True)
    deadline = time.monotonic() + 30
    while KafkaTransaction.objects.get(transactional_id="crash-tx").state != \
            TxnState.COMPLETE_ABORT:
        assert time.monotonic() < deadline, "the surviving listener did not abort it"
        time.sleep(0.2)
    plain = Producer(kafka.confluent())
    plain.produce(NAME, b"later", partition=0)
    plain.flush(10)
    assert _values(kafka, "read_committed", 1) == [b"later"]
    stream = txn_topic.stream
    stored = store_for(stream.cluster).fetch(stream.uuid, "orders", 0, 0, 1 << 20).data
    assert _control_types(stored) == [0]  # one ABORT marker, written once


def test_another_tenants_user_is_refused_the_transactional_id(kafka, txn_topic, outsider):
    _producer(kafka, "owned-tx")
    theirs = Producer(kafka.as_user(outsider).confluent(**{"transactional.id": "owned-tx"}))
    with pytest.raises(KafkaException) as refused:
        theirs.init_transactions(30)
    assert refused.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert KafkaTransaction.objects.get(transactional_id="owned-tx").epoch == 0


def test_a_transactional_batch_to_a_partition_not_added_is_refused_and_not_stored(
        kafka, txn_topic):
    from tests.broker.wire import Wire
    from tests.replication.engine.test_batchstore import _transactional

    wire = Wire(kafka.bootstrap)
    wire.authenticate(kafka.username, kafka.password)
    init = wire.call(22, 4, transactional_id="raw-tx", transaction_timeout=60_000,
                     producer_id=-1, producer_epoch=-1)
    assert init.error_code == 0
    batch = _transactional(1, init.producer_id, 0)[0].data

    def produce(tid: str | None) -> tuple[int, str | None]:
        answer = wire.call(0, 8, transactional_id=tid, acks=-1, timeout_ms=30_000, topic_data=[
            {"name": NAME, "partition_data": [{"index": 0, "records": batch}]}])
        found = answer.responses[0].partition_responses[0]
        return found.error_code, found.error_message

    assert produce("raw-tx")[0] == KafkaError.INVALID_TXN_STATE  # not added (KIP-890)
    assert produce(None)[0] == KafkaError.INVALID_MSG  # CORRUPT_MESSAGE: transactional, no id
    added = wire.call(24, 3, v3_and_below_transactional_id="raw-tx",
                      v3_and_below_producer_id=init.producer_id, v3_and_below_producer_epoch=0,
                      v3_and_below_topics=[{"name": NAME, "partitions": [0]}])
    assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code \
        == 0
    assert produce("raw-tx")[0] == 0
    wire.close()
    stream = txn_topic.stream
    assert store_for(stream.cluster).watermarks(stream.uuid, "orders")[0] == (0, 1)


def test_describe_and_list_transactions_show_the_tenants_own_only(kafka, txn_topic, outsider):
    from tests.broker.wire import Wire

    producer = _producer(kafka, "listed-tx")
    producer.begin_transaction()
    producer.produce(NAME, b"x", partition=1)
    producer.flush(10)

    def ask(endpoint) -> tuple[list, Any]:  # type: ignore[no-untyped-def]
        wire = Wire(kafka.bootstrap)
        wire.authenticate(endpoint.username, endpoint.password)
        listed = wire.call(66, 0, state_filters=[], producer_id_filters=[])
        described = wire.call(65, 0, transactional_ids=["listed-tx"])
        wire.close()
        return ([(t.transactional_id, t.transaction_state) for t in listed.transaction_states],
                described.transaction_states[0])

    listed, described = ask(kafka)
    assert listed == [("listed-tx", "Ongoing")]
    assert (described.error_code, described.transaction_state,
            [(t.topic, list(t.partitions)) for t in described.topics]) == (
        0, "Ongoing", [("orders", [1])])
    listed, described = ask(kafka.as_user(outsider))
    assert listed == [] and described.error_code == 105  # TRANSACTIONAL_ID_NOT_FOUND
    producer.abort_transaction(30)
