"""The portal's message browser: a topic's messages filtered by partition, offset range, time
range, key and a text in the value, newest first (or oldest first), across partitions; paged
both ways by a position per partition, and started at an offset or a time.

Paging: a page's answer carries `older` and `newer`, a position per partition (the exclusive
upper bound of the older page, the inclusive lower bound of the newer one). Asked again with
`before=older` (or `after=newer`), the next page holds exactly the messages after those of
this page in that direction, on every partition: no message skipped, none shown twice,
whatever the merge by timestamp cut. `at_offset` and `at_ms` start a page at an offset or a
time on every partition (read forward from there), inside the filters' range.

Reads go through `messages_consume` (consumeperm, the consumed-message counters) a chunk at a
time; a time range narrows each partition's offset range first by binary search on the
timestamps, and the key and text filters scan at most SCAN_BUDGET messages a request (the
answer says when it stopped early, so a person narrows the range rather than waits).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import islice

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
    # Positions per partition (a page's `older` or `newer`): read below `before` (newest
    # first) or from `after` on (oldest first); at most one of before, after, at_offset, at_ms.
    before: dict[int, int] | None = None
    after: dict[int, int] | None = None
    at_offset: int | None = None  # read forward from this offset on every partition
    at_ms: int | None = None  # read forward from the first message at or after this time

    @property
    def reads_down(self) -> bool:
        """Whether the scan reads from the top of each range down (newest first)."""
        if self.after is not None or self.at_offset is not None or self.at_ms is not None:
            return False
        return self.before is not None or self.newest_first


@dataclass
class BrowseResult:
    messages: list[Message]
    scanned: int = 0
    stopped_early: bool = False  # the scan budget ran out before the range did
    ranges: dict[int, tuple[int, int]] = field(default_factory=dict)  # partition -> [lo, hi)
    older: dict[int, int] = field(default_factory=dict)  # `before` of the older page
    newer: dict[int, int] = field(default_factory=dict)  # `after` of the newer page
    has_older: bool = False  # some partition's range goes on below `older`
    has_newer: bool = False
    # (partition, offset) -> a transaction's mark (engine/txnstate.py): a commit or abort
    # marker, or a record of an aborted or still open transaction; plain records are absent.
    marks: dict[tuple[int, int], str] = field(default_factory=dict)


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


def _window(stream: Stream, topic: Topic, q: BrowseQuery, partition: int,
            lo: int, hi: int) -> tuple[int, int]:
    """The part of a partition's filtered range [lo, hi) that this page reads from."""
    if q.before is not None:
        hi = min(hi, q.before.get(partition, hi))
    elif q.after is not None:
        lo = max(lo, q.after.get(partition, lo))
    elif q.at_offset is not None:
        lo = max(lo, q.at_offset)
    elif q.at_ms is not None and lo < hi:
        lo = offset_for_time(store_for(stream.cluster), stream, topic, partition, lo, hi,
                             q.at_ms)
    return lo, max(lo, hi)


def _matches(m: Message, key: bytes, text: bytes) -> bool:
    if key and (m.key is None or key not in m.key):
        return False
    return not text or (m.value is not None and text in m.value)  # a null value holds no text


@dataclass
class _Scanned:
    """One partition's scan: its matches, how many messages it read, and how far it got (every
    match between the window's start and `reached` is in `found`)."""

    found: list[Message]
    scanned: int
    reached: int


def _scan(actor: AbstractBaseUser, stream: Stream, q: BrowseQuery, partition: int,
          lo: int, hi: int, budget: int) -> _Scanned:
    """Up to q.limit matches of one partition's [lo, hi), from the end or the start."""
    key, text = q.key.encode(), q.text.encode()
    down = q.reads_down
    found: list[Message] = []
    scanned = 0
    while lo < hi and len(found) < q.limit and scanned < budget:
        size = min(CHUNK, hi - lo, budget - scanned)
        start = hi - size if down else lo
        read = messages_consume(actor=actor, stream=stream, topic=q.topic, partition=partition,
                                offset=start, limit=size)
        chunk = [m for m in read if m.offset < start + size]
        scanned += max(len(chunk), 1)
        hits = [m for m in chunk if _matches(m, key, text)]
        found += reversed(hits) if down else hits
        if down:
            hi = start
        else:
            # A compacted partition's gaps (issue 31): an empty window is passed, not the end.
            lo = (chunk[-1].offset + 1) if chunk else (start + size if read else hi)
    if len(found) > q.limit:  # the chunk's last matches are left for the next page
        last = found[q.limit - 1].offset
        return _Scanned(found[: q.limit], scanned, last if down else last + 1)
    return _Scanned(found, scanned, hi if down else lo)


