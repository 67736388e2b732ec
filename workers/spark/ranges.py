"""What a job's Spark tasks carry and do. Plain Python (no Django, no Spark): the driver plans
ranges, each executor runs `copy_ranges` or `diff_ranges` over its share.

Both stores PostgreSQL of one layout: binary COPY and server-side checksums
(workers/spark/pg.py), of rows, or of record batches (issue 30: batch rows relayed as they
are, checksums of batches' CRCs, messages decoded only where those differ). Otherwise (the
embedded default's SQLite stores, or a row store and a batch store) the same work goes
through the MessageStore interface, with checksums computed here.
"""

from __future__ import annotations

import hashlib
import os
import struct
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TypeVar
from uuid import UUID

import psycopg

from replication.engine.factory import open_store
from replication.engine.store import (
    Message,
    StoreError,
    encode_headers,
    record_size,
)
from replication.engine.storebase import MessageStore
from replication.engine.stored import messages_of
from workers.spark import pg

CHUNK = 100_000  # offsets per destination transaction
BUCKET = 1_000  # offsets per checksum bucket
LAST = 1 << 62  # the end of a range's last batch bucket: past any offset
READ_BATCH = 5_000  # messages per read on the generic path


@dataclass(frozen=True)
class Side:
    url: str  # the cluster's store URL (its home store group's, issue 33)
    stream: str  # the stream's UUID
    # (topic, partition, URL) of each partition held by another of the cluster's store groups
    # than `url`'s: a task reads and writes each partition in the group holding it.
    placed: tuple[tuple[str, int, str], ...] = ()

    @property
    def fast(self) -> bool:
        return self.url.startswith(("postgresql://", "postgres://"))

    def url_of(self, topic: str, partition: int) -> str:
        return next((u for t, p, u in self.placed if (t, p) == (topic, partition)), self.url)

    def at(self, url: str) -> Side:
        return Side(url, self.stream)


def by_groups(work: Work, ranges: Iterable[Range]) -> Iterator[tuple[Work, list[int], list[Range]]]:
    """The ranges per (source group, destination group), with their indexes in `ranges`: the
    work of each pair of stores, done on the groups holding the partitions."""
    pairs: dict[tuple[str, str], tuple[list[int], list[Range]]] = {}
    for i, r in enumerate(ranges):
        key = (work.src.url_of(r.topic, r.partition), work.dst.url_of(r.topic, r.partition))
        indexes, mine = pairs.setdefault(key, ([], []))
        indexes.append(i)
        mine.append(r)
    for (src, dst), (indexes, mine) in pairs.items():
        yield replace(work, src=work.src.at(src), dst=work.dst.at(dst)), indexes, mine


@dataclass(frozen=True)
class Range:
    """Offsets [start, end) of one partition. `origin_low` is the source's low watermark
    when planned: a destination partition that never held a message may begin there."""

    topic: str
    partition: int
    start: int
    end: int
    origin_low: int = 0

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


@dataclass(frozen=True)
class Work:
    src: Side
    dst: Side
    link: str = ""  # the replica link's id a copy serves (its status cursor moves)
    chunk: int = CHUNK
    bucket: int = BUCKET


@contextmanager
def stores(*urls: str) -> Iterator[list[MessageStore]]:
    """The stores, opened for one task or one job and closed after it: executors and drivers
    live long, and a connection kept per store they ever saw would pile up. A database with
    no store yet gets the layout the Django processes make (their environment is the job
    driver's, STREAMGATE_STORE_LAYOUT), not the engine's default."""
    opened: list[MessageStore] = []
    layout = os.environ.get("STREAMGATE_STORE_LAYOUT") or None
    try:
        opened += [open_store(url, layout=layout) for url in urls]
        yield opened
    finally:
        for store in opened:
            store.close()


# bucket number -> (rows, XOR of the rows' hashes); a batch store's adds the offsets spanned
Buckets = dict[int, tuple[int, ...]]
T = TypeVar("T")


