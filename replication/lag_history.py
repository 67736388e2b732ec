"""Lag over time: every few seconds the recorder (`workers.tasks.record_lag_task`, a beat
entry) samples each agreed replica link's backlog and keeps the samples in Django's cache as a
capped ring per link (Redis in production, locmem in embedded mode), about an hour of them.
It also samples the gateways' applied-message counters, so pages can show throughput as the
difference between two samples.

The figures are `replication.figures.pending_figures` / `time_lag`, the ones `replica list`
shows. Paused links are sampled too: a backlog growing while paused is what an owner wants to
see before resuming.

A sample is a list `[t_ms, messages_pending, bytes_pending, time_lag_ms, stalled]`, in a
capped ring per link (replication/rings.py: on Redis a pass is one script call that reads
nothing back). A lost sample after a crash only leaves a gap in a chart.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Iterable, Iterator
from typing import Any

from django.conf import settings
from django.core.cache import cache

from replication.events import publish_after_commit
from replication.figures import pending_figures, time_lag
from replication.models import Gateway, ReplicaLink, link_is_stalled
from replication.rings import Point, Rings

SAMPLE_SECONDS = 5.0
KEEP_SECONDS = 3600
MAX_POINTS = int(KEEP_SECONDS / SAMPLE_SECONDS)
LAG_EVENT = "replica.lag"
ALL_LAST_KEY = "lag:last:all"
MANY_LINKS = 100  # from this many links on, lag_latest reads ALL_LAST_KEY

FIELDS = 5  # a sample's figures


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


def rings() -> Rings:
    """The links' rings of lag samples (replication/rings.py)."""
    return Rings("lag:ring:", fields=FIELDS, most=MAX_POINTS, keep_seconds=KEEP_SECONDS * 2)


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
    return {pk: found.get(pk, []) for pk in ids}


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
    return {pk: points[-1] for pk, points in rings().read(ids, last=True).items()}


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
