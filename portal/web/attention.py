"""What needs a person, and what to do about it: the overview's counts and its to-do list.

Each item says what is wrong in plain words and carries the action that fixes it (a link, a
button, or the command to run), worst first. Built from what the overview already loaded
(links with their health, gateways): no query of its own except one ACE check per item shown.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

from django.urls import reverse

from portal.web import health as h
from replication.models import Gateway, ReplicaLink

SHOWN = 20


@dataclass
class Action:
    label: str
    url: str = ""
    post: bool = False  # a button posting to url (the page's one CSRF form)
    command: str = ""  # or a command to run, shown as code


@dataclass
class Item:
    css: str
    rank: int
    title: str
    detail: str = ""
    since: datetime | None = None
    actions: list[Action] = field(default_factory=list)


def _gateway_item(gw: Gateway) -> Item:
    return Item("broken", 8, f"Gateway {gw.name} of {gw.cluster.name} is down",
                "Replicas into this cluster stop being applied while no gateway of it runs.",
                since=gw.last_heartbeat,
                actions=[Action("Start it on its host",
                                command=f"streamgate gateway run -cluster {gw.cluster.name} "
                                        f"-name {gw.name}")])


def _stream_url(link: ReplicaLink, anchor: str) -> str:
    return reverse("stream-detail", args=[link.source_id]) + anchor


def _link_item(link: ReplicaLink, health: h.Health, user: object) -> Item | None:
    name = f"{link.source.path} → {link.replica.path}"
    item = Item(health.css, health.rank, f"{name}: {health.label.lower()}")
    if health is h.BROKEN:
        item.detail = link.last_error or "The replicator could not apply this link."
        item.actions = [Action("Open the replica link", _stream_url(link, "#replicas"))]
    elif health is h.WAITING:
        item.detail = (f"{link.replica.path} has not accepted {link.source.path} as its "
                       "upstream yet: nothing replicates until its owner approves.")
        item.actions = [Action("Review the approval", reverse("approval-detail",
                                                              args=[link.pk]))]
    elif health is h.STALLED:
        item.detail = "Messages are pending and none was applied lately."
        item.since = link.last_progress
        item.actions = [Action("See the lag chart", _stream_url(link, "#lag-charts"))]
    elif health is h.PAUSED:
        item.detail = "Paused by hand: the backlog grows until it is resumed."
        if link.source.allows(user, "adminperm"):
            url = reverse("replica-action", args=[link.source_id, link.pk, "resume"])
            item.actions = [Action("Resume", url, post=True)]
        else:
            item.actions = [Action("Open the stream", _stream_url(link, "#replicas"))]
    elif health is h.FELL_BACK:
        item.detail = (f"Producers no longer wait for this synchronous replica"
                       f"{': ' + link.mode_reason if link.mode_reason else ''}. It returns to "
                       "synchronous by itself once caught up with a gateway live.")
        item.since = link.mode_since
        item.actions = [Action("Open the replica link", _stream_url(link, "#replicas"))]
    else:
        return None
    return item


def needing_attention(rows: list[dict]) -> list[dict]:
    """The link rows (worst first already) the to-do list shows."""
    return [row for row in rows if row["health"].rank >= h.FELL_BACK.rank][:SHOWN]


def attention(rows: list[dict], needy: list[tuple[ReplicaLink, h.Health]],
              gateways: list[Gateway], user: object) -> dict[str, object]:
    """The counts (links per health, gateways down) and the to-do items, worst first."""
    per_health = Counter(row["health"].css for row in rows)
    counts = [(health, per_health[health.css]) for health in reversed(h.ALL)
              if per_health[health.css]]
    down = [gw for gw in gateways if gw.status == Gateway.Status.DOWN]
    items = [_gateway_item(gw) for gw in down]
    for link, health in needy:
        item = _link_item(link, health, user)
        if item is not None:
            items.append(item)
    total = len(down) + sum(n for health, n in counts if health.rank >= h.FELL_BACK.rank)
    return {"health_counts": counts, "gateways_down": len(down),
            "gateways_up": len(gateways) - len(down), "todo": items[:SHOWN],
            "todo_hidden": max(0, total - SHOWN)}
