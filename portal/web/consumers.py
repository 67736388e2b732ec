"""Live replication events for the pages (static/js/live.js).

The socket joins `tenant.<id>.replication` only for tenants the user belongs to, decided
before any group_add; events carry ids only, and the page re-fetches its fragments through
the ordinary, tenant-restricted views, so a socket never shows more than a page load would.

It also joins its user's and its sign-in session's groups (accounts/sockets.py): on sign-out,
a membership removed or the user deactivated, it leaves every group and closes (4401), so no
tenant event reaches it afterwards.
"""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.contrib.auth import get_user_model

from accounts.models import Tenant
from accounts.sockets import session_group, user_group
from replication.events import tenant_group


@database_sync_to_async
def _tenant_ids(user: Any, session: Any) -> list[int] | None:
    """The user's tenants; None when the session or the user has ended meanwhile."""
    if not session.exists(session.session_key):
        return None
    if not get_user_model().objects.filter(pk=user.pk, is_active=True).exists():
        return None
    return list(Tenant.objects.restrict(user).values_list("pk", flat=True))


class ReplicationConsumer(AsyncJsonWebsocketConsumer):
    groups_joined: list[str]
    revoked = False

    async def connect(self) -> None:
        self.groups_joined = []
        user, session = self.scope.get("user"), self.scope.get("session")
        if user is None or not user.is_authenticated or session is None or not session.session_key:
            await self.close(code=4401)
            return
        # Revocations' groups first: one committed from now on reaches this socket, one
        # committed before shows in what _tenant_ids reads.
        await self._join([user_group(user.pk), session_group(session.session_key)])
        tenant_ids = await _tenant_ids(user, session)
        if tenant_ids is None:
            await self._leave_groups()
            await self.close(code=4401)
            return
        await self._join([tenant_group(tenant_id) for tenant_id in tenant_ids])
        await self.accept()

    async def _join(self, groups: list[str]) -> None:
        for group in groups:
            await self.channel_layer.group_add(group, self.channel_name)
            self.groups_joined.append(group)

    async def disconnect(self, code: int) -> None:
        await self._leave_groups()

    async def _leave_groups(self) -> None:
        groups, self.groups_joined = self.groups_joined, []
        for group in groups:
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

    async def accounts_revoked(self, message: dict[str, Any]) -> None:
        self.revoked = True  # events already queued for this socket are dropped, not sent
        await self._leave_groups()
        await self.close(code=4401, reason=message.get("reason", "")[:100])

    async def replication_event(self, message: dict[str, Any]) -> None:
        if not self.revoked:
            await self.send(text_data=message["text"])  # encoded once by the publisher
