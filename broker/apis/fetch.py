"""Fetch (key 1): many partitions per request, read through messages_fetch_partitions
(consumeperm, the same check as REST consume) and sent as the store's record batches v2 with
the stored offsets, timestamps, keys and headers (invariant 1: a replica's offsets are its
origin's): the batch store's bytes as kept, the row store's encoded from its rows.

Long poll: while fewer than min_bytes are ready and max_wait has not passed, the request waits
on the event loop (never blocking it) for a produce through this listener to one of its topics
(broker/notify.py), or POLL_SECONDS, whichever comes first, then reads again. Fetch
sessions (KIP-227) are not kept: session id 0 makes clients send full requests.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import AbstractBaseUser

from broker import errors
from broker.apis.produce import error_of
from broker.codec import Records, build
from broker.dispatch import RequestHeader, handles, response_class
from broker.notify import wait_for_data
from broker.session import Session
from replication.engine.store import OffsetOutOfRange
from replication.quotas import FETCH
from replication.services.fetching import PartitionRead, messages_fetch_partitions
from replication.services.names import ResolvedTopic

POLL_SECONDS = 0.05  # how soon data produced elsewhere is seen by a waiting fetch


@dataclass(slots=True)
class TopicFetch:
    resolved: ResolvedTopic | None
    name: str
    reads: list[PartitionRead]
    codes: dict[int, tuple[Any, str | None]] = field(default_factory=dict)
    records: dict[int, Records] = field(default_factory=dict)


def _read_topic(actor: AbstractBaseUser, fetch: TopicFetch, max_bytes: int,
                committed: bool = False) -> int:
    """Read one topic's partitions; returns the bytes of records gathered."""
    fetch.codes.clear()
    fetch.records.clear()
    if fetch.resolved is None:
        for read in fetch.reads:
            fetch.codes[read.partition] = (errors.UNKNOWN_TOPIC_OR_PARTITION, None)
        return 0
    for read in fetch.reads:
        read.parts, read.error = (), None
    try:
        messages_fetch_partitions(actor=actor, stream=fetch.resolved.stream,
                                  topic=fetch.resolved.topic, reads=fetch.reads,
                                  max_bytes=max_bytes, committed=committed)
    except Exception as error:  # the whole topic refused (consumeperm, topic gone)
        code = error_of(error)
        for read in fetch.reads:
            fetch.codes[read.partition] = code
        return 0
    total = 0
    for read in fetch.reads:
        if isinstance(read.error, OffsetOutOfRange):
            fetch.codes[read.partition] = (errors.OFFSET_OUT_OF_RANGE, str(read.error))
        elif read.error is not None:
            fetch.codes[read.partition] = error_of(read.error)
        elif read.parts:
            records = fetch.records[read.partition] = Records(read.parts)
            total += records.size
    return total


def fetch_once(actor: AbstractBaseUser, fetches: list[TopicFetch], max_bytes: int,
               committed: bool = False) -> tuple[int, bool]:
    """Read every topic (in the thread pool): (bytes gathered, whether a partition failed);
    `committed`: read_committed."""
    total = 0
    for fetch in fetches:
        total += _read_topic(actor, fetch, max(max_bytes - total, 0), committed)
    return total, any(f.codes for f in fetches)


def _partition_entry(fetch: TopicFetch, read: PartitionRead) -> dict[str, Any]:
    code, message = fetch.codes.get(read.partition, (errors.NONE, None))
    del message  # Fetch responses carry no per-partition message; the listener logs it
    return {"partition_index": read.partition, "error_code": code,
            "high_watermark": read.high, "last_stable_offset": read.stable,
            "log_start_offset": read.low,
            "aborted_transactions": [{"producer_id": p, "first_offset": f}
                                     for p, f in read.aborted],
            "preferred_read_replica": -1, "records": fetch.records.get(read.partition, b"")}


@handles(1, 4, 12)
async def fetch(session: Session, header: RequestHeader, request: Any) -> Any:
    fetches = []
    for topic in request.topics:
        reads = [PartitionRead(p.partition, p.fetch_offset, max(p.partition_max_bytes, 1))
                 for p in topic.partitions]
        fetches.append(TopicFetch(await session.resolve(topic.topic), topic.topic, reads))
    wait = request.max_wait.total_seconds()
    deadline = time.monotonic() + wait
    max_bytes = max(request.max_bytes, 1)
    keys = [(f.resolved.stream.uuid, f.resolved.topic) for f in fetches if f.resolved]
    while True:
        total, failed = await session.run_sync(fetch_once, session.user, fetches, max_bytes,
                                               request.isolation_level == 1)
        left = deadline - time.monotonic()
        if total >= request.min_bytes or failed or left <= 0 or not keys:
            break
        await wait_for_data(keys, min(left, POLL_SECONDS))
    await session.throttle_for({f.resolved.stream.tenant_id for f in fetches if f.resolved}, FETCH)
    for f in fetches:
        for partition, (code, message) in f.codes.items():
            if code not in (errors.NONE, errors.OFFSET_OUT_OF_RANGE):
                session.note(f"fetch_{code.name}", topic=f.name, partition=partition,
                             message=message)
    return build(response_class(request), throttle_time=0, error_code=errors.NONE,
                 session_id=0, responses=[
                     {"topic": f.name, "partitions": [_partition_entry(f, r) for r in f.reads]}
                     for f in fetches])
