"""A listener's presence while it serves: the beat that keeps it among the live listeners
(replication/listeners.py keeps the set and answers who is live) and its cached view of the
others, so Metadata reads live nodes without any I/O."""

from __future__ import annotations

import asyncio
import contextlib

import structlog
from django.conf import settings

from broker.background import Background
from broker.session import Listener, Node
from replication.listeners import beat, leave

log = structlog.get_logger(__name__)


class Beacon(Background):
    """Beats for `listener` while the listener serves, keeping `listener.nodes` current."""

    def __init__(self, listener: Listener) -> None:
        self.listener = listener
        self.live: list[Node] = [listener.node]
        listener.nodes = lambda: self.live

    async def _beat_once(self) -> None:
        ttl = settings.KAFKA_PRESENCE_TTL
        try:
            self.live = await asyncio.to_thread(beat, self.listener.node,
                                                self.listener.cluster, ttl)
        except Exception as error:  # Redis restarting: serve alone until it is back
            log.warning("kafka_presence_failed", error=str(error))
            self.live = [self.listener.node]

    async def loop(self) -> None:
        while True:
            await self._beat_once()
            await asyncio.sleep(settings.KAFKA_HEARTBEAT_SECONDS)

    async def begin(self) -> None:
        await self._beat_once()

    async def end(self) -> None:
        with contextlib.suppress(Exception):
            await asyncio.to_thread(leave, self.listener.node, self.listener.cluster)
