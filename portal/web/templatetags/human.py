"""Values as people read them, for every page: yes/no, sizes in KB/MB, durations, times
relative with the exact time on hover, a job's options as `name: value` pairs, and health
with its figures ("Pending 2 msgs / 51 ms", "Stalled 3 min"). Loaded with `{% load human %}`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django import template
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from portal.web.stream_health import TAB_URLS

register = template.Library()

UNITS = ("bytes", "KB", "MB", "GB", "TB")


@register.filter
def yes_no(value: Any) -> str:
    return "yes" if value else "no"


@register.filter
def size(value: int | float | None) -> str:
    """1536 -> "1.5 KB" (binary multiples, as MapR reports sizes)."""
    if value is None:
        return "—"
    amount, unit = float(value), 0
    while abs(amount) >= 1024 and unit < len(UNITS) - 1:
        amount, unit = amount / 1024, unit + 1
    if unit == 0:
        return f"{int(amount)} byte{'' if int(amount) == 1 else 's'}"
    return f"{amount:.1f} {UNITS[unit]}"


@register.filter
def duration_ms(value: int | float | None) -> str:
    """51 -> "51 ms", 180000 -> "3 min", 7_200_000 -> "2 h"."""
    if value is None:
        return "—"
    ms = float(value)
    if ms < 1000:
        return f"{int(ms)} ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f} s" if seconds < 10 else f"{int(seconds)} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min"
    if seconds < 86400:
        return f"{seconds / 3600:.1f} h".replace(".0 h", " h")
    return f"{int(seconds // 86400)} d"


@register.filter
def count(value: int | None, noun: str = "msg") -> str:
    if value is None:
        return "—"
    return f"{value:,} {noun}{'' if value == 1 else 's'}"


def _ago(seconds: float) -> str:
    future = seconds < 0
    text = duration_ms(abs(seconds) * 1000) if abs(seconds) >= 1 else "just now"
    if text == "just now":
        return text
    return f"in {text}" if future else f"{text} ago"


@register.filter(is_safe=True)
def when(value: datetime | None, empty: str = "—") -> str:
    """A <time> saying "3 min ago", the exact UTC time on hover and for machines."""
    if value is None:
        return format_html('<span class="muted">{}</span>', empty)
    exact = value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    seconds = (timezone.now() - value).total_seconds()
    return format_html('<time datetime="{}" title="{}">{}</time>', value.isoformat(), exact,
                       _ago(seconds))


def _plain(value: Any) -> str:
    if isinstance(value, bool):
        return yes_no(value)
    if value is None or value == "":
        return "—"
    if isinstance(value, (list, tuple)):
        return ", ".join(_plain(v) for v in value) or "—"
    return str(value)


@register.filter
def pairs(value: dict[str, Any] | None) -> list[tuple[str, str]]:
    """A dict of options as (name, plain value) rows: `{'repair': False}` -> repair: no."""
    return [(str(key).replace("_", " "), _plain(v)) for key, v in (value or {}).items()]


@register.filter
def plain(value: Any) -> str:
    return _plain(value)


@register.filter
def lag_text(point: list[int] | None, health: Any = None) -> str:
    """The figures after a health label: "2 msgs / 51 ms" pending, "3 min" stalled."""
    if not point:
        return ""
    css = getattr(health, "css", "")
    if css == "stalled":
        return duration_ms(point[3])
    if point[1] and css in ("pending", "paused", "sync", "fellback"):
        return f"{count(point[1])} / {duration_ms(point[3])}"
    return ""


@register.filter
def ttl(seconds: int | None) -> str:
    """A stream's -ttl: 0 keeps messages forever (MapR's meaning)."""
    if not seconds:
        return "forever"
    return duration_ms(seconds * 1000)


def compaction_line(summary: dict[str, Any] | None) -> str:
    """The stream page's line on what log compaction did: passes, messages removed, space
    reclaimed (the logical bytes of what was removed), and the passes running now."""
    if summary is None:
        return "not compacted"
    running = "".join(f"; running on {r['topic']}:{r['partition']}: {r['percent']}%"
                      for r in summary.get("running", []))
    removed = (f"{count(summary['messagesremoved'])} removed, "
               f"{size(summary['bytesreclaimed'])} reclaimed")
    if summary["passes"]:
        return (f"{summary['passes']} passes over {summary['partitions']} partitions: "
                f"{removed}{running}")
    if summary["messagesremoved"]:  # by passes that died half-way
        return f"no pass finished yet: {removed}{running}"
    return f"no pass yet{running}"


INFO_LABELS = {
    "path": "Path", "physicalsize": "Size on disk", "logicalsize": "Size of the data",
    "numtopics": "Topics", "defaultpartitions": "Partitions of a new topic",
    "ttl": "Messages kept for", "compression": "Compression", "autocreate": "Topics created on use",
    "ischangelog": "Change log", "defaulttimestamptype": "Timestamps",
    "compact": "Log compaction", "mincompactionlag": "Uncompacted for at least (ms)",
    "deleteretention": "Tombstones kept for (ms)", "compaction": "Compaction so far",
    "cluster": "Cluster",
    "tenant": "Tenant", "uuid": "Stream id",
}


@register.filter
def info_rows(info: dict[str, Any]) -> list[tuple[str, str, str]]:
    """`stream info` as (plain label, value as read, MapR field name)."""
    rows = []
    for key, value in info.items():
        if key.endswith("size"):
            shown = size(value)
        elif key == "ttl":
            shown = ttl(value)
        else:
            shown = _plain(value)
        rows.append((INFO_LABELS.get(key, key), shown, key))
    return rows


ALARM_FIXES = {
    # kind -> (what to do, where: "stream" page anchor, or a page of its own)
    "STREAM_ALARM_REPLICATION_ERROR": ("Open the replica link", "#replicas"),
    "STREAM_ALARM_REPLICA_ASYNC_FALLBACK": ("See why it fell back", "#replicas"),
    "STREAM_ALARM_REPLICA_STALLED": ("See the lag chart", "#lag-charts"),
    "STREAM_ALARM_RETENTION_UNREPLICATED": ("Resume or speed up the replica", "#replicas"),
    "STREAM_ALARM_REPLICA_WAITING_FOR_UPSTREAM": ("Review the approval", "approvals"),
    "CLUSTER_ALARM_GATEWAYS_DOWN": ("Start a gateway of the cluster", "#gateways"),
    "CLUSTER_ALARM_STORE_COPIES_SHORT": ("See the store group", "cluster"),
}


@register.filter
def alarm_fix(alarm: Any) -> dict[str, str]:
    """The action that clears an engine alarm: a label and where to do it."""
    label, where = ALARM_FIXES.get(alarm.kind, ("Open the overview", "#status"))
    if where == "approvals":
        return {"label": label, "url": reverse("approvals")}
    if where == "cluster" and alarm.cluster_id is not None:
        return {"label": label, "url": reverse("cluster-detail", args=[alarm.entity])}
    if where.startswith("#replicas") or where == "#lag-charts":
        link = alarm.link  # one query per alarm shown (at most 50)
        if link is not None:
            return {"label": label, "url": reverse("stream-detail", args=[link.source_id]) + where}
    return {"label": label, "url": reverse("overview") + where}


@register.filter
def error_of(errors: dict[str, str] | None, name: str) -> str:
    """The error of one input, for `{% include "web/_field_error.html" %}`."""
    return (errors or {}).get(name, "")


@register.filter
def row_key(part: str, pk: int) -> str:
    """The errors key of one table row's buttons (e.g. "replica-12"): see `row_refused`."""
    return f"{part}-{pk}"


@register.filter
def index(items: list[Any], position: int) -> Any:
    return items[position]


@register.filter
def headings(value: str) -> list[str]:
    """"Path|Cluster|Topics" -> the column headings of web/_table.html (templates cannot
    write a list)."""
    return value.split("|")


STREAM_TABS = (("overview", "Overview"), ("topics", "Topics"), ("replication", "Replication"),
               ("groups", "Consumer groups"), ("messages", "Messages"), ("settings", "Settings"),
               ("access", "Access"))


@register.simple_tag
def stream_tabs() -> list[tuple[str, str, str]]:
    """The stream page's tabs as (name, label, URL name), for web/_stream_tabs.html, which the
    message browser's page includes too."""
    return [(name, label, TAB_URLS[name]) for name, label in STREAM_TABS]
