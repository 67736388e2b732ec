"""Usage per tenant, per day and per stream: messages and bytes produced, consumed and
replicated (into the stream, as a replica), and bytes stored.

The live figures are the cumulative counters in Redis (replication/counters.py), which a Redis
restart resets. `usage_rollup` (beat's `rollup_usage_task`, every few minutes) adds what each
counter grew since the last rollup to the stream's row of the day in PostgreSQL (UsageDay) and
remembers the totals it read (UsageMark). Running it twice adds nothing the second time; a
Redis restart is told by the epoch key the rollup keeps in Redis: counters from a new epoch
are all new. What a day's last few minutes counted lands in the next day's row when the
rollup runs after midnight (the rollup interval is the error). The usage page shows the rows
plus the live growth since the last rollup, computed the same way but not saved.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import uuid as uuidlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from uuid import UUID

from django.core.cache import cache
from django.db import transaction
from django.utils import timezone

from accounts.models import Tenant
from operations.models import UsageDay, UsageMark
from replication.counters import DIRECTIONS, FIGURES, traffic_totals
from replication.models import Stream
from replication.stores import store_for

EPOCH_KEY = "usage:epoch"
COUNTED = tuple(f"{d}_{f}" for d in DIRECTIONS for f in FIGURES)  # UsageDay's counted fields
COLUMNS = ("day", "path", *COUNTED, "stored_bytes")


@dataclass
class UsageRow:
    """A stream's figures of one day, as the page and the CSV show them."""

    day: dt.date
    path: str
    figures: dict[str, int] = field(default_factory=dict)
    stream_uuid: UUID | None = None

    def cells(self) -> list[object]:
        return [self.day.isoformat(), self.path, *(self.figures.get(c, 0) for c in COLUMNS[2:])]


def _epoch() -> str:
    """The name of the Redis the counters live in: set once, lost with its counters."""
    cache.add(EPOCH_KEY, uuidlib.uuid4().hex, timeout=None)
    return str(cache.get(EPOCH_KEY))


def _live(uuids: list[UUID]) -> dict[UUID, dict[str, int]]:
    """Each stream's cumulative counters, keyed as UsageDay's fields."""
    live: dict[UUID, dict[str, int]] = {u: {} for u in uuids}
    for direction in DIRECTIONS:
        for stream, counts in traffic_totals(direction, uuids).items():
            for figure, value in zip(FIGURES, counts, strict=True):
                live[stream][f"{direction}_{figure}"] = value
    return live


def _growth(live: dict[str, int], mark: UsageMark | None, epoch: str) -> dict[str, int]:
    """What the counters grew since `mark`: all of them when the mark is of another epoch (or
    none); never negative (a run that read older totals than the mark counts nothing)."""
    if mark is None or mark.epoch != epoch:
        return dict(live)
    return {k: max(0, v - int(mark.totals.get(k, 0))) for k, v in live.items()}


def stored_bytes(streams: Iterable[Stream]) -> dict[UUID, int | None]:
    """Bytes stored per stream, from the stores' counters (one query per cluster); None for
    the streams of a store out of reach (the others still count)."""
    streams = list(streams)
    sizes: dict[UUID, int] = {}
    reached = set()
    for cluster in {s.cluster.pk: s.cluster for s in streams}.values():
        with contextlib.suppress(Exception):
            sizes.update(store_for(cluster).logical_sizes())
            reached.add(cluster.pk)
    return {s.uuid: sizes.get(s.uuid, 0) if s.cluster_id in reached else None for s in streams}


def usage_rollup(*, tenant: Tenant, day: dt.date | None = None) -> int:
    """Add the growth of the tenant's streams' counters to their rows of `day` (today, UTC);
    the number of streams rolled up. Redis and the stores are read before the transaction:
    no row lock is held across them (DESIGN.md invariant 14). Only rows and marks that change
    are written, each kind in one statement: an idle tenant of 1,500 streams cost 3,000
    updates every 5 minutes (issue 33's idle cost)."""
    day = day or timezone.now().date()
    streams = list(Stream.objects.filter(tenant=tenant).select_related("cluster"))
    if not streams:
        return 0
    epoch, live = _epoch(), _live([s.uuid for s in streams])
    stored = stored_bytes(streams)
    uuids = [s.uuid for s in streams]
    with transaction.atomic():
        UsageMark.objects.bulk_create([UsageMark(stream_uuid=u, epoch="") for u in uuids],
                                      ignore_conflicts=True)
        # The marks' locks serialise rollups of a stream: the second run sees the first's mark
        # and the first's rows of the day (no one else writes them).
        marks = {m.stream_uuid: m for m in UsageMark.objects.select_for_update().filter(
            stream_uuid__in=uuids)}
        rows = {r.stream_uuid: r for r in UsageDay.objects.filter(day=day,
                                                                 stream_uuid__in=uuids)}
        changed_rows, changed_marks, now = [], [], timezone.now()
        for stream in streams:
            mark = marks[stream.uuid]
            grown = _growth(live[stream.uuid], mark if mark.epoch else None, epoch)
            row = rows.get(stream.uuid) or UsageDay(day=day, tenant=tenant,
                                                    stream_uuid=stream.uuid)
            if _added(row, stream.path, stored[stream.uuid], grown):
                changed_rows.append(row)
            totals = _merged(mark, live[stream.uuid], epoch)
            if (mark.totals, mark.epoch) != (totals, epoch):
                mark.totals, mark.epoch, mark.updated = totals, epoch, now
                changed_marks.append(mark)
        UsageDay.objects.bulk_create(changed_rows, update_conflicts=True,
                                     unique_fields=["stream_uuid", "day"],
                                     update_fields=["path", "stored_bytes", *COUNTED])
        UsageMark.objects.bulk_update(changed_marks, ["totals", "epoch", "updated"])
    return len(streams)


