"""Listening to the browser events as a page's socket would: a channel of the test's own on
the real channel layer (Redis), joined to tenant groups."""

from __future__ import annotations

import asyncio
import time
import uuid

import redis
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from replication.events import tenant_group


def layer_settings(redis_url: str, prefix: str) -> dict:
    """CHANNEL_LAYERS with the prefix of a test's namespace, so that concurrent test runs
    sharing one Redis (and tenant ids) never hear each other's events."""
    return {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer",
                        "CONFIG": {"hosts": [redis_url], "prefix": prefix}}}


class Events:
    def __init__(self) -> None:
        self.layer = get_channel_layer()
        # A plain channel rather than new_channel()'s process-local one: each async_to_sync
        # call runs its own event loop.
        self.channel = f"sgtest-{uuid.uuid4().hex}"

    def join(self, tenant_id: int) -> None:
        async_to_sync(self.layer.group_add)(tenant_group(tenant_id), self.channel)

    def collect(self, seconds: float) -> list[tuple[str, dict]]:
        """(event, payload) of every event received within `seconds`."""

        async def gather() -> list[tuple[str, dict]]:
            got: list[tuple[str, dict]] = []
            deadline = time.monotonic() + seconds
            while (left := deadline - time.monotonic()) > 0:
                try:
                    message = await asyncio.wait_for(self.layer.receive(self.channel), left)
                except (TimeoutError, redis.exceptions.TimeoutError):  # redis's, when cut off
                    break
                got.append((message["event"], message["payload"]))
            return got

        return async_to_sync(gather)()
