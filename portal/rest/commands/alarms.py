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
from replication.models import Gateway

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
    window = (alarms.order_by("-raised", "-pk")
              .select_related("link__source", "link__replica", "cluster")
              [opts["start"]:opts["start"] + opts["limit"]])
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


def _fix(alarm: Alarm) -> str | None:
    """The command that clears a raised alarm, as the browser links the page that does
    (alarm_fix): the domain's description says what to do in plain words, the command line
    names the command."""
    link, cluster = alarm.link, alarm.cluster
    if alarm.kind == AlarmKind.WAITING_FOR_UPSTREAM and link is not None:
        return (f"streamgate stream upstream add -path {link.replica.path} "
                f"-upstream {link.source.path}")
    if alarm.kind == AlarmKind.DIVERGED and link is not None:
        return (f"streamgate stream replica repair -path {link.source.path} "
                f"-replica {link.replica.path}")
    if (alarm.kind == AlarmKind.GATEWAYS_DOWN and cluster is not None
            and not Gateway.objects.filter(cluster=cluster).exists()):
        return f"streamgate cluster gateway set -dstcluster {cluster.name} -gateways <names>"
    return None


def _described(alarm: Alarm) -> str:
    fix = None if alarm.cleared else _fix(alarm)
    return alarm.description if fix is None else f"{alarm.description} with '{fix}'"


def alarm_row(alarm: Alarm) -> Row:
    changed = alarm.cleared or alarm.raised
    return {
        "entity": alarm.entity,
        "alarm name": alarm.kind,
        "alarm state": 0 if alarm.cleared else 1,
        "alarm statechange time": epoch_ms(changed),
        "description": _described(alarm),
        "alarm type": alarm.alarm_type,
        # streamgate's own, after MapR's.
        "alarm raised": epoch_ms(alarm.raised),
        "alarm cleared": epoch_ms(alarm.cleared),
    }

