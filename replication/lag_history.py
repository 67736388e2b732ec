"""Lag over time: every few seconds the recorder (`workers.tasks.record_lag_task`, a beat
entry) samples each agreed replica link's backlog and keeps the samples in Django's cache as a
capped ring per link (Redis in production, locmem in embedded mode), about an hour of them.
It also samples the gateways' applied-message counters, so pages can show throughput as the
difference between two samples.

The figures are `replication.figures.pending_figures` / `time_lag`, the ones `replica list`
shows. Paused links are sampled too: a backlog growing while paused is what an owner wants to
see before resuming.

A sample is a list `[t_ms, messages_pending, bytes_pending, time_lag_ms, stalled]`, kept
packed (`pack`, 40 bytes). On Redis a ring is a list of packed samples: a pass appends every
link's sample and trims its ring in one script call, reading nothing back (`_Rings`). On the
embedded default's in-process cache a ring is one packed bytes value, read and written whole;
the cache is one writer's (the beat entry runs one at a time), so that needs no lock. A lost
sample after a crash only leaves a gap in a chart.
"""

from __future__ import annotations

import array
import contextlib
import gc
import itertools
import time
from collections.abc import Iterable, Iterator
from typing import Any

from django.conf import settings
from django.core.cache import cache, caches
from django.core.cache.backends.redis import RedisCache

from replication.events import publish_after_commit
from replication.figures import pending_figures, time_lag
from replication.models import Gateway, ReplicaLink, link_is_stalled

SAMPLE_SECONDS = 5.0
KEEP_SECONDS = 3600
MAX_POINTS = int(KEEP_SECONDS / SAMPLE_SECONDS)
LAG_EVENT = "replica.lag"
ALL_LAST_KEY = "lag:last:all"
MANY_LINKS = 100  # from this many links on, lag_latest reads ALL_LAST_KEY
SAMPLE_BYTES = 40

Point = list[int]
FIELDS = 5  # a sample's figures


def _ring_key(link_id: int) -> str:
    return f"lag:ring:{link_id}"


def _gateway_key(gateway_id: int) -> str:
    return f"gw:rate:{gateway_id}"


def lag_payload(link: ReplicaLink, point: Point) -> dict[str, Any]:
    """The `replica.lag` event's payload: the replicator's shape
    (replication.services.linknotes.link_lag_publish), plus the sample's time `t`."""
    t_ms, messages, nbytes, lag_ms, stalled = point
    return {"link": link.pk, "source": link.source_id, "replica": link.replica_id,
            "messagesPending": messages, "bytesPending": nbytes, "timeLagMs": lag_ms,
            "stalled": bool(stalled), "t": t_ms}


def _publishes(link: ReplicaLink) -> bool:
    # The replicator publishes replica.lag for the links it moves, as their backlog changes;
    # a paused link it leaves alone, so its growing backlog reaches the pages from here.
    return link.paused or getattr(settings, "STREAMGATE_LAG_EVENTS_FROM_RECORDER", False)


def lag_record(*, now_ms: int | None = None, links: Iterable[ReplicaLink] | None = None
               ) -> int:
    """Sample every agreed link once (or only `links`: `replica list -refreshnow true`, whose
    samples reach the pages at once); returns the number of links sampled. A refresh racing
    the recorder may lose one of the two samples: a gap in a chart, as after a crash."""
    refresh = links is not None
    links = list(links if refresh else ReplicaLink.objects.agreed().select_related(
        "source__cluster", "replica__cluster"))
    if not links:
        return 0
    now_ms = now_ms or int(time.time() * 1000)
    figures = pending_figures(links)
    points: dict[int, Point] = {}
    for link in links:
        pending = figures[link.pk]
        points[link.pk] = [now_ms, pending.messages, pending.bytes,
                           int(time_lag(pending) * 1000),
                           int(link_is_stalled(link, pending.messages))]
    _append(points)
    for link in links:
        if refresh or _publishes(link):
            publish_after_commit(tenant_ids={link.source.tenant_id, link.replica.tenant_id},
                                 event=LAG_EVENT, payload=lag_payload(link, points[link.pk]))
    return len(links)