class _Fast:
    """Both ends on PostgreSQL: one connection each, for one task."""

    def __init__(self, work: Work, src: psycopg.Connection, dst: psycopg.Connection) -> None:
        self.work, self.conns, self.sides = work, (src, dst), (work.src, work.dst)

    def _pid(self, end: int, r: Range) -> int:
        return pg.partition_id(self.conns[end], self.sides[end].stream, r.topic, r.partition)

    def _pids(self, end: int, ranges: list[Range]) -> list[int]:
        """The ranges' partition ids at one end, one query per topic."""
        side = self.sides[end]
        ids = {topic: pg.partition_ids(self.conns[end], side.stream, topic)
               for topic in {r.topic for r in ranges}}
        for r in ranges:
            if r.partition not in ids[r.topic]:
                raise StoreError(f"{r.topic}:{r.partition} does not exist in stream {side.stream}")
        return [ids[r.topic][r.partition] for r in ranges]

    def copy(self, r: Range, lo: int, hi: int) -> tuple[int, int]:
        return pg.copy_chunk(*self.conns, (self._pid(0, r), self._pid(1, r)), lo, hi,
                             key=(r.topic, r.partition), origin_low=r.origin_low,
                             link=self.work.link)

    def both(self, call: Callable[[int], T]) -> tuple[T, T]:
        """`call(0)` and `call(1)` at once: each end's server works on its half while the
        other does, rather than one waiting for the other."""
        with ThreadPoolExecutor(1) as pool:
            ours = pool.submit(call, 0)
            theirs = call(1)
            return ours.result(), theirs

    def bucket_maps(self, ranges: list[Range]) -> list[tuple[Buckets, Buckets]]:
        """Each range's buckets at both ends, in one query per end (see pg.BUCKETS)."""
        width = self.work.bucket
        # (lo, range, bucket, hi), equal offsets of all the ranges side by side.
        keys = sorted((lo, i, (lo - r.start) // width, min(r.end, lo + width))
                      for i, r in enumerate(ranges) for lo in range(r.start, r.end, width))

        def side(end: int) -> dict[int, tuple[int, int]]:
            pids = self._pids(end, ranges)
            return pg.buckets(self.conns[end], [(pids[i], lo, hi) for lo, i, _, hi in keys])

        ours, theirs = self.both(side)
        maps: list[tuple[Buckets, Buckets]] = [({}, {}) for _ in ranges]
        for n, (_, i, bucket, _) in enumerate(keys):
            for end, found in enumerate((ours, theirs)):
                if n in found:
                    maps[i][end][bucket] = found[n]
        return maps

    def rows(self, end: int, r: Range, lo: int, hi: int) -> dict[int, int]:
        return pg.row_hashes(self.conns[end], self._pid(end, r), lo, hi)

    def first_difference(self, r: Range, ours: Buckets, theirs: Buckets) -> int | None:
        return _first_difference(self, r, ours, theirs)


class _FastBatches(_Fast):
    """Both ends batch stores on PostgreSQL (issue 30): batch rows relayed as they are, and
    checksums of batches (their CRCs) before any message is decoded."""

    def copy(self, r: Range, lo: int, hi: int) -> tuple[int, int]:
        return pg.copy_batches_chunk(*self.conns, (self._pid(0, r), self._pid(1, r)), lo, hi,
                                     key=(r.topic, r.partition), origin_low=r.origin_low,
                                     stream=UUID(self.work.dst.stream), link=self.work.link)

    def bucket_maps(self, ranges: list[Range]) -> list[tuple[Buckets, Buckets]]:
        """As the row store's, a batch in the bucket of its last offset; a range's last
        bucket also takes the batch reaching past its end (pg.BATCH_BUCKETS)."""
        width = self.work.bucket
        keys = sorted((lo, i, (lo - r.start) // width, lo + width if lo + width < r.end
                       else LAST) for i, r in enumerate(ranges)
                      for lo in range(r.start, r.end, width))

        def side(end: int) -> dict[int, tuple]:
            pids = self._pids(end, ranges)
            return pg.batch_buckets(self.conns[end], [(pids[i], lo, hi, ranges[i].end)
                                                      for lo, i, _, hi in keys])

        ours, theirs = self.both(side)
        maps: list[tuple[Buckets, Buckets]] = [({}, {}) for _ in ranges]
        for n, (_, i, bucket, _) in enumerate(keys):
            for end, found in enumerate((ours, theirs)):
                if n in found:
                    maps[i][end][bucket] = found[n]
        return maps

    def first_difference(self, r: Range, ours: Buckets, theirs: Buckets) -> int | None:
        """Each differing bucket in order, its batches decoded on both sides and compared
        message by message: batches re-encoded (a replica's truncated and re-copied tail,
        one applied from a row store) differ in CRC and may still hold equal messages."""
        for k in sorted(set(ours) | set(theirs)):
            found = [b for b in (ours.get(k), theirs.get(k)) if b is not None]
            if len(found) == 2 and found[0][:2] == found[1][:2]:
                continue
            lo = max(r.start, min(b[2] for b in found))
            hi = min(r.end, max(b[3] for b in found) + 1)
            offset = self._first_unequal(r, lo, hi)
            if offset is not None:
                return offset
        return None

    def _first_unequal(self, r: Range, lo: int, hi: int) -> int | None:
        """The first offset of [lo, hi) whose messages differ. A batch reaching below `lo`
        on one side may hold offsets no equal bucket vouched for: the span grows down to
        where the batches read begin, until it holds whole batches on both sides."""
        while True:
            read = self.both(lambda end, lo=lo: self.messages(end, r, lo, hi))
            start = max(r.start, min((first for _, first in read), default=lo))
            if start >= lo:
                break
            lo = start
        (left, _), (right, _) = read
        return next((o for o in range(lo, hi) if left.get(o) != right.get(o)), None)

    def messages(self, end: int, r: Range, lo: int, hi: int) -> tuple[dict[int, int], int]:
        """Hashes of one side's messages of [lo, hi), and where its batches read begin."""
        rows = pg.batch_rows(self.conns[end], self._pid(end, r), lo, hi)
        found = messages_of([row[:3] for row in rows], r.topic, r.partition, lo, hi - lo, {})
        return {m.offset: _hash(m) for m in found}, min((row[3] for row in rows), default=lo)


class _Generic:
    """Any store, through the MessageStore interface."""

    def __init__(self, work: Work, src: MessageStore, dst: MessageStore) -> None:
        self.work, self.stores = work, (src, dst)
        self.streams = (UUID(work.src.stream), UUID(work.dst.stream))
        self._hashes: dict[tuple[int, Range], dict[int, int]] = {}

    def copy(self, r: Range, lo: int, hi: int) -> tuple[int, int]:
        (src, dst), key = self.stores, (r.topic, r.partition)
        offset = max(lo, dst.watermarks(self.streams[1], r.topic)[r.partition][1])
        count = size = 0
        while offset < hi:
            batch = _read(src, self.streams[0], r, offset, hi)
            if not batch or batch[0].offset != offset:
                raise StoreError(f"{r.topic}:{r.partition}: the source no longer holds offset "
                                 f"{offset} (retention removed it); run the job again")
            applied = dst.apply(self.streams[1], batch, link=self.work.link or "copystream",
                                origin_low={key: r.origin_low})
            count += applied.count
            size += sum(map(record_size, batch[len(batch) - applied.count:]))
            offset = batch[-1].offset + 1
        return count, size

    def _all(self, end: int, r: Range) -> dict[int, int]:
        if (end, r) not in self._hashes:
            self._hashes = {(end, r): _hashes(self.stores[end], self.streams[end], r),
                            **{k: v for k, v in self._hashes.items() if k[1] == r}}
        return self._hashes[(end, r)]

    def both(self, call: Callable[[int], T]) -> tuple[T, T]:
        # One after the other: a store object (SQLite's connection) stays on its thread.
        return call(0), call(1)

    def bucket_maps(self, ranges: list[Range]) -> Iterator[tuple[Buckets, Buckets]]:
        # Lazily: a range's first difference is looked for while its hashes are still held.
        return ((self._buckets(0, r), self._buckets(1, r)) for r in ranges)

    def _buckets(self, end: int, r: Range) -> Buckets:
        out: Buckets = {}
        for offset, h in self._all(end, r).items():
            n, x = out.get((offset - r.start) // self.work.bucket, (0, 0))
            out[(offset - r.start) // self.work.bucket] = (n + 1, x ^ h)
        return out

    def rows(self, end: int, r: Range, lo: int, hi: int) -> dict[int, int]:
        return {o: h for o, h in self._all(end, r).items() if lo <= o < hi}

    def first_difference(self, r: Range, ours: Buckets, theirs: Buckets) -> int | None:
        return _first_difference(self, r, ours, theirs)


Ends = _Fast | _FastBatches | _Generic


@contextmanager
def _ends(work: Work) -> Iterator[Ends]:
    """Both ends' access for a task: SQL on both databases where they hold one layout, the
    MessageStore interface otherwise (SQLite, or a row store copied into a batch store or
    back: read() and apply() translate)."""
    if work.src.fast and work.dst.fast:
        with pg.connect(work.src.url) as src, pg.connect(work.dst.url) as dst:
            kind = {("rows", "rows"): _Fast, ("batches", "batches"): _FastBatches}.get(
                (pg.layout(src), pg.layout(dst)))
            if kind is not None:
                yield kind(work, src, dst)
                return
    with stores(work.src.url, work.dst.url) as (src, dst):
        yield _Generic(work, src, dst)


# --- copy ------------------------------------------------------------------------------------


def copy_ranges(work: Work, ranges: Iterable[Range]) -> Iterator[tuple[str, int, int, int]]:
    """An executor's share of a copy: (topic, partition, messages, bytes) per range, each
    range moved in chunks of `work.chunk` offsets, one destination transaction each."""
    for pair, _, mine in by_groups(work, list(ranges)):
        with _ends(pair) as ends:
            for r in mine:
                count = size = 0
                for lo in range(r.start, r.end, work.chunk):
                    n, b = ends.copy(r, lo, min(r.end, lo + work.chunk))
                    count, size = count + n, size + b
                yield r.topic, r.partition, count, size


def _read(src: MessageStore, stream: UUID, r: Range, offset: int, hi: int) -> list[Message]:
    limit = min(READ_BATCH, hi - offset)
    return src.read(stream, r.topic, r.partition, offset, limit=limit, max_bytes=64 << 20)




# --- diff ------------------------------------------------------------------------------------


def diff_ranges(work: Work, ranges: Iterable[Range]) -> Iterator[tuple[str, int, int | None]]:
    """(topic, partition, first differing offset or None) per range, comparing both sides'
    checksums bucket by bucket, then row by row inside the first differing bucket. A task's
    ranges are checksummed together: one query per side on PostgreSQL."""
    ranges = list(ranges)
    found: dict[int, tuple[str, int, int | None]] = {}
    for pair, indexes, mine in by_groups(work, ranges):
        with _ends(pair) as ends:
            for i, r, (ours, theirs) in zip(indexes, mine, ends.bucket_maps(mine), strict=True):
                found[i] = (r.topic, r.partition, ends.first_difference(r, ours, theirs))
    yield from (found[i] for i in range(len(ranges)))  # in the order asked


def _first_difference(ends: _Fast | _Generic, r: Range, ours: Buckets,
                      theirs: Buckets) -> int | None:
    differing = [k for k in sorted(set(ours) | set(theirs)) if ours.get(k) != theirs.get(k)]
    if not differing:
        return None
    lo = r.start + differing[0] * ends.work.bucket
    hi = min(r.end, lo + ends.work.bucket)
    left, right = ends.both(lambda end: ends.rows(end, r, lo, hi))
    return next((o for o in range(lo, hi) if left.get(o) != right.get(o)), lo)


def _hashes(store: MessageStore, stream: UUID, r: Range) -> dict[int, int]:
    out, offset = {}, r.start
    while offset < r.end:
        try:
            batch = _read(store, stream, r, offset, r.end)
        except StoreError:  # below the side's low or past its high: nothing held there
            batch = []
        if not batch:
            break
        out.update((m.offset, _hash(m)) for m in batch)
        offset = batch[-1].offset + 1
    return out


_TS = struct.Struct(">qq")


def _hash(m: Message) -> int:
    """Every field, length-prefixed (None apart from empty), into 64 bits."""
    h = hashlib.blake2b(_TS.pack(m.offset, m.timestamp_ms), digest_size=8)
    for part in (m.key, m.value, encode_headers(m.headers), m.origin.bytes,
                 (m.producer or "").encode()):
        h.update(struct.pack(">i", -1 if part is None else len(part)))
        h.update(part or b"")
    return int.from_bytes(h.digest(), "big", signed=True)
