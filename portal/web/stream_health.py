"""What the stream page leads with: the tabs' addresses, and the items that need a person on
this stream (open alarms about it or its links, links whose health is not good), worst first,
built from the links the page already loaded with their health."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Q

from operations.models import Alarm
from portal.web.health import BROKEN
from replication.models import Stream

# tab -> URL name; the groups and messages tabs are their own pages (portal/web/groups.py,
# portal/web/messages.py), the others are streams.stream_detail with the tab given.
TAB_URLS = {"overview": "stream-detail", "topics": "stream-topics",
            "replication": "stream-replication", "groups": "stream-groups",
            "messages": "stream-messages", "settings": "stream-settings",
            "access": "stream-access"}
ATTENTION_RANK = 3  # Health.rank from "fell back to asynchronous" on: a person should look


@dataclass(frozen=True)
class Attention:
    css: str
    title: str
    detail: str
    rank: int
    fix: str = ""  # the tab where it is fixed, when it is not the overview


def stream_attention(stream: Stream, rows: list[tuple[Any, ...]]) -> list[Attention]:
    """`rows`: the page's (link, state, health, point) of replicas and sources."""
    items = []
    for link, _state, health, _point in rows:
        if health.rank >= ATTENTION_RANK:
            other = link.replica if link.source_id == stream.pk else link.source
            items.append(Attention(health.css, f"{other.path}: {health.label.lower()}",
                                   link.last_error or "", health.rank))
        if link.verify_error:  # a verification found the replica differs: Repair is offered
            items.append(Attention("broken", f"{link.replica.path}: differs from its source",
                                   link.verify_error, BROKEN.rank, "replication"))
    alarms = Alarm.objects.open().filter(
        Q(stream=stream) | Q(link__source=stream) | Q(link__replica=stream)).order_by("raised")
    items += [Attention("broken", alarm.entity, alarm.description, 10) for alarm in alarms]
    return sorted(items, key=lambda item: -item.rank)
