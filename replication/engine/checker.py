"""A Jepsen-queue-style checker: does a replica hold its origin's messages exactly once, in order,
unchanged (invariants 1-2), and did every acknowledged message survive?

It reads both stores in windows of offsets, so it runs on large streams in bounded memory (bar
the producer ids it tracks for duplicates). Run it on quiet streams: messages produced while it
runs are ignored (it stops at the high watermarks it read first), and retention moving a low
watermark meanwhile is followed, not reported.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from uuid import UUID

from replication.engine.store import Key, Message, OffsetOutOfRange, UnknownTopic
from replication.engine.storebase import MessageStore

WINDOW = 5000
MAX_BYTES = 8 << 20
COMPARED = ("key", "value", "headers", "timestamp_ms", "origin", "producer")


@dataclass(frozen=True, slots=True)
class Anomaly:
    topic: str
    partition: int
    offset: int | None
    detail: str

    def __str__(self) -> str:
        at = "" if self.offset is None else f"@{self.offset}"
        return f"{self.topic}:{self.partition}{at} {self.detail}"


@dataclass(slots=True)
class Report:
    lost: list[Anomaly] = field(default_factory=list)  # acknowledged, then missing
    duplicates: list[Anomaly] = field(default_factory=list)  # an offset or a producer id twice
    inconsistent: list[Anomaly] = field(default_factory=list)  # origin and replica differ
    reordered: list[Anomaly] = field(default_factory=list)  # offsets not increasing by 1
    unreplicated: list[Anomaly] = field(default_factory=list)  # beyond the replica's end
    checked: int = 0  # origin messages read

    KINDS = ("lost", "duplicates", "inconsistent", "reordered", "unreplicated")

    @property
    def ok(self) -> bool:
        return not any(getattr(self, kind) for kind in self.KINDS)

    def summary(self) -> str:
        found = [(kind, getattr(self, kind)) for kind in self.KINDS if getattr(self, kind)]
        if not found:
            return f"checked {self.checked} messages: ok"
        counts = ", ".join(f"{len(items)} {kind}" for kind, items in found)
        examples = "; ".join(str(a) for _, items in found for a in items[:3])
        return f"checked {self.checked} messages: {counts} (e.g. {examples})"


@dataclass(slots=True)
class _Copy:
    """One store's copy of one topic."""

    name: str  # "origin" or "replica", for the reports
    store: MessageStore
    stream: UUID
    topic: str
    report: Report
    id_header: str | None
    marks: dict[int, tuple[int, int]] = field(default_factory=dict)
    ids: dict[bytes, tuple[int, int]] = field(default_factory=dict)  # -> (partition, offset)

    def __post_init__(self) -> None:
        try:
            self.marks = self.store.watermarks(self.stream, self.topic)
        except UnknownTopic:
            self.marks = {}

    def side(self, partition: int) -> _Side:
        return _Side(self, partition, *self.marks.get(partition, (0, 0)))


@dataclass(slots=True)
class _Side:
    """One store's copy of one partition, read window by window."""

    copy: _Copy
    partition: int
    low: int
    high: int
    prev: int | None = None

    def window(self, lo: int, hi: int) -> dict[int, Message]:
        seen: dict[int, Message] = {}
        for m in self._read(max(lo, self.low), min(hi, self.high)):
            self._sequence(m)
            self._producer_id(m)
            seen.setdefault(m.offset, m)
        return seen

    def _read(self, offset: int, end: int) -> list[Message]:
        out: list[Message] = []
        while offset < end:
            try:
                chunk = self.copy.store.read(
                    self.copy.stream,
                    self.copy.topic,
                    self.partition,
                    offset,
                    limit=end - offset,
                    max_bytes=MAX_BYTES,
                )
            except OffsetOutOfRange as error:
                if offset >= error.low:
                    break
                # Retention moved past the window meanwhile: follow it rather than report a gap.
                offset, self.low, self.prev = error.low, error.low, None
                continue
            if not chunk:
                break
            out += chunk
            offset = chunk[-1].offset + 1
        return out

    def flag(self, kind: str, offset: int | None, detail: str) -> None:
        anomaly = Anomaly(self.copy.topic, self.partition, offset, f"{self.copy.name}: {detail}")
        getattr(self.copy.report, kind).append(anomaly)

    def _sequence(self, m: Message) -> None:
        expected = self.low if self.prev is None else self.prev + 1
        if self.prev is not None and m.offset == self.prev:
            self.flag("duplicates", m.offset, "two messages with this offset")
        elif m.offset != expected:
            self.flag("reordered", m.offset, f"follows {expected - 1}, expected {expected}")
        self.prev = m.offset

    def _producer_id(self, m: Message) -> None:
        if self.copy.id_header is None or not m.headers:
            return
        for name, value in m.headers:
            if name == self.copy.id_header:
                first = self.copy.ids.setdefault(value, (m.partition, m.offset))
                if first != (m.partition, m.offset):
                    self.flag("duplicates", m.offset, f"id {value!r} already at {first}")
                return

    def finish(self) -> None:
        """Rows missing at the end of the range read show no successor: report them here."""
        last = self.low - 1 if self.prev is None else self.prev
        if last + 1 < self.high:
            self.flag("reordered", last + 1, f"missing up to the high watermark {self.high}")