def pack(points: Iterable[Point]) -> bytes:
    """Samples as rings keep them: each sample's five figures as signed 64-bit integers."""
    return array.array("q", itertools.chain.from_iterable(points)).tobytes()


def unpack(value: bytes | None) -> list[Point]:
    if not value:
        return []
    flat = array.array("q", value).tolist()
    return [flat[at:at + FIELDS] for at in range(0, len(flat), FIELDS)]  # as fast as pickle


# Every link's sample appended to its ring, the ring trimmed to its newest ARGV[1] and kept
# ARGV[2] seconds: one call a pass. A key an earlier version left as a string is replaced.
_APPEND = """
for i, key in ipairs(KEYS) do
  if redis.call('TYPE', key).ok ~= 'list' then redis.call('DEL', key) end
  redis.call('RPUSH', key, ARGV[i + 2])
  redis.call('LTRIM', key, -tonumber(ARGV[1]), -1)
  redis.call('EXPIRE', key, ARGV[2])
end
"""


class _Rings:
    """Each link's ring of samples. On Redis (production), a list of packed samples: a pass
    is one script call, where reading and writing 500 rings of 720 samples whole moved 14 MB
    each way every 5 s (the deployment's largest idle cost, issue 33). Elsewhere (the embedded
    default's in-process cache) one packed bytes value a ring, read and written whole."""

    def __init__(self) -> None:
        self.cache = caches["default"]
        self.client = (self.cache._cache.get_client(write=True)
                       if isinstance(self.cache, RedisCache) else None)
        self.script = self.client.register_script(_APPEND) if self.client else None

    def _key(self, pk: int) -> str:
        return self.cache.make_and_validate_key(_ring_key(pk))

    def append(self, points: dict[int, Point]) -> None:
        if self.script is not None:
            self.script(keys=[self._key(pk) for pk in points],
                        args=[MAX_POINTS, KEEP_SECONDS * 2,
                              *(pack([point]) for point in points.values())])
            return
        rings = self.cache.get_many([_ring_key(pk) for pk in points])
        self.cache.set_many({_ring_key(pk): (rings.get(_ring_key(pk), b"") + pack([point]))[
            -MAX_POINTS * SAMPLE_BYTES:] for pk, point in points.items()},
            timeout=KEEP_SECONDS * 2)

    def fill(self, rings: dict[int, list[Point]]) -> None:
        """Whole rings written at once (the benchmarks' hour-old deployments)."""
        if self.client is None:
            self.cache.set_many({_ring_key(pk): pack(points) for pk, points in rings.items()},
                           timeout=KEEP_SECONDS * 2)
            return
        pipe = self.client.pipeline(transaction=False)
        for pk, points in rings.items():
            pipe.delete(self._key(pk))
            pipe.rpush(self._key(pk), *(pack([point]) for point in points))
            pipe.expire(self._key(pk), KEEP_SECONDS * 2)
        pipe.execute()

    def read(self, ids: list[int], last: bool = False) -> dict[int, bytes]:
        """Per link id, its ring packed (or only its last sample), when it has one."""
        if self.client is None:
            rings = self.cache.get_many([_ring_key(pk) for pk in ids])
            return {pk: rings[_ring_key(pk)][-SAMPLE_BYTES if last else 0:]
                    for pk in ids if rings.get(_ring_key(pk))}
        pipe = self.client.pipeline(transaction=False)
        for pk in ids:
            pipe.lrange(self._key(pk), -1 if last else 0, -1)
        return {pk: b"".join(ring) for pk, ring in zip(ids, pipe.execute(), strict=True)
                if ring}


def rings() -> _Rings:
    """The rings, in the cache this thread uses now."""
    return _Rings()


