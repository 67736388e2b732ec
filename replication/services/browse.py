"""The portal's message browser: a topic's messages filtered by partition, offset range, time
range, key and a text in the value, newest first (or oldest first), across partitions.

Reads go through `messages_consume` (consumeperm, the consumed-message counters) a chunk at a
time; a time range narrows each partition's offset range first by binary search on the
timestamps, and the key and text filters scan at most SCAN_BUDGET messages a request (the
answer says when it stopped early, so a person narrows the range rather than waits).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.contrib.auth.models import AbstractBaseUser

from replication.engine.store import Message, OffsetOutOfRange
from replication.engine.storebase import MessageStore
from replication.errors import InvalidInput
from replication.models import Stream, Topic
from replication.services.messages import _on_store, messages_consume
from replication.services.topics import topic_of
from replication.stores import store_for

CHUNK = 500
SCAN_BUDGET = 20_000


@dataclass
class BrowseQuery:
    topic: str
    partition: int | None = None  # None: every partition
    from_offset: int | None = None
    to_offset: int | None = None  # inclusive
    since_ms: int | None = None
    until_ms: int | None = None  # exclusive
    key: str = ""
    text: str = ""
    newest_first: bool = True
    limit: int = 50


@dataclass
class BrowseResult:
    messages: list[Message]
    scanned: int = 0
    stopped_early: bool = False  # the scan budget ran out before the range did
    ranges: dict[int, tuple[int, int]] = field(default_factory=dict)  # partition -> [lo, hi)


def offset_for_time(store: MessageStore, stream: Stream, topic: Topic, partition: int,
                    low: int, high: int, at_ms: int) -> int:
    """The first offset in [low, high) whose timestamp is at or after at_ms (high when none),
    by binary search, as Kafka's offsetsForTimes over its time index."""
    while low < high:
        mid = (low + high) // 2
        try:
            found = store.read(stream.uuid, topic.name, partition, mid, limit=1)
        except OffsetOutOfRange:  # expired meanwhile: search above it
            low = mid + 1
            continue
        if found and found[0].timestamp_ms >= at_ms:
            high = mid
        else:
            low = mid + 1
    return low


def _ranges(stream: Stream, topic: Topic, q: BrowseQuery) -> dict[int, tuple[int, int]]:
    store = store_for(stream.cluster)
    marks = _on_store(topic, lambda: store.watermarks(stream.uuid, topic.name))
    wanted = [q.partition] if q.partition is not None else sorted(marks)
    ranges = {}
    for p in wanted:
        low, high = marks.get(p, (0, 0))
        lo = max(low, q.from_offset if q.from_offset is not None else low)
        hi = min(high, q.to_offset + 1 if q.to_offset is not None else high)
        if q.since_ms is not None and lo < hi:
            lo = offset_for_time(store, stream, topic, p, lo, hi, q.since_ms)
        if q.until_ms is not None and lo < hi:
            hi = offset_for_time(store, stream, topic, p, lo, hi, q.until_ms)
        ranges[p] = (lo, max(lo, hi))
    return ranges


def _matches(m: Message, key: bytes, text: bytes) -> bool:
    if key and (m.key is None or key not in m.key):
        return False
    return not text or (m.value is not None and text in m.value)  # a null value holds no text


def _scan(actor: AbstractBaseUser, stream: Stream, q: BrowseQuery, partition: int,
          lo: int, hi: int, budget: int) -> tuple[list[Message], int]:
    """Up to q.limit matches of one partition's [lo, hi), from the end or the start."""
    key, text = q.key.encode(), q.text.encode()
    found: list[Message] = []
    scanned = 0
    while lo < hi and len(found) < q.limit and scanned < budget:
        size = min(CHUNK, hi - lo, budget - scanned)
        start = hi - size if q.newest_first else lo
        read = messages_consume(actor=actor, stream=stream, topic=q.topic, partition=partition,
                                offset=start, limit=size)
        chunk = [m for m in read if m.offset < start + size]
        scanned += max(len(chunk), 1)
        hits = [m for m in chunk if _matches(m, key, text)]
        found += reversed(hits) if q.newest_first else hits
        if q.newest_first:
            hi = start
        else:
            # A compacted partition's gaps (issue 31): an empty window is passed, not the end.
            lo = (chunk[-1].offset + 1) if chunk else (start + size if read else hi)
    return found[: q.limit], scanned


def messages_browse(*, actor: AbstractBaseUser, stream: Stream, q: BrowseQuery) -> BrowseResult:
    """The first q.limit messages matching q, newest first by timestamp (then offset) unless
    q.newest_first is False."""
    topic = topic_of(stream, q.topic)
    if q.partition is not None and not 0 <= q.partition < topic.partitions:
        raise InvalidInput(f"partition {q.partition} does not exist: {topic} has partitions 0 "
                           f"to {topic.partitions - 1}", field="partition")
    if q.from_offset is not None and q.to_offset is not None and q.to_offset < q.from_offset:
        raise InvalidInput("the offset range ends before it starts: swap the two offsets",
                           field="to_offset")
    stream.require(actor, "consumeperm", action="consume")
    ranges = _ranges(stream, topic, q)
    result = BrowseResult([], ranges=ranges)
    budget = SCAN_BUDGET
    for partition, (lo, hi) in ranges.items():
        found, scanned = _scan(actor, stream, q, partition, lo, hi, budget)
        result.messages += found
        result.scanned += scanned
        budget -= scanned
        if budget <= 0:
            result.stopped_early = True
            break
    result.messages.sort(key=lambda m: (m.timestamp_ms, m.partition, m.offset),
                         reverse=q.newest_first)
    del result.messages[q.limit:]
    return result
