"""Consumer groups' state, published for the portal's `stream assign list`.

The coordinator (replication/groups/coordinator.py) runs in a Kafka listener's process; the
portal is another process. On every state change the listener writes the group's snapshot to
a `KafkaGroup` row (replication/models/kafka.py), off the event loop and coalesced, and
refreshes the rows of live groups well within their TTL, so a killed listener's groups
disappear by themselves.

Coordinator keys carry the tenant: `<tenant id>:<group id>`, so two tenants' groups of the same
name never meet. Assignments are opaque to the coordinator; for the consumer protocol (what
every Kafka consumer uses) the listener decodes them (broker/apis/groups.py) and resolves each
member's topic names by its own connection (its tenant, its ACEs) when it syncs: the
`Placement`s handed to `GroupBoard.placed`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

import structlog
from django.utils import timezone

from replication.groups.model import GroupView
from replication.models import KafkaGroup

log = structlog.get_logger(__name__)
TTL = 60.0  # seconds a published snapshot stays valid without a refresh
REFRESH = TTL / 3
RunSync = Callable[..., Awaitable[Any]]


def group_key(tenant_id: int, group_id: str) -> str:
    return f"{tenant_id}:{group_id}"


def split_key(key: str) -> tuple[int, str]:
    tenant, _, group_id = key.partition(":")
    return int(tenant), group_id


@dataclass(frozen=True)
class Placement:
    """One assigned partition, as the member's connection resolved the name it used."""

    stream: str  # the stream's uuid
    path: str
    topic: str
    partition: int
    client_name: str


def snapshot(view: GroupView, placements: dict[str, list[Placement]]) -> dict[str, Any]:
    return {
        "state": view.state, "generation": view.generation_id, "protocol": view.protocol_name,
        "protocoltype": view.protocol_type, "leader": view.leader,
        "members": [{
            "consumerid": m.member_id, "clientid": m.client_id, "host": m.client_host,
            "instanceid": m.instance_id,
            "partitions": [asdict(p) for p in placements.get(m.member_id, [])],
        } for m in view.members],
    }


def publish(key: str, state: dict[str, Any] | None) -> None:
    """Write (or, for a group that is gone or empty, delete) a group's row. Blocking."""
    tenant_id, group_id = split_key(key)
    if not tenant_id:
        return  # a user of no tenant (an operator): no tenant's portal could show the group
    rows = KafkaGroup.objects.filter(tenant_id=tenant_id, group_id=group_id)
    if state is None:
        rows.delete()
        return
    KafkaGroup.objects.update_or_create(
        tenant_id=tenant_id, group_id=group_id,
        defaults={"state": state, "expires": timezone.now() + timedelta(seconds=TTL)})


class GroupBoard:
    """Collects the coordinator's changes and publishes them from a background task."""

    def __init__(self, run_sync: RunSync) -> None:
        self._run_sync = run_sync
        self._views: dict[str, GroupView | None] = {}
        self._placements: dict[str, dict[str, list[Placement]]] = {}
        self._dirty: set[str] = set()
        self._wake = asyncio.Event()

    def on_change(self, view: GroupView) -> None:
        """The coordinator's hook: runs on the event loop, never blocks."""
        log.info("group_state", group=view.group_id, state=view.state,
                 generation=view.generation_id, members=len(view.members))
        gone = view.state in ("Empty", "Dead")
        self._views[view.group_id] = None if gone else view
        if gone:
            self._placements.pop(view.group_id, None)
        self._dirty.add(view.group_id)
        self._wake.set()

    def placed(self, key: str, member_id: str, placements: list[Placement]) -> None:
        self._placements.setdefault(key, {})[member_id] = placements
        self._dirty.add(key)
        self._wake.set()

    def streams_of(self, key: str) -> set[str]:
        """Uuids of the streams the group's members are assigned partitions of."""
        return {p.stream for placed in self._placements.get(key, {}).values() for p in placed}

    async def run(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), REFRESH)
            except TimeoutError:
                self._dirty.update(key for key, view in self._views.items() if view)
            self._wake.clear()
            await self.flush()
            await asyncio.sleep(0.05)  # coalesce a burst of changes (a rebalance) into one write

    async def flush(self) -> None:
        dirty, self._dirty = self._dirty, set()
        for key in dirty:
            view = self._views.get(key)
            state = None if view is None else snapshot(view, self._placements.get(key, {}))
            try:
                await self._run_sync(publish, key, state)
            except Exception:  # the database is away: the next change or refresh retries
                log.warning("group_publish_failed", group=key, exc_info=True)
                self._dirty.add(key)
                continue
            if view is None:
                self._views.pop(key, None)
