"""Live replication events for the pages (static/js/live.js).

The socket joins `tenant.<id>.replication` only for tenants the user belongs to, decided
before any group_add; events carry ids only, and the page re-fetches its fragments through
the ordinary, tenant-restricted views, so a socket never shows more than a page load would.
"""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from accounts.models import Tenant
from replication.events import tenant_group


@database_sync_to_async
def _tenant_ids(user: Any) -> list[int]:
    return list(Tenant.objects.restrict(user).values_list("pk", flat=True))


class ReplicationConsumer(AsyncJsonWebsocketConsumer):
    groups_joined: list[str]

    async def connect(self) -> None:
        self.groups_joined = []
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        for tenant_id in await _tenant_ids(user):
            group = tenant_group(tenant_id)
            await self.channel_layer.group_add(group, self.channel_name)
            self.groups_joined.append(group)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        for group in self.groups_joined:
            await self.channel_layer.group_discard(group, self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None,
                      **kwargs: Any) -> None:
        # The pages send nothing; a frame that is not JSON text is answered, where decoding it
        # raised, closed the socket with 1011 and logged a traceback.
        try:
            content = await self.decode_json(text_data) if text_data is not None else None
        except ValueError:
            content = None
        if not isinstance(content, dict):
            await self.send_json({"error": "this socket takes JSON objects only; nothing was "
                                           "done (the pages send nothing)"})
            return
        await self.receive_json(content)

    async def replication_event(self, message: dict[str, Any]) -> None:
        await self.send(text_data=message["text"])  # encoded once by the publisher
