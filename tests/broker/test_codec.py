"""kio entities built from plain values for any version: fields the version lacks dropped,
missing ones zeroed, nested (and nullable nested) arrays built from dicts."""

from __future__ import annotations

import datetime

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
