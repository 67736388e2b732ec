"""The replication data path as pure functions over two stores (DESIGN.md, Data flow).

The source side plans batches per (replica, topic, partition) from where the replica's
partitions end; a gateway of the destination cluster copies a batch's range from the source
and applies it to the replica in one transaction. Nothing here holds state between calls: the
replica's partitions are the only record of progress, so any number of redeliveries, crashes or
parallel gateways leave each replica partition a prefix of its origin (invariant 2).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from uuid import UUID

from replication.engine.store import (
    Applied,
    CursorKey,
    Key,
    Message,
    OffsetOutOfRange,
    PartitionStats,
    ReturnToOrigin,
    StoreError,
    UnknownTopic,
)
from replication.engine.storebase import MessageStore

MAX_MESSAGES = 5000
MAX_BYTES = 4 << 20


@dataclass(frozen=True, slots=True)
class BatchSpec:
    """What the source side hands a gateway: the range [start, end) of one partition."""

    source: UUID
    replica: UUID
    topic: str
    partition: int
    start: int
    end: int
    # Approximate bytes (the partition's average message size times the count), for throttles.
    size: int = field(default=0, compare=False)

    @property
    def key(self) -> Key:
        return (self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class PartitionPending:
    """What one partition of the source still has to send: offsets [start, end)."""

    topic: str
    partition: int
    start: int
    end: int
    bytes: int  # approximate: the partition's average message size times the count
    first_ts: int | None  # timestamps of the first and last unreplicated messages
    last_ts: int | None

    @property
    def messages(self) -> int:
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class Pending:
    """The backlog of one (source, replica) pair; partitions lists those with a backlog."""

    messages: int
    bytes: int
    min_ts: int | None
    max_ts: int | None
    partitions: tuple[PartitionPending, ...]

    @classmethod
    def of(cls, partitions: list[PartitionPending]) -> Pending:
        firsts = [p.first_ts for p in partitions if p.first_ts is not None]
        lasts = [p.last_ts for p in partitions if p.last_ts is not None]
        return cls(
            sum(p.messages for p in partitions),
            sum(p.bytes for p in partitions),
            min(firsts, default=None),
            max(lasts, default=None),
            tuple(partitions),
        )


# --- source side -------------------------------------------------------------------------------


def replica_positions(
    replica: MessageStore, replica_stream: UUID, topics: dict[str, int]
) -> dict[Key, int]:
    """The next offset of each replica partition; topics maps a name to how many partitions
    to report. 0 for partitions (and topics) the replica has not heard of."""
    positions = {}
    for topic, count in topics.items():
        try:
            marks = replica.watermarks(replica_stream, topic)
        except UnknownTopic:
            marks = {}
        positions.update({(topic, p): marks.get(p, (0, 0))[1] for p in range(count)})
    return positions


def _backlog(
    source: MessageStore,
    source_stream: UUID,
    replica: MessageStore,
    replica_stream: UUID,
    topics: dict[str, UUID],
    known: dict[Key, int] | None = None,
) -> Iterator[tuple[str, PartitionStats, int]]:
    """(topic, source partition stats, first offset to send) of each partition with a backlog.
    Reads the source's partitions afresh, so topics and partitions added since the last plan
    are included (invariant 7). `known`: replica positions the caller learnt (`_positions`)."""
    for topic, origin in topics.items():
        if origin == replica_stream:
            continue  # invariant 3: a topic never goes back to the stream it originates in
        try:
            stats = source.partition_stats(source_stream, topic)
        except UnknownTopic:
            continue  # not in the source's store yet (e.g. upstream has not sent it)
        positions = _positions(replica, replica_stream, topic, len(stats), known)
        for st in stats:
            # Below the source's low watermark the messages are gone: a fresh replica starts
            # there (apply's origin_low); a lagging one is refused as a gap, as it must be.
            start = max(positions[(topic, st.partition)], st.low)
            if start < st.high:
                yield topic, st, start


def _positions(replica: MessageStore, replica_stream: UUID, topic: str, count: int,
               known: dict[Key, int] | None) -> dict[Key, int]:
    """The replica's next offset on each partition of the topic: from `known` when it has them
    all, else read from the replica (and remembered there). A position known too low costs a
    batch the gateway trims, one too high a refusal (Misordered) after which the caller
    forgets it: the replica's apply rule decides either way (DESIGN.md invariant 2)."""
    keys = [(topic, p) for p in range(count)]
    if known is not None and all(k in known for k in keys):
        return {k: known[k] for k in keys}
    positions = replica_positions(replica, replica_stream, {topic: count})
    if known is not None:
        known.update(positions)
    return positions


