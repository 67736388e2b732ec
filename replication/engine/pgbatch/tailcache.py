"""The bytes of the batches a process appended or fetched lately (issue 30: consume speed).

Kafka's brokers serve a consumer at the log's tail from the page cache. Here a fetch's
batches would travel from PostgreSQL every time (about 6 ms a megabyte through libpq and
psycopg), so a process that serves Kafka fetches keeps the batches it wrote and read, up to
STREAMGATE_FETCH_CACHE_BYTES, oldest out first. The store stays the truth: a fetch sends the
base offset, CRC and length of each batch it holds for the partition with its statement
(FETCH_CACHED), and the store returns the bytes of every batch that is not the one held
(compacted, truncated and written again, another listener's, or not held at all); a held
batch is sent only when its row still has the same last and base offsets, CRC and length.
A process that never serves a fetch keeps nothing: appends fill the cache only once a fetch
has used it.
"""

from __future__ import annotations

import threading
from bisect import bisect_left, insort
from collections import OrderedDict
from collections.abc import Iterable
from typing import NamedTuple


class Held(NamedTuple):
    base_offset: int
    crc: int
    data: bytes


class TailCache:
    """Batches by (partition id, last offset), at most `max_bytes` of them (0: none kept).
    Thread-safe: the listener's fetches and appends run on its thread pool."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.used = False  # a fetch has asked: appends fill it from now on
        self.size = 0
        self._lock = threading.Lock()
        self._held: OrderedDict[tuple[int, int], Held] = OrderedDict()
        self._lasts: dict[int, list[int]] = {}  # each partition's held last offsets, sorted

    def put(self, pid: int, last_offset: int, held: Held) -> None:
        if len(held.data) > self.max_bytes:
            return
        with self._lock:
            old = self._held.pop((pid, last_offset), None)
            if old is None:
                insort(self._lasts.setdefault(pid, []), last_offset)
            else:
                self.size -= len(old.data)
            self._held[pid, last_offset] = held
            self.size += len(held.data)
            while self.size > self.max_bytes:
                (p, last), gone = self._held.popitem(last=False)
                self.size -= len(gone.data)
                lasts = self._lasts[p]
                del lasts[bisect_left(lasts, last)]
                if not lasts:
                    del self._lasts[p]

    def put_rows(self, rows: Iterable[tuple]) -> None:
        """Rows of (partition id, last offset, base offset, crc, data), once a fetch used it."""
        if self.used:
            for pid, last, base, crc, data in rows:
                self.put(pid, last, Held(base, crc, data))

    def held(self, pid: int, offset: int, max_bytes: int, limit: int = 1000,
             ) -> dict[int, Held]:
        """The held batches of a partition ending at or after `offset`, in order, until
        `max_bytes` of them or `limit` batches: what a fetch from `offset` may send."""
        self.used = self.max_bytes > 0
        with self._lock:
            lasts = self._lasts.get(pid)
            if not lasts:
                return {}
            out, total = {}, 0
            at = bisect_left(lasts, offset)
            for last in lasts[at:at + limit]:
                held = self._held[pid, last]
                out[last] = held
                total += len(held.data)
                if total >= max_bytes:
                    break
            return out
