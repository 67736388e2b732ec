"""A connection's kept topic resolutions (broker/session.py, RESOLVE_CACHE_SECONDS) never hide
a change: partitions added through another listener, or a topic made on another connection of
the same listener, are answered at once (librdkafka's 0069 saw UNKNOWN_TOPIC_OR_PARTITION for a
partition the Metadata it had just read announced)."""

from broker.errors import NONE, UNKNOWN_TOPIC_OR_PARTITION
from replication.services import topic_edit
from tests.broker.conftest import orders_topic, sasl_token
from tests.broker.test_limits import CODECS, TOPIC, compressed_batch, produce_raw
from tests.broker.wire import Wire

PATH = TOPIC


def _signed_in(kafka, owner) -> Wire:  # type: ignore[no-untyped-def]
    wire = Wire(kafka.bootstrap)
    assert wire.authenticate(owner.get_username(), sasl_token(owner)).error_code == NONE
    return wire


def _list_offsets(wire: Wire, partition: int) -> int:
    answer = wire.call(2, 1, replica_id=-1, topics=[
        {"name": PATH, "partitions": [{"partition_index": partition, "timestamp": -1}]}])
    return answer.topics[0].partitions[0].error_code


def test_a_partition_added_elsewhere_is_answered_at_once(kafka, owner):
    topic = orders_topic(owner, 1)
    wire = _signed_in(kafka, owner)
    assert _list_offsets(wire, 0) == NONE  # the topic's resolution is now kept
    assert _list_offsets(wire, 2) == UNKNOWN_TOPIC_OR_PARTITION
    # Another process (this test's, as another listener would) adds two partitions.
    topic_edit(actor=owner, stream=topic.stream, name="orders", partitions=3)
    assert _list_offsets(wire, 2) == NONE
    assert _list_offsets(wire, 3) == UNKNOWN_TOPIC_OR_PARTITION


def test_a_topic_made_on_another_connection_is_seen_at_once(kafka, owner):
    orders_topic(owner, 1)
    first, second = _signed_in(kafka, owner), _signed_in(kafka, owner)
    fresh = "/mapr/c1/apps:fresh"

    def metadata() -> int:
        answer = first.call(3, 4, topics=[{"name": fresh}], allow_auto_topic_creation=False)
        return answer.topics[0].error_code

    assert metadata() == UNKNOWN_TOPIC_OR_PARTITION  # kept as absent
    made = second.call(19, 2, topics=[{"name": fresh, "num_partitions": 2,
                                       "replication_factor": -1, "assignments": [],
                                       "configs": []}], timeout_ms=10_000, validate_only=False)
    assert made.topics[0].error_code == NONE
    assert metadata() == NONE


def test_a_produce_to_a_partition_added_elsewhere_is_taken_at_once(kafka, owner):
    topic = orders_topic(owner, 1)
    wire = _signed_in(kafka, owner)
    batch = compressed_batch(CODECS["gzip"], [(8, 0)])
    assert produce_raw(wire, batch) == [(NONE, None)]  # the topic is now kept for produce
    topic_edit(actor=owner, stream=topic.stream, name="orders", partitions=3)
    assert [code for code, _ in produce_raw(wire, batch, batch, batch)] == [NONE] * 3
