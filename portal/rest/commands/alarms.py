"""alarm list: MapR's command over streamgate's alarms (operations/alarms.py).

Tenant-scoped like every list: a user sees the alarms of links from or to their tenants'
streams and of clusters their tenants have streams on; operators see all.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Count, Q, QuerySet

from operations.models import CLUSTER_KINDS, Alarm, AlarmKind
from portal.rest.commands.registry import Row, command, stream_at
from portal.rest.options import Bool, Choice, Int, Str, StreamPath
from replication.errors import InvalidInput
from replication.figures import epoch_ms

TYPES = ("cluster", "stream")


@command(
    "alarm/list",
    Str("alarm", "only this alarm name, e.g. STREAM_ALARM_REPLICA_STALLED"),
    Choice("type", "only cluster or stream alarms", choices=TYPES),
    Str("entity", "only alarms of this entity: a cluster name, or '<source> -> <replica>'"),
    StreamPath("path", "only alarms of replica links from or to this stream"),
    Bool("summary", "count the alarms by name instead of listing them (default false)",
         default=False),
    Bool("history", "list cleared alarms instead of raised ones (default false)",
         default=False),
    Int("start", "skip this many alarms (default 0)", min=0, default=0),
    Int("limit", "list at most this many (default 1000)", min=1, max=100_000, default=1000),
    summary="List raised alarms (or, with -history true, cleared ones).",
    changes=False,
)
def alarm_list(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    alarms = _filtered(Alarm.objects.restrict(user), user, opts)
    if opts["summary"]:
        counts = alarms.order_by().values("kind").annotate(n=Count("pk", distinct=True))
        return [{"alarm name": row["kind"], "count": row["n"]}
                for row in sorted(counts, key=lambda row: row["kind"])]
    window = alarms.order_by("-raised", "-pk")[opts["start"]:opts["start"] + opts["limit"]]
    return [alarm_row(alarm) for alarm in window]


def _filtered(alarms: QuerySet[Alarm], user: AbstractBaseUser,
              opts: dict[str, Any]) -> QuerySet[Alarm]:
    alarms = alarms.exclude(cleared=None) if opts["history"] else alarms.filter(cleared=None)
    if opts["alarm"] is not None:
        alarms = alarms.filter(kind=_alarm_name(opts["alarm"]))
    if opts["type"] == "cluster":
        alarms = alarms.filter(kind__in=CLUSTER_KINDS)
    elif opts["type"] == "stream":
        alarms = alarms.exclude(kind__in=CLUSTER_KINDS)
    if opts["entity"] is not None:
        alarms = alarms.filter(entity=opts["entity"])
    if opts["path"] is not None:
        stream = stream_at(user, opts)  # another tenant's stream reads as a missing one
        alarms = alarms.filter(Q(link__source=stream) | Q(link__replica=stream))
    return alarms


def _alarm_name(raw: str) -> str:
    name = raw.strip().upper()
    if name not in AlarmKind.values:
        raise InvalidInput(f"-alarm {raw!r} is not an alarm name: use one of "
                           f"{', '.join(AlarmKind.values)}", field="alarm")
    return name


def alarm_row(alarm: Alarm) -> Row:
    changed = alarm.cleared or alarm.raised
    return {
        "entity": alarm.entity,
        "alarm name": alarm.kind,
        "alarm state": 0 if alarm.cleared else 1,
        "alarm statechange time": epoch_ms(changed),
        "description": alarm.description,
        "alarm type": alarm.alarm_type,
        # streamgate's own, after MapR's.
        "alarm raised": epoch_ms(alarm.raised),
        "alarm cleared": epoch_ms(alarm.cleared),
    }

