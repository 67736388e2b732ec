"""Kafka's Fetch and ListOffsets on a topic's partitions (the listener's broker/apis/fetch.py
and offsets.py): consumeperm checked once per topic through messages' authorization cache,
the stored batches read within Fetch's byte budget, read_committed stopping at the last stable
offset (issue 31), and the special timestamps of ListOffsets."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from django.contrib.auth.models import AbstractBaseUser

from replication.counters import CONSUMED, count_traffic
from replication.engine.store import OffsetOutOfRange
from replication.engine.stored import Fetched
from replication.engine.txnstate import TxnView, fetched_below
from replication.errors import NotFound
from replication.models import Stream, Topic
from replication.quotas import FETCH, quota_charge
from replication.services.messages import _granted, _on_store, topic_watermarks
from replication.services.topics import topic_of
from replication.stores import store_for


@dataclass(slots=True)
class PartitionRead:
    """One partition's read of a fetch; `messages`, the watermarks or `error` are filled in."""

    partition: int
    offset: int
    max_bytes: int
    parts: tuple[bytes, ...] = ()  # record batches, as Fetch sends them (Fetched.parts)
    low: int = -1
    high: int = -1
    error: Exception | None = None
    stable: int = -1  # the last stable offset (read_committed), else the high watermark
    aborted: list[tuple[int, int]] = field(default_factory=list)  # (producer id, first offset)



def messages_fetch_partitions(
    *, actor: AbstractBaseUser, stream: Stream, topic: str, reads: Sequence[PartitionRead],
    max_bytes: int = 50 << 20, committed: bool = False,
) -> Topic:
    """messages_consume for several partitions of one topic (consumeperm checked), with each
    partition's watermarks; reads stop adding batches once `max_bytes` (of record batches as
    they go on the wire) is reached. As Kafka, only the first partition with data may go past
    it, by its first batch, so a consumer never stalls on a batch larger than its fetch
    size. `committed` (Kafka's read_committed): each partition read up to its last stable
    offset, with the aborted transactions of what is read."""
    target = _granted(actor, stream, topic, "consumeperm", lambda: topic_of(stream, topic),
                      (r.partition for r in reads))
    store = store_for(stream.cluster)
    committed = committed and store.KEEPS_BATCHES  # a row store holds no transaction
    together: tuple[list[Fetched], list[TxnView]] | None = None
    if store.KEEPS_BATCHES and sum(r.max_bytes for r in reads) <= max_bytes:
        # The budget cannot stop a partition before its own: every read in one go (and on
        # PostgreSQL one round trip), the watermarks and transactions with them.
        marks, found, views = _on_store(target, lambda: store.fetch_partitions(  # type: ignore
            stream.uuid, target.name, [(r.partition, r.offset, r.max_bytes) for r in reads],
            committed))
        together = (found, views)
    else:
        marks = _on_store(target, lambda: store.watermarks(stream.uuid, target.name))
    left, count, nbytes = max_bytes, 0, 0
    for i, read in enumerate(reads):
        if read.partition not in marks:
            read.error = NotFound(f"partition {read.partition} does not exist: {target} has "
                                  f"partitions 0 to {target.partitions - 1}")
            continue
        read.low, read.high = marks[read.partition]
        read.stable = read.high
        if not read.low <= read.offset <= read.high:
            read.error = OffsetOutOfRange(read.offset, read.low, read.high)
            continue
        if together is not None:
            if committed:
                read.stable, read.aborted = together[1][i]
        elif committed:
            read.stable, read.aborted = store.txn_view(  # type: ignore[attr-defined]
                stream.uuid, target.name, read.partition, read.offset, read.high)
        if read.offset < read.stable and left > 0:
            if together is not None:  # stopped at the last stable offset already
                fetched = together[0][i]
            else:
                fetched = store.fetch(stream.uuid, target.name, read.partition, read.offset,
                                      min(read.max_bytes, left))
                if read.stable < read.high:
                    fetched = fetched_below(fetched, read.stable)
            size = fetched.size
            if count and size > left:
                continue  # a lone oversized batch: only the first partition may send one
            read.parts, left = fetched.parts, left - size
            count, nbytes = count + fetched.records, nbytes + fetched.nbytes
    if count:
        count_traffic(direction=CONSUMED, stream=stream.uuid, messages=count, nbytes=nbytes)
        quota_charge(stream.tenant_id, FETCH, nbytes)
    return target


# Kafka's ListOffsets special timestamps; MAX_TIMESTAMP is KIP-734's (ListOffsets v7).
EARLIEST, LATEST, MAX_TIMESTAMP = -2, -1, -3


def partition_offsets(
    *, actor: AbstractBaseUser, stream: Stream, topic: str, queries: Sequence[tuple[int, int]],
    committed: bool = False,
) -> list[tuple[int, Exception | None, int, int]]:
    """Kafka's ListOffsets for one topic (consumeperm): per (partition, timestamp) the
    (partition, error, offset, timestamp) of the earliest (-2) or next (-1) offset, of the
    message with the largest timestamp (-3), or of the first message at or after the
    timestamp (offset -1 when none is). `committed` (read_committed): latest is the last
    stable offset."""
    target = _granted(actor, stream, topic, "consumeperm", lambda: topic_of(stream, topic),
                      (partition for partition, _ in queries))
    store = store_for(stream.cluster)
    marks = topic_watermarks(target)
    out: list[tuple[int, Exception | None, int, int]] = []
    for partition, ts in queries:
        if partition not in marks:
            out.append((partition, NotFound(f"partition {partition} does not exist: {target} "
                                            f"has partitions 0 to {target.partitions - 1}"),
                        -1, -1))
        elif ts == LATEST and committed and store.KEEPS_BATCHES:  # read_committed: the LSO
            high = marks[partition][1]
            stable = store.txn_view(  # type: ignore[attr-defined]
                stream.uuid, target.name, partition, high, high).stable
            out.append((partition, None, stable, -1))
        elif ts in (EARLIEST, LATEST):
            out.append((partition, None, marks[partition][ts == LATEST], -1))
        elif ts == MAX_TIMESTAMP:
            found = store.max_timestamp(stream.uuid, target.name, partition)
            out.append((partition, None, *(found or (-1, -1))))
        else:
            found = store.offset_for_time(stream.uuid, target.name, partition, ts)
            out.append((partition, None, *(found or (-1, -1))))
    return out
