"""Live members of a stream's Kafka consumer groups, read from the `KafkaGroup` rows the
listener's coordinator publishes (board.py). One reader for every interface that shows them:
`stream assign list` over /rest and the stream page's Consumer groups tab.

Rows are the tenant's own (coordinator keys carry the tenant) and only those not past
`expires` count: a killed listener's groups vanish by themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone

from replication.models import KafkaGroup, Stream
from replication.services.cursors import LIST_PERMS


@dataclass(frozen=True)
class LiveMember:
    member_id: str
    client_id: str
    host: str
    instance_id: str
    leader: bool
    partitions: tuple[tuple[str, int], ...]  # (topic, partition) of this stream, sorted


@dataclass(frozen=True)
class LiveGroup:
    group: str
    state: str  # Kafka's: Stable, PreparingRebalance, CompletingRebalance
    generation: int
    protocol: str
    members: tuple[LiveMember, ...]

    def owner_of(self, topic: str, partition: int) -> LiveMember | None:
        return next((m for m in self.members if (topic, partition) in m.partitions), None)


def _member(raw: dict[str, Any], stream_uuid: str, leader: str) -> LiveMember:
    placed = sorted((p["topic"], p["partition"]) for p in raw.get("partitions", [])
                    if p["stream"] == stream_uuid)
    return LiveMember(raw["consumerid"], raw["clientid"], raw["host"],
                      raw.get("instanceid") or "", raw["consumerid"] == leader, tuple(placed))


def _live_group(row: KafkaGroup, stream_uuid: str) -> LiveGroup:
    state = row.state
    members = tuple(_member(m, stream_uuid, state.get("leader") or "")
                    for m in state.get("members", []))
    return LiveGroup(row.group_id, state.get("state", ""), state.get("generation", 0),
                     state.get("protocol") or "", members)


def live_groups(*, actor: AbstractBaseUser, stream: Stream,
                group: str | None = None) -> list[LiveGroup]:
    """The tenant's live Kafka groups with a member assigned a partition of `stream`, every
    member listed (one still joining holds no partition yet), by group name. The actor needs
    one of the permissions that list cursors, as MapR's `stream assign list` does."""
    stream.require(actor, *LIST_PERMS, action="list consumer assignments")
    rows = KafkaGroup.objects.filter(tenant_id=stream.tenant_id, expires__gt=timezone.now())
    if group:
        rows = rows.filter(group_id=group)
    found = [_live_group(row, str(stream.uuid)) for row in rows.order_by("group_id")]
    return [g for g in found if any(m.partitions for m in g.members)]
