"""kio entities built from plain values for any version: fields the version lacks dropped,
missing ones zeroed, nested (and nullable nested) arrays built from dicts."""

from __future__ import annotations

import datetime
import uuid

from kio.schema.metadata.v0.response import MetadataResponse as MetadataV0
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.metadata.v12.response import MetadataResponse as MetadataV12

from broker.codec import build, encode, reader
from broker.errors import UNKNOWN_TOPIC_OR_PARTITION

VALUES = {"throttle_time": 5, "cluster_id": "c", "brokers": [{"node_id": 1, "host": "h",
                                                               "port": 9092}],
          "topics": [{"name": "t", "error_code": 3, "partitions": [{"partition_index": 0}]}]}


def test_one_description_builds_every_version():
    old, new = build(MetadataV0, **VALUES), build(MetadataV12, **VALUES)
    assert not hasattr(old, "cluster_id") and new.cluster_id == "c"
    assert new.throttle_time == datetime.timedelta(milliseconds=5)
    assert new.topics[0].error_code == UNKNOWN_TOPIC_OR_PARTITION
    assert new.topics[0].partitions[0].isr_nodes == ()
    for entity in (old, new):
        assert reader(type(entity))(encode(entity), 0)[0] == entity


def test_nullable_arrays_of_entities_are_built_from_dicts_or_left_null():
    named = build(MetadataRequest, topics=[{"name": "orders"}])
    assert named.topics[0].name == "orders"
    assert build(MetadataRequest, topics=None).topics is None


def test_a_spliced_array_encodes_as_the_whole_response_would_in_every_version():
    """Metadata for every topic sends each topic's entry encoded once (issue 33): spliced into
    the response, the bytes are exactly kio's for the whole response, in every version, the
    throttle applied after the fact included."""
    from kio.index import load_response_schema

    from broker.codec import Spliced, encode_frame, item_class
    from broker.dispatch import _throttled

    topics = [{"name": f"t{i}", "error_code": 3 * (i % 2), "topic_id": uuid.uuid4(),
               "partitions": [{"partition_index": p, "leader_id": 1} for p in range(i)]}
              for i in range(4)]
    for version in range(13):
        cls = load_response_schema(3, version)
        topic_cls = item_class(cls, "topics")
        answer = {**VALUES, "controller_id": 1, "cluster_authorized_operations": 7}
        marker = build(topic_cls, name="marker-occurring-nowhere-else")
        spliced = Spliced(build(cls, **{**answer, "topics": [marker]}), marker,
                          [encode(build(topic_cls, **t)) for t in topics])
        whole = build(cls, **{**answer, "topics": topics})
        assert encode_frame(spliced) == encode_frame(whole), version
        throttled = _throttled(spliced, datetime.timedelta(milliseconds=250))
        assert encode_frame(throttled) == encode_frame(
            _throttled(whole, datetime.timedelta(milliseconds=250))), version
    empty = Spliced(build(cls, **{**answer, "topics": [marker]}), marker, [])
    assert encode_frame(empty) == encode_frame(build(cls, **{**answer, "topics": []}))


def test_a_fetch_sends_its_record_batches_as_they_are_in_every_version():
    """A Fetch partition's batches (Fetched.parts) go into the response frame as parts of
    their own, the very objects the store or the cache gave, and the frame's bytes are kio's
    for the same response with the batches joined."""
    from kio.schema.fetch.v4.response import FetchResponse as FetchV4
    from kio.schema.fetch.v11.response import FetchResponse as FetchV11
    from kio.schema.fetch.v12.response import FetchResponse as FetchV12

    from broker.codec import Records, encode_frame, frame_parts

    batches = (b"a" * 40_000, b"b" * 70_000, b"c" * 10)  # large and small, as a fetch gets
    for cls in (FetchV4, FetchV11, FetchV12):
        def response(records, cls=cls):
            return build(cls, responses=[{"topic": "t", "partitions": [
                {"partition_index": p, "high_watermark": 9, "records": records}
                for p in (0, 1)]}])
        parts = frame_parts(response(Records(batches)))
        assert b"".join(parts) == encode_frame(response(b"".join(batches)))
        assert sum(part is batches[0] for part in parts) == 2, cls  # not copied
        assert int.from_bytes(parts[0][:4], "big") == sum(map(len, parts)) - 4
        assert reader(cls)(b"".join(parts)[4:], 0)[0] == response(b"".join(batches))