def _merged(mark: UsageMark, live: dict[str, int], epoch: str) -> dict[str, int]:
    if mark.epoch != epoch:
        return dict(live)
    return {k: max(v, int(mark.totals.get(k, 0))) for k, v in live.items()}


def _added(row: UsageDay, path: str, stored: int | None, grown: dict[str, int]) -> bool:
    """`row` with the stream's path, its bytes stored now (None: its store is out of reach,
    the figure waits for the next rollup) and `grown` added; whether it is new or changed (and
    so to be written)."""
    before = (row.path, row.stored_bytes, *(getattr(row, k) for k in COUNTED))
    row.path = path
    if stored is not None:
        row.stored_bytes = stored
    for key in COUNTED:
        setattr(row, key, getattr(row, key) + grown.get(key, 0))
    return row.pk is None or before != (row.path, row.stored_bytes,
                                        *(getattr(row, k) for k in COUNTED))


def usage_rows(*, tenant: Tenant, days: int) -> list[UsageRow]:
    """The tenant's rows of the last `days` days, newest first, today's with the live growth
    since the last rollup and the bytes stored now."""
    return with_live(tenant, usage_keys(tenant=tenant, days=days))


def usage_keys(*, tenant: Tenant, days: int) -> list[UsageRow]:
    """The rows `usage_rows` returns, in the same order (newest day first, then path), with the
    saved figures only: today's live growth is not read yet. A page cuts its rows from these
    and passes only them to `with_live`, so the live figures are read for one page's streams,
    not all of the tenant's (issue 34). Every stream has a row of today, saved or not."""
    today = timezone.now().date()
    saved = UsageDay.objects.filter(tenant=tenant, day__gt=today - dt.timedelta(days=days))
    rows = {(r.day, r.stream_uuid): UsageRow(r.day, r.path, {c: getattr(r, c)
                                                             for c in COLUMNS[2:]},
                                             r.stream_uuid)
            for r in saved}
    for stream_uuid, path in Stream.objects.filter(tenant=tenant).values_list("uuid", "path"):
        rows.setdefault((today, stream_uuid), UsageRow(today, path, {}, stream_uuid))
    return sorted(rows.values(), key=lambda r: (-r.day.toordinal(), r.path))


def with_live(tenant: Tenant, rows: list[UsageRow]) -> list[UsageRow]:
    """`rows` (from `usage_keys`) with today's added the live growth of their streams since
    their last rollup and the bytes stored now; only these rows' streams are read."""
    today = timezone.now().date()
    todays = {r.stream_uuid: r for r in rows if r.day == today and r.stream_uuid is not None}
    for stream_uuid, row in _today(tenant, list(todays)).items():
        kept = todays[stream_uuid]
        for key, value in row.figures.items():
            if key == "stored_bytes":
                kept.figures[key] = value
            else:
                kept.figures[key] = kept.figures.get(key, 0) + value
    return rows


def _today(tenant: Tenant, uuids: list[UUID]) -> dict[UUID, UsageRow]:
    """The live growth of the tenant's streams `uuids` since their last rollup (not saved)."""
    if not uuids:
        return {}
    streams = list(Stream.objects.filter(tenant=tenant, uuid__in=uuids).select_related("cluster"))
    if not streams:
        return {}
    today, epoch = timezone.now().date(), _epoch()
    live = _live([s.uuid for s in streams])
    stored = stored_bytes(streams)
    marks = {m.stream_uuid: m for m in UsageMark.objects.filter(
        stream_uuid__in=[s.uuid for s in streams]).exclude(epoch="")}
    return {s.uuid: UsageRow(today, s.path, {
        **_growth(live[s.uuid], marks.get(s.uuid), epoch), "stored_bytes": stored[s.uuid] or 0})
        for s in streams}
