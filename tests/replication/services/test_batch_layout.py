"""The domain's produce and consume on a batch store (issue 30): a REST produce is one batch a
partition, compressed with the stream's `-compression`; consume decodes it."""

from __future__ import annotations

import pytest

from replication.engine.recordbatch import GZIP, LZ4, NONE, SNAPPY
from replication.engine.store import Record
from replication.errors import StreamgateError
from replication.services import topic_create
from replication.services.messages import messages_consume, messages_produce
from replication.stores import store_for
from tests.factories import ClusterFactory, StreamFactory


@pytest.fixture
def batch_cluster(db, settings):
    settings.STORE_LAYOUT = "batches"  # a new cluster's store is made a batch store
    cluster = ClusterFactory(name="batchland")
    assert store_for(cluster).KEEPS_BATCHES
    return cluster


@pytest.mark.parametrize(("compression", "codec"), [
    ("off", NONE), ("lz4", LZ4), ("zlib", GZIP), ("lzf", SNAPPY)])
def test_rest_produce_stores_one_batch_compressed_as_the_stream_says(
        owner, batch_cluster, compression, codec):
    stream = StreamFactory(cluster=batch_cluster, name=f"s{compression}", created_by=owner,
                           compression=compression)
    topic_create(actor=owner, stream=stream, name="t", partitions=1)
    records = [Record(b'{"user": %d, "page": "/home"}' % i, key=b"k") for i in range(50)]
    placed = messages_produce(actor=owner, stream=stream, topic="t", records=records)
    assert placed == [(0, i) for i in range(50)]
    fetched = store_for(batch_cluster).fetch(stream.uuid, "t", 0, 0, 1 << 20)
    assert fetched.records == 50
    assert int.from_bytes(fetched.data[21:23], "big") & 0x07 == codec
    if codec != NONE:
        assert len(fetched.data) < fetched.nbytes  # stored compressed
    got = messages_consume(actor=owner, stream=stream, topic="t", offset=10, limit=5)
    assert [(m.offset, m.value) for m in got] == [(i, records[i].value) for i in range(10, 15)]


def test_an_outsider_reads_nothing_of_a_batch_store(owner, outsider, batch_cluster):
    stream = StreamFactory(cluster=batch_cluster, name="private", created_by=owner)
    topic_create(actor=owner, stream=stream, name="t", partitions=1)
    messages_produce(actor=owner, stream=stream, topic="t", records=[Record(b"secret")])
    with pytest.raises(StreamgateError):
        messages_consume(actor=outsider, stream=stream, topic="t")