def _batch_size(st: PartitionStats, max_messages: int, max_bytes: int) -> int:
    if not st.messages or not st.bytes:
        return max_messages
    return max(1, min(max_messages, max_bytes * st.messages // st.bytes))


@dataclass(frozen=True, slots=True)
class Backlog:
    """One source partition with a backlog for a replica: send [start, stats.high)."""

    topic: str
    stats: PartitionStats
    start: int

    @property
    def key(self) -> Key:
        return (self.topic, self.stats.partition)

    @property
    def messages(self) -> int:
        return self.stats.high - self.start

    @property
    def bytes(self) -> int:  # approximate: the partition's average message size times the count
        st = self.stats
        return self.messages * st.bytes // st.messages if st.messages else 0

    def step(self, max_messages: int, max_bytes: int) -> int:
        """Messages in a full batch of this partition."""
        return _batch_size(self.stats, max_messages, max_bytes)


def oldest_timestamp(source: MessageStore, source_stream: UUID,
                     lagging: list[Backlog]) -> int | None:
    """The timestamp of the oldest message the replica still lacks (one row read per lagging
    partition, none for a partition whose backlog starts at its first retained message)."""
    stamps = [lag.stats.first_ts if lag.start == lag.stats.low
              else _timestamp(source, source_stream, lag.topic, lag.stats, lag.start)
              for lag in lagging]
    return min((t for t in stamps if t is not None), default=None)


def backlog(
    source: MessageStore,
    source_stream: UUID,
    replica: MessageStore,
    replica_stream: UUID,
    topics: dict[str, UUID],
    known: dict[Key, int] | None = None,
) -> list[Backlog]:
    """Each partition the replica lags on, from its end to the source's high watermark."""
    found = _backlog(source, source_stream, replica, replica_stream, topics, known)
    return [Backlog(topic, st, start) for topic, st, start in found]


def cut_batches(
    source_stream: UUID,
    replica_stream: UUID,
    lagging: list[Backlog],
    *,
    max_messages: int = MAX_MESSAGES,
    max_bytes: int = MAX_BYTES,
    after: dict[Key, int] | None = None,
) -> list[BatchSpec]:
    """Batches over the backlog, bounded by message count and (from the partition's average
    message size) bytes. `after` moves a partition's first batch past ranges already in
    flight."""
    specs = []
    for lag in lagging:
        st = lag.stats
        step = _batch_size(st, max_messages, max_bytes)
        average = st.bytes // st.messages if st.messages else 0
        start = max(lag.start, (after or {}).get(lag.key, 0))
        for s in range(start, st.high, step):
            end = min(s + step, st.high)
            specs.append(BatchSpec(source_stream, replica_stream, lag.topic, st.partition, s, end,
                                   size=(end - s) * average))
    return specs


def plan_batches(
    source: MessageStore,
    source_stream: UUID,
    replica: MessageStore,
    replica_stream: UUID,
    topics: dict[str, UUID],
    *,
    max_messages: int = MAX_MESSAGES,
    max_bytes: int = MAX_BYTES,
) -> list[BatchSpec]:
    """Batches from each replica partition's end to the source's high watermark. [] when
    caught up. `topics` maps each topic of the source stream to its origin stream."""
    lagging = backlog(source, source_stream, replica, replica_stream, topics)
    return cut_batches(source_stream, replica_stream, lagging, max_messages=max_messages,
                       max_bytes=max_bytes)


def pending(
    source: MessageStore,
    source_stream: UUID,
    replica: MessageStore,
    replica_stream: UUID,
    topics: dict[str, UUID],
) -> Pending:
    """What the source still has to send to the replica."""
    parts = []
    for topic, st, start in _backlog(source, source_stream, replica, replica_stream, topics):
        first_ts = (
            st.first_ts if start == st.low else _timestamp(source, source_stream, topic, st, start)
        )
        nbytes = (st.high - start) * st.bytes // st.messages if st.messages else 0
        parts.append(
            PartitionPending(topic, st.partition, start, st.high, nbytes, first_ts, st.last_ts)
        )
    return Pending.of(parts)


def _timestamp(
    store: MessageStore, stream: UUID, topic: str, st: PartitionStats, offset: int
) -> int | None:
    try:
        found = store.read(stream, topic, st.partition, offset, limit=1)
    except OffsetOutOfRange:  # expired meanwhile
        return None
    return found[0].timestamp_ms if found else None


def sync_cursors(
    source: MessageStore,
    source_stream: UUID,
    replica: MessageStore,
    replica_stream: UUID,
    topics: dict[str, UUID],
    synced: dict[CursorKey, tuple[int, str, int]],
) -> int:
    """Copy the source's committed consumer cursors of the carried topics, with their
    metadata and leader epoch, to the replica, so a consumer group failing over continues at
    the same offsets (invariant 1). `synced` holds, per cursor, the (offset, metadata, epoch)
    last copied in full; only cursors that differ are written, and one clamped to the
    replica's end stays out of it, so later calls advance it as data arrives. Returns how many
    cursors are still owed to the replica: clamped below what the source holds, or the replica
    lacks the partition yet (a cursor committed past the source's own end waits for data
    there, not here)."""
    changed = [c for c in source.commits(source_stream)
               if c.topic in topics and synced.get(c[:3]) != tuple(c[3:])]
    if not changed:
        return 0
    stored = replica.merge_cursors(replica_stream, changed)
    ends: dict[str, dict[int, tuple[int, int]]] = {}
    owed = 0
    for cursor in changed:
        have = stored.get(cursor[:3], -1)
        if have >= cursor.offset:
            synced[cursor[:3]] = (cursor.offset, cursor.metadata, cursor.leader_epoch)
            continue
        if cursor.topic not in ends:
            ends[cursor.topic] = source.watermarks(source_stream, cursor.topic)
        if have < min(cursor.offset, ends[cursor.topic].get(cursor.partition, (0, 0))[1]):
            owed += 1
    return owed


# --- gateway side ------------------------------------------------------------------------------


def apply_spec(
    source: MessageStore,
    replica: MessageStore,
    spec: BatchSpec,
    *,
    link: str,
    max_bytes: int = MAX_BYTES,
) -> Applied:
    """Copy [start, end) of the source partition to the replica in one transaction; return
    the messages and logical bytes newly written (none for a redelivered batch), for the
    gateway's counters. Idempotent: the replica trims what it already holds, whoever brought
    it. A batch starting past the replica's end raises Misordered (its `expected` is where the
    sender re-plans from)."""
    # Between two stores that can pipe rows to each other (PostgreSQL to PostgreSQL), the
    # rows go from the source's COPY TO into the replica's COPY FROM, never becoming Python
    # objects (DESIGN.md: no per-row Python loops on bulk paths); same lock and trim rule.
    pipe = getattr(replica, "apply_from", None)
    if pipe is not None:
        applied = pipe(source, spec.source, spec.replica, spec.topic, spec.partition, spec.start,
                       spec.end, link=link)
        if applied is not None:
            return applied
    messages, low = _read_batch(source, spec, max_bytes)
    if not messages:
        return Applied({})
    # Planning skips such topics; this catches a caller that named a topic's origin wrongly.
    if messages[0].origin == spec.replica:
        raise ReturnToOrigin(
            f"{spec.topic}:{spec.partition}: its messages originate in stream {spec.replica}, "
            "and a message is never replicated back to its origin"
        )
    return replica.apply(spec.replica, messages, link=link, origin_low={spec.key: low})


def _read_batch(source: MessageStore, spec: BatchSpec, max_bytes: int) -> tuple[list[Message], int]:
    """The batch's messages from the source and the source's low watermark. Messages that
    expired since planning are skipped (the replica then refuses the gap, unless it is a fresh
    partition starting at that low watermark)."""
    for _ in range(3):
        marks = source.watermarks(spec.source, spec.topic)
        if spec.partition not in marks:
            raise StoreError(f"{spec.topic}:{spec.partition} does not exist at the source")
        low = marks[spec.partition][0]
        try:
            return _read_range(source, spec, max(spec.start, low), max_bytes), low
        except OffsetOutOfRange:
            continue  # retention moved the low watermark while reading: read it again
    raise StoreError(f"{spec.topic}:{spec.partition}: retention kept overtaking the batch")


def _read_range(source: MessageStore, spec: BatchSpec, start: int, max_bytes: int) -> list[Message]:
    messages: list[Message] = []
    offset = start
    while offset < spec.end:
        chunk = source.read(
            spec.source,
            spec.topic,
            spec.partition,
            offset,
            limit=spec.end - offset,
            max_bytes=max_bytes,
        )
        if not chunk:
            break
        messages += chunk
        offset = chunk[-1].offset + 1
    return messages