def _positions(result: BrowseResult, q: BrowseQuery, windows: dict[int, tuple[int, int]],
               scans: dict[int, _Scanned]) -> None:
    """The older and newer pages' positions, from what this page kept of each partition."""
    down = q.reads_down
    kept: dict[int, list[int]] = {}
    for m in result.messages:
        kept.setdefault(m.partition, []).append(m.offset)
    for p, (lo, hi) in windows.items():
        scan = scans.get(p, _Scanned([], 0, hi if down else lo))
        offsets = kept.get(p, [])
        cut = len(scan.found) > len(offsets)  # the merge left some of its matches out
        start = hi if down else lo  # where nothing of the partition was read or kept
        low = min(offsets) if offsets else start
        high = max(offsets) + 1 if offsets else start
        result.older[p] = (low if cut else scan.reached) if down else low
        result.newer[p] = high if down else (high if cut else scan.reached)
    result.has_older = any(result.older[p] > lo for p, (lo, _) in result.ranges.items())
    result.has_newer = any(result.newer[p] < hi for p, (_, hi) in result.ranges.items())


def messages_browse(*, actor: AbstractBaseUser, stream: Stream, q: BrowseQuery) -> BrowseResult:
    """The first q.limit messages matching q from where the page starts (the top of the range,
    `before`, `after`, `at_offset` or `at_ms`), shown newest first by timestamp (then
    offset) unless q.newest_first is False; with the older and newer pages' positions."""
    topic = topic_of(stream, q.topic)
    if q.partition is not None and not 0 <= q.partition < topic.partitions:
        raise InvalidInput(f"partition {q.partition} does not exist: {topic} has partitions 0 "
                           f"to {topic.partitions - 1}", field="partition")
    if q.from_offset is not None and q.to_offset is not None and q.to_offset < q.from_offset:
        raise InvalidInput("the offset range ends before it starts: swap the two offsets",
                           field="to_offset")
    stream.require(actor, "consumeperm", action="consume")
    ranges = _ranges(stream, topic, q)
    windows = {p: _window(stream, topic, q, p, lo, hi) for p, (lo, hi) in ranges.items()}
    result = BrowseResult([], ranges=ranges)
    scans: dict[int, _Scanned] = {}
    budget = SCAN_BUDGET
    for partition, (lo, hi) in windows.items():
        scans[partition] = scan = _scan(actor, stream, q, partition, lo, hi, budget)
        result.scanned += scan.scanned
        budget -= scan.scanned
        if budget <= 0:
            result.stopped_early = True
            break
    # The nearest q.limit to where the page starts, by time; merged so that what a partition
    # keeps is a run of its offsets (a time out of order never leaves a hole between pages).
    merged = heapq.merge(*(scan.found for scan in scans.values()), key=_by_time,
                         reverse=q.reads_down)
    result.messages = sorted(islice(merged, q.limit), key=_by_time, reverse=q.newest_first)
    _positions(result, q, windows, scans)
    result.marks = transaction_marks(stream=stream, topic=q.topic, messages=result.messages)
    return result


def transaction_marks(*, stream: Stream, topic: str, messages: Sequence[Message],
                      ) -> dict[tuple[int, int], str]:
    """Which of `messages` (already read by the caller, who may) are a transaction's markers
    or records of an aborted or open transaction, as read_committed treats them: (partition,
    offset) -> mark. A row store keeps no transactions: none."""
    store = store_for(stream.cluster)
    if not store.KEEPS_BATCHES or not messages:
        return {}
    offsets: dict[int, list[int]] = {}
    for m in messages:
        offsets.setdefault(m.partition, []).append(m.offset)
    shown = {(m.partition, m.offset) for m in messages}
    marks = {}
    for partition, found in offsets.items():
        kinds = store.txn_kinds(  # type: ignore[attr-defined]
            stream.uuid, topic, partition, min(found), max(found))
        marks.update({(partition, o): kind for o, kind in kinds.items()
                      if (partition, o) in shown})
    return marks


def _by_time(m: Message) -> tuple[int, int, int]:
    return m.timestamp_ms, m.partition, m.offset
