"""Replication events for the browser, sent through the channel layer once the change is
committed (a rolled-back change must never reach a page). Group names carry the tenant so a
socket only ever joins the groups of tenants its user belongs to (portal/web/consumers.py)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import orjson
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

if TYPE_CHECKING:
    from replication.models import Stream

log = logging.getLogger(__name__)


def tenant_group(tenant_id: int) -> str:
    return f"tenant.{tenant_id}.replication"


def publish_after_commit(*, tenant_ids: Iterable[int], event: str, payload: dict[str, Any]) -> None:
    groups = sorted({tenant_group(t) for t in tenant_ids})

    def send() -> None:
        layer = get_channel_layer()
        if layer is None:
            return
        # Encoded here, once: the consumer of each socket sends the text as it is, rather
        # than every socket encoding the same event again (200 dashboards, one event).
        text = orjson.dumps({"event": event, "payload": payload}).decode()
        message = {"type": "replication.event", "text": text}

        async def send_all() -> None:
            for group in groups:
                await layer.group_send(group, message)

        # One event loop for all the groups: from sync code each async_to_sync call runs a
        # loop of its own, and the Redis layer opens (and closes) a connection per loop.
        async_to_sync(send_all)()

    # robust: the change is committed either way; a channel-layer outage only costs the live
    # update, and pages recover on their next load or socket reconnect.
    transaction.on_commit(send, robust=True)


def publish_link_event(event: str, source: Stream, replica: Stream) -> None:
    """A change to the link source -> replica, told to the tenants of both ends."""
    publish_after_commit(
        tenant_ids={source.tenant_id, replica.tenant_id},
        event=event,
        payload={"source": source.pk, "replica": replica.pk},
    )
