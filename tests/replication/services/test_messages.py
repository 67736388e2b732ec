import threading
import time

import pytest

from replication.engine.store import Record
from replication.errors import InvalidInput, NotFound, PermissionDenied
from replication.models import Topic
from replication.services import replica_add, stream_edit, topic_create, topic_edit, upstream_add
from replication.services.cursors import cursor_commit, cursor_list
from replication.services.messages import messages_consume, messages_produce
from replication.services.purge import stream_expire
from replication.services.streams import stream_delete
from replication.stores import close_stores, store_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def clicks(owner, activity):
    return topic_create(actor=owner, stream=activity, name="clicks", partitions=3)


def produce(owner, stream, records, topic="clicks"):
    return messages_produce(actor=owner, stream=stream, topic=topic, records=records)


def test_messages_round_trip_bit_for_bit(owner, activity, clicks):
    sent = [
        Record(value=b"\x00\xffbinary\x00", key=b"k1", headers=(("h", b"\x01\x02"),),
               partition=1),
        Record(value=b"", key=None, partition=1),
        Record(value="héllo".encode(), key=b"", partition=1, timestamp_ms=1_700_000_000_000),
    ]
    assert produce(owner, activity, sent) == [(1, 0), (1, 1), (1, 2)]
    got = messages_consume(actor=owner, stream=activity, topic="clicks", partition=1)
    assert [(m.offset, m.key, m.value, m.headers) for m in got] == [
        (0, b"k1", b"\x00\xffbinary\x00", (("h", b"\x01\x02"),)),
        (1, None, b"", ()),
        (2, b"", "héllo".encode(), ()),
    ]
    assert got[2].timestamp_ms == 1_700_000_000_000
    assert all(m.origin == activity.uuid for m in got)


def test_keys_pick_a_stable_partition(owner, activity, clicks):
    placed = produce(owner, activity, [Record(value=b"x", key=b"user-42")] * 5)
    assert len({partition for partition, _ in placed}) == 1
    assert [offset for _, offset in placed] == [0, 1, 2, 3, 4]


def test_produce_needs_produceperm(member, activity, clicks):
    with pytest.raises(PermissionDenied, match="produceperm"):
        produce(member, activity, [Record(value=b"x")])


def test_consume_needs_consumeperm(member, activity, clicks):
    with pytest.raises(PermissionDenied, match="consumeperm"):
        messages_consume(actor=member, stream=activity, topic="clicks")


def test_first_produce_creates_the_topic_when_autocreate_is_on(owner, activity):
    produce(owner, activity, [Record(value=b"x")], topic="fresh")
    assert activity.topics.get(name="fresh").origin_uuid == activity.uuid


def test_without_autocreate_an_unknown_topic_is_refused(owner, activity):
    stream_edit(actor=owner, stream=activity, autocreate=False)
    with pytest.raises(NotFound, match="autocreate is false"):
        produce(owner, activity, [Record(value=b"x")], topic="fresh")
    assert not Topic.objects.filter(name="fresh").exists()


def test_oversized_message_is_refused_and_consumes_no_offset(owner, activity, clicks, settings):
    settings.MAX_MESSAGE_BYTES = 1000
    with pytest.raises(InvalidInput, match="over the maximum message size of 1000 bytes"):
        produce(owner, activity, [Record(value=b"ok", partition=0),
                                  Record(value=b"x" * 1001, partition=0)])
    assert produce(owner, activity, [Record(value=b"ok", partition=0)]) == [(0, 0)]


def test_a_partition_that_does_not_exist_is_refused(owner, activity, clicks):
    with pytest.raises(InvalidInput, match="partitions 0 to 2"):
        produce(owner, activity, [Record(value=b"x", partition=3)])


def test_new_partitions_take_messages(owner, activity, clicks):
    topic_edit(actor=owner, stream=activity, name="clicks", partitions=5)
    assert produce(owner, activity, [Record(value=b"x", partition=4)]) == [(4, 0)]


def test_producing_to_a_replicated_topic_is_refused(owner, activity, activity_ny, clicks):
    replica_add(actor=owner, source=activity, replica=activity_ny)
    upstream_add(actor=owner, replica=activity_ny, source=activity)
    with pytest.raises(InvalidInput, match="replicated from /mapr/sanfrancisco/activity"):
        produce(owner, activity_ny, [Record(value=b"x")])


def test_an_offset_out_of_range_names_the_valid_range(owner, activity, clicks):
    produce(owner, activity, [Record(value=b"x", partition=0)] * 3)
    with pytest.raises(InvalidInput, match="offset 9 is out of range"):
        messages_consume(actor=owner, stream=activity, topic="clicks", offset=9)
    assert messages_consume(actor=owner, stream=activity, topic="clicks", offset=3) == []


def test_long_poll_returns_when_data_arrives(owner, activity, clicks):
    def later() -> None:
        time.sleep(0.3)
        produce(owner, activity, [Record(value=b"late", partition=0)])

    threading.Thread(target=later).start()
    started = time.monotonic()
    got = messages_consume(actor=owner, stream=activity, topic="clicks", wait_ms=5000)
    assert [m.value for m in got] == [b"late"]
    assert 0.25 < time.monotonic() - started < 3


