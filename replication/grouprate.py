"""A store group's write rate (messages per second, issue 33), for `cluster store list` and
for placing new partitions: the group's count of messages ever written (its held partitions'
next offsets, engine/fence.load) compared with a sample kept in the shared cache, so every
process sees one figure. The sample is renewed once it is RENEW_SECONDS old: a figure is the
average since the last renewal, over at least MIN_SPAN_SECONDS; None until two looks.
"""

from __future__ import annotations

import contextlib
import time

from django.core.cache import cache

MIN_SPAN_SECONDS = 1.0
RENEW_SECONDS = 10.0
KEEP_SECONDS = 3600


def _key(cluster: str, group: str) -> str:
    return f"storegroup:rate:{cluster}:{group}"


def rate(cluster: str, group: str, written: int, now: float | None = None) -> float | None:
    now = time.time() if now is None else now
    key = _key(cluster, group)
    try:
        sample = cache.get(key)
    except Exception:  # a cache outage costs the figure, never the listing or a placement
        return None
    if sample is None:
        _keep(key, (now, written, None))
        return None
    then, before, last = sample
    span = now - then
    if span < MIN_SPAN_SECONDS:
        return last
    figure = max(0, written - before) / span  # a partition moved out must not count negative
    if span >= RENEW_SECONDS:
        _keep(key, (now, written, figure))
    return figure


def _keep(key: str, sample: tuple[float, int, float | None]) -> None:
    with contextlib.suppress(Exception):
        cache.set(key, sample, timeout=KEEP_SECONDS)