def check_replica(
    origin: MessageStore,
    origin_stream: UUID,
    replica: MessageStore,
    replica_stream: UUID,
    topics: list[str],
    *,
    acknowledged: dict[Key, set[int]] | None = None,
    require_caught_up: bool = True,
    id_header: str | None = "id",
    window: int = WINDOW,
) -> Report:
    """Compare a replica with its origin topic by topic, partition by partition. `acknowledged`
    names the offsets producers were told were stored; `id_header` the header carrying a
    producer-supplied message id, if any."""
    report = Report()
    acked = acknowledged or {}
    for topic in topics:
        o = _Copy("origin", origin, origin_stream, topic, report, id_header)
        r = _Copy("replica", replica, replica_stream, topic, report, id_header)
        for p in sorted(set(o.marks) | set(r.marks) | {p for t, p in acked if t == topic}):
            wanted = sorted(acked.get((topic, p), ()))
            _check_partition((o.side(p), r.side(p)), wanted, require_caught_up, window)
    return report


def _check_partition(
    sides: tuple[_Side, _Side], acked: list[int], caught_up: bool, window: int
) -> None:
    origin, replica = sides
    ranges = [(s.low, s.high) for s in sides if s.low < s.high]
    start = min((low for low, _ in ranges), default=0)
    end = max((high for _, high in ranges), default=0)
    for lo in range(start, end, window):
        hi = min(lo + window, end)
        o, r = origin.window(lo, hi), replica.window(lo, hi)
        origin.copy.report.checked += len(o)
        _compare(origin, o, r)
        _lost(sides, acked[bisect_left(acked, lo) : bisect_left(acked, hi)], o, r, caught_up)
    origin.finish()
    replica.finish()
    _lost(sides, acked[bisect_left(acked, end) :], {}, {}, caught_up)  # past both ends
    if caught_up and replica.high < origin.high:
        behind = origin.high - max(replica.high, origin.low)
        origin.flag("unreplicated", replica.high, f"{behind} messages beyond the replica's end")


def _compare(origin: _Side, o: dict[int, Message], r: dict[int, Message]) -> None:
    for offset, om in o.items():
        rm = r.get(offset)
        if rm is not None and om != rm:
            fields = [f for f in COMPARED if getattr(om, f) != getattr(rm, f)]
            origin.flag("inconsistent", offset, f"replica differs in {', '.join(fields)}")
    for offset in r.keys() - o.keys():
        if offset >= origin.low:  # below it the origin expired what the replica still keeps
            origin.flag("inconsistent", offset, "the replica holds a message the origin lacks")


def _lost(
    sides: tuple[_Side, _Side],
    acked: list[int],
    o: dict[int, Message],
    r: dict[int, Message],
    caught_up: bool,
) -> None:
    origin, replica = sides
    for offset in acked:
        if offset >= origin.low and offset not in o:
            origin.flag("lost", offset, "acknowledged, missing")
        # The replica owes what the origin still keeps, and anything inside its own range.
        owed = offset >= max(origin.low, replica.low) or replica.low <= offset < replica.high
        if caught_up and owed and offset not in r:
            replica.flag("lost", offset, "acknowledged, missing")


# --- after a failback: acknowledged ids in the primary or kept aside ---------------------------


def check_kept(
    store: MessageStore,
    stream: UUID,
    topics: list[str],
    *,
    acknowledged: dict[str, set[bytes]],
    kept: dict[str, set[bytes]],
    suffix: str,
    order_header: str,
    id_header: str = "id",
    window: int = WINDOW,
) -> Report:
    """A failback keeps the old source's divergent tail aside in `<topic><suffix>` before it
    cuts the topic back, so an acknowledged message may have moved: every id of
    `acknowledged[topic]` must be in the topic or its divergence topic exactly once, those of
    `kept[topic]` in the divergence topic, whose messages follow their original offsets
    (`order_header`) in each partition. Offsets are checked as everywhere (no gap, no twice)."""
    report = Report()
    for topic in topics:
        found: dict[bytes, list[str]] = {}
        for name in (topic, f"{topic}{suffix}"):
            copy = _Copy(name, store, stream, name, report, id_header)
            for partition in sorted(copy.marks):
                _read_ids(copy.side(partition), found, window,
                          order_header if name != topic else None)
        _placed(report, topic, found, acknowledged.get(topic, set()), kept.get(topic, set()),
                f"{topic}{suffix}")
    return report


def _read_ids(side: _Side, found: dict[bytes, list[str]], window: int,
              order_header: str | None) -> None:
    last = -1
    for lo in range(side.low, side.high, window):
        for _, m in sorted(side.window(lo, lo + window).items()):
            side.copy.report.checked += 1
            headers = dict(m.headers or ())
            ident = headers.get(side.copy.id_header or "")
            if ident is not None:
                found.setdefault(ident, []).append(side.copy.name)
            if order_header is not None:
                original = int(headers.get(order_header, b"-1"))
                if original <= last:
                    side.flag("reordered", m.offset, f"kept from offset {original}, after {last}")
                last = original
    side.finish()


def _placed(report: Report, topic: str, found: dict[bytes, list[str]], acked: set[bytes],
            kept: set[bytes], diverged: str) -> None:
    def flag(kind: str, detail: str) -> None:
        getattr(report, kind).append(Anomaly(topic, -1, None, detail))

    for ident in sorted(acked):
        where = found.get(ident, [])
        if not where:
            flag("lost", f"acknowledged id {ident!r} in neither {topic} nor {diverged}")
        elif (ident in kept) != (diverged in where):
            wanted = diverged if ident in kept else topic
            flag("inconsistent", f"id {ident!r} belongs in {wanted}, found in {where}")
    for ident, where in found.items():
        if len(set(where)) > 1:  # twice in one topic is flagged as it is read
            flag("duplicates", f"id {ident!r} both in {topic} and {diverged}")