def test_cursors_commit_and_survive_a_store_restart(owner, activity, clicks):
    produce(owner, activity, [Record(value=b"x", partition=2)] * 4)
    cursor_commit(actor=owner, stream=activity, group="billing", topic="clicks",
                  partition=2, offset=3)
    close_stores()  # as when the process restarts
    assert cursor_list(actor=owner, stream=activity, topic="clicks", group="billing") == [
        {"group": "billing", "partition": 2, "offset": 3}
    ]


def test_a_cursor_is_kept_as_committed_past_the_end_or_back(owner, activity, clicks):
    for offset in (5, 2):  # as Kafka: where to read next is the consumer's business
        cursor_commit(actor=owner, stream=activity, group="g", topic="clicks",
                      partition=0, offset=offset, metadata="m")
        assert cursor_list(actor=owner, stream=activity, topic="clicks", group="g") == [
            {"group": "g", "partition": 0, "offset": offset}]


def test_a_negative_cursor_or_oversized_metadata_is_refused(owner, activity, clicks):
    with pytest.raises(InvalidInput, match="offset -1 is negative"):
        cursor_commit(actor=owner, stream=activity, group="g", topic="clicks",
                      partition=0, offset=-1)
    with pytest.raises(InvalidInput, match="4097 bytes: at most 4096"):
        cursor_commit(actor=owner, stream=activity, group="g", topic="clicks",
                      partition=0, offset=0, metadata="x" * 4097)


def test_ttl_deletes_only_expired_messages_and_offsets_go_on(owner, activity, clicks):
    stream_edit(actor=owner, stream=activity, ttl=60)
    now = int(time.time() * 1000)
    old = [Record(value=b"old", partition=0, timestamp_ms=now - 120_000)] * 3
    young = [Record(value=b"young", partition=0, timestamp_ms=now)] * 2
    # Two produce calls: a batch store expires whole batches, so the young are not in the old's.
    produce(owner, activity, old)
    produce(owner, activity, young)
    assert stream_expire(stream=activity, batch=2) == 3
    got = messages_consume(actor=owner, stream=activity, topic="clicks", offset=3)
    assert [m.value for m in got] == [b"young", b"young"]
    with pytest.raises(InvalidInput, match="out of range"):
        messages_consume(actor=owner, stream=activity, topic="clicks", offset=0)
    assert produce(owner, activity, [Record(value=b"next", partition=0)]) == [(0, 5)]


def test_ttl_zero_keeps_messages_forever(owner, activity, clicks):
    stream_edit(actor=owner, stream=activity, ttl=0)
    produce(owner, activity, [Record(value=b"old", partition=0, timestamp_ms=1)])
    assert stream_expire(stream=activity) == 0


def test_deleting_a_stream_deletes_its_messages(owner, activity, clicks):
    produce(owner, activity, [Record(value=b"x", partition=0)])
    cluster, uuid = activity.cluster, activity.uuid
    stream_delete(actor=owner, stream=activity)
    assert store_for(cluster).sizes(uuid)["numtopics"] == 0


def test_stream_and_topic_info_report_the_stores_figures(owner, activity, clicks):
    from portal.rest import rows as reports

    produce(owner, activity, [Record(value=b"abcd", partition=1, timestamp_ms=5000)] * 3)
    cursor_commit(actor=owner, stream=activity, group="g", topic="clicks", partition=1,
                  offset=1)
    # The store's logical bytes: key+value+headers on a row store (12 here), the records
    # section uncompressed on a batch store; the values' 12 bytes either way at least.
    stats = store_for(activity.cluster).partition_stats(activity.uuid, "clicks")
    logical = sum(p.bytes for p in stats)
    assert logical >= 12
    info = reports.stream_info(activity, show_aces=False)
    assert (info["logicalsize"], info["numtopics"]) == (logical, 1)
    assert info["physicalsize"] > 0
    [row] = reports.topic_rows(activity)
    assert (row["logicalsize"], row["consumers"], row["maxlag"]) == (logical, 1, 2)
    partitions = reports.partition_rows(clicks)
    assert [p["maxoffset"] for p in partitions] == [-1, 2, -1]
    assert partitions[1]["minoffsetacrossconsumers"] == 1


def test_a_topic_deleted_and_produced_again_starts_anew(owner, activity, clicks):
    from replication.services import topic_delete

    produce(owner, activity, [Record(value=b"old", partition=0)] * 2)
    topic_delete(actor=owner, stream=activity, name="clicks")
    assert produce(owner, activity, [Record(value=b"new")]) == [(0, 0)]
    got = messages_consume(actor=owner, stream=activity, topic="clicks")
    assert [m.value for m in got] == [b"new"]


def test_a_logappendtime_topic_stamps_messages_when_stored(owner, activity):
    topic_create(actor=owner, stream=activity, name="audit", timestamptype="logappendtime")
    before = int(time.time() * 1000)
    produce(owner, activity, [Record(value=b"x", timestamp_ms=7)], topic="audit")
    [message] = messages_consume(actor=owner, stream=activity, topic="audit")
    assert message.timestamp_ms >= before
