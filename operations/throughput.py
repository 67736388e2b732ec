"""Throughput over the last hour, per stream and per cluster, from counters the engine
already keeps: messages and bytes produced per stream (operations/counters.py), applied per
gateway (Gateway.messages_applied / bytes_applied), and the replicas' backlog the lag
recorder samples (replication/lag_history.py).

The lag recorder's beat entry calls `throughput_record` every run; it samples at most every
SAMPLE_SECONDS into a capped ring per stream and per cluster (replication/rings.py: a pass
appends to every ring in one call, reading none back; pickled rings read and written whole
cost 1,500 streams a tenth of a second every 30 s). Rates are differences between consecutive
samples, computed when a chart asks:
- a stream's "in": messages (bytes) produced into it per second;
- a stream's "replicated": what its replicas applied per second, all replicas together:
  each replica must receive every produced message, so it is replicas x in minus the growth
  of their backlog (clamped at 0);
- a cluster's "in": produced into the tenant's streams of the cluster; its "replicated":
  applied by the cluster's gateways (replication into the cluster, all tenants: the figure
  the overview's gateway table shows already).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable
from itertools import pairwise
from typing import Any

from django.core.cache import cache
from django.db.models import Sum

from replication.counters import PRODUCED, traffic_totals
from replication.lag_history import lag_latest
from replication.models import Gateway, ReplicaLink, Stream
from replication.rings import Rings

SAMPLE_SECONDS = 30.0
KEEP_SECONDS = 3600
MAX_POINTS = int(KEEP_SECONDS / SAMPLE_SECONDS) + 1
LAST_KEY = "tp:last"


def _stream_rings() -> Rings:
    """[t_ms, messages, bytes produced, replicas, messages, bytes pending] per stream."""
    return Rings("tp:stream:", fields=6, most=MAX_POINTS, keep_seconds=KEEP_SECONDS * 2)


def _cluster_rings() -> Rings:
    """[t_ms, messages, bytes applied by the cluster's gateways] per cluster."""
    return Rings("tp:cluster:", fields=3, most=MAX_POINTS, keep_seconds=KEEP_SECONDS * 2)


def _backlogs() -> tuple[dict[int, list[int]], dict[int, int]]:
    """Per source stream: [pending messages, pending bytes] over its agreed links, and how
    many such links it has."""
    links = list(ReplicaLink.objects.agreed().values_list("pk", "source_id"))
    latest = lag_latest(pk for pk, _ in links)
    pending: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    replicas: dict[int, int] = defaultdict(int)
    for pk, source in links:
        replicas[source] += 1
        point = latest.get(pk)
        if point:
            pending[source][0] += point[1]
            pending[source][1] += point[2]
    return pending, replicas


def throughput_record(*, now: float | None = None, force: bool = False) -> bool:
    """One sample of every stream and cluster, unless the last is under SAMPLE_SECONDS old."""
    now = now or time.time()
    last = cache.get(LAST_KEY)
    if not force and last is not None and now - last < SAMPLE_SECONDS * 0.95:
        return False
    streams = list(Stream.objects.values_list("pk", "uuid"))
    totals = traffic_totals(PRODUCED, (uuid for _, uuid in streams))
    pending, replicas = _backlogs()
    t_ms = int(now * 1000)
    _stream_rings().append({pk: [t_ms, *totals[uuid], replicas.get(pk, 0),
                                 *pending.get(pk, [0, 0])] for pk, uuid in streams})
    applied = Gateway.objects.values("cluster_id").annotate(
        m=Sum("messages_applied"), b=Sum("bytes_applied"))
    _cluster_rings().append({row["cluster_id"]: [t_ms, row["m"] or 0, row["b"] or 0]
                             for row in applied})
    cache.set(LAST_KEY, now, timeout=KEEP_SECONDS)
    return True


def _rates(ring: list[list[int]], series: Any) -> list[list[float]]:
    """[t_ms, *per-second rates] between consecutive samples; a counter that went back (a
    cache flush) gives no point rather than a negative rate."""
    out = []
    for before, after in pairwise(ring):
        seconds = (after[0] - before[0]) / 1000
        if seconds <= 0:
            continue
        rates = series(before, after, seconds)
        if all(r >= 0 for r in rates):
            out.append([after[0], *(round(r, 2) for r in rates)])
    return out


def _stream_series(before: list[int], after: list[int], seconds: float) -> list[float]:
    in_m, in_b = (after[1] - before[1]) / seconds, (after[2] - before[2]) / seconds
    n = after[3]
    grew_m, grew_b = (after[4] - before[4]) / seconds, (after[5] - before[5]) / seconds
    return [in_m, in_b, max(0.0, n * in_m - grew_m), max(0.0, n * in_b - grew_b)]


def stream_throughput(stream_ids: Iterable[int]) -> dict[int, list[list[float]]]:
    """Per stream: [t_ms, in msg/s, in bytes/s, replicated msg/s, replicated bytes/s]."""
    ids = list(stream_ids)
    rings = _stream_rings().read(ids)
    return {pk: _rates(rings.get(pk, []), _stream_series) for pk in ids}


def cluster_throughput(cluster_id: int, stream_ids: Iterable[int], *,
                       gateways: bool) -> list[list[float]]:
    """The cluster's [t_ms, in msg/s, in bytes/s, replicated msg/s, replicated bytes/s]: in
    over `stream_ids` (the tenant's streams there); replicated, with `gateways`, what the
    cluster's gateways applied (every tenant's: an operator's view), else what those streams
    sent on to their replicas."""
    out: dict[int, list[float]] = defaultdict(lambda: [0.0] * 5)
    for rows in stream_throughput(stream_ids).values():
        for t, *rates in rows:
            point = out[t]
            point[0] = t
            for i, rate in enumerate(rates if not gateways else rates[:2], start=1):
                point[i] += rate
    if gateways:
        for t, m, b in _rates(_cluster_rings().read([cluster_id]).get(cluster_id, []),
                              lambda b, a, s: [(a[1] - b[1]) / s, (a[2] - b[2]) / s]):
            out[t][0], out[t][3:] = t, [m, b]
    return [out[t] for t in sorted(out)]