def _append(points: dict[int, Point]) -> None:
    rings().append(points)
    # Every link's last sample in one value too: a page of thousands of links reads one key
    # rather than thousands (the recorder is the one writer: read-modify-write is safe).
    every = cache.get(ALL_LAST_KEY) or {}
    every.update(points)
    cache.set(ALL_LAST_KEY, every, timeout=KEEP_SECONDS * 2)


def lag_history(link_ids: Iterable[int]) -> dict[int, list[Point]]:
    """Per link id, its samples, oldest first (an empty list when none yet)."""
    ids = list(link_ids)
    # Unpacking 64 rings makes some 46,000 lists: a garbage collection it triggers walks the
    # whole process's objects (130 ms where the reading takes 10, issue 34). Paused meanwhile.
    with gc_paused():
        found = rings().read(ids)
        return {pk: unpack(found.get(pk)) for pk in ids}


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No garbage collection inside (a request making tens of thousands of small lists)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


CHART_POINTS = 250  # the stream page's charts plot 412 px: 250 points are under 2 px apart


def for_chart(points: list[Point], most: int = CHART_POINTS) -> tuple[list[Point], int]:
    """`points` cut to at most `most` for a chart, and how many samples each point merges (1:
    none). The first and the last sample stay as they are (the axis's start and the figure
    shown as the latest); the ones between merge a run of `k` at a time into one point at the
    run's last time with the run's highest figures, stalled if any was, so a peak or a stall
    never disappears (a dip shorter than `k` samples, under 2 px on the chart, may). An hour
    of 720 samples becomes 242 points (3 samples each): the stream's lag JSON of 64 replicas
    shrinks from 1.4 MB to about a third (issue 34)."""
    if len(points) <= most:
        return points, 1
    inner = points[1:-1]
    k = -(-len(inner) // (most - 2))
    # Column by column, `map(max, ...)` over the runs' k strided slices (C speed); a last,
    # shorter run on its own.
    whole = len(inner) // k * k
    times, *figures = zip(*inner, strict=True)
    columns = [[*times[k - 1:whole:k], *times[-1:] * (whole < len(inner))],
               *([*map(max, *(column[o:whole:k] for o in range(k))),
                  *([max(column[whole:])] if whole < len(inner) else [])]
                 for column in figures)]
    return [points[0], *map(list, zip(*columns, strict=True)), points[-1]], k


def lag_latest(link_ids: Iterable[int]) -> dict[int, Point]:
    """Per link id, its last sample; links never sampled are absent. One cache round trip."""
    ids = list(link_ids)
    if len(ids) > MANY_LINKS:
        every = cache.get(ALL_LAST_KEY) or {}
        return {pk: every[pk] for pk in ids if pk in every}
    return {pk: unpack(last)[0] for pk, last in rings().read(ids, last=True).items()}


def gateways_record(*, now: float | None = None) -> None:
    """Sample the gateways' applied-message counters; the rate is the difference with the
    previous sample over the time between them (messages applied per second)."""
    now = now or time.time()
    rows = list(Gateway.objects.values_list("pk", "messages_applied"))
    previous = cache.get_many([_gateway_key(pk) for pk, _ in rows])
    samples = {}
    for pk, applied in rows:
        before = previous.get(_gateway_key(pk))
        rate = None
        if before and now > before["t"] and applied >= before["messages"]:
            rate = (applied - before["messages"]) / (now - before["t"])
        samples[_gateway_key(pk)] = {"t": now, "messages": applied, "rate": rate}
    cache.set_many(samples, timeout=KEEP_SECONDS)


def gateway_rates(gateway_ids: Iterable[int]) -> dict[int, float]:
    """Per gateway id, messages applied per second between the last two samples."""
    ids = list(gateway_ids)
    found = cache.get_many([_gateway_key(pk) for pk in ids])
    return {pk: found[_gateway_key(pk)]["rate"] for pk in ids
            if found.get(_gateway_key(pk), {}).get("rate") is not None}
