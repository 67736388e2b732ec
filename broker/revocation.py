"""Closing the connections whose sign-in was revoked.

Every KAFKA_REVOCATION_CHECK_SECONDS each listener asks the database, in two queries for all
its connections (accounts.tokens.grants_revoked), which of their grants no longer hold: a
token deleted (`POST /api/v1/auth/logout/`, the admin site) or expired, a user deactivated or
deleted, a membership removed or its role changed. Those connections are closed at once, an
in-flight long-polling fetch included; the client's reconnection then fails to sign in.

A poll of the database rather than a message from the portal: listeners are other processes
(in production) or a thread of the portal's (embedded), a poll reaches both alike, and it sees
every way a grant ends (a queryset update, a token's expiry, a cascade) with nothing to lose
in between. Revocation is thus noticed within one interval plus one check.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import structlog
from django.conf import settings

from broker.background import Background
from broker.session import Listener, forget_connection

if TYPE_CHECKING:
    from accounts.tokens import TokenGrant

log = structlog.get_logger(__name__)


def _revoked(grants: set[TokenGrant]) -> set[TokenGrant]:
    from accounts.tokens import grants_revoked

    try:
        return grants_revoked(grants)
    except Exception as error:
        forget_connection(error)
        raise


async def check_once(listener: Listener) -> int:
    """Close the connections whose grant no longer holds; how many were closed."""
    signed_in = [s for s in listener.sessions if s.grant is not None]
    if not signed_in:
        return 0
    loop = asyncio.get_running_loop()
    revoked = await loop.run_in_executor(listener.executor, _revoked,
                                         {s.grant for s in signed_in})
    closed = [s for s in signed_in if s.grant in revoked]
    for session in closed:
        session.revoke("the token, user or membership it signed in with was revoked")
    return len(closed)


class RevocationWatch(Background):
    """Checks `listener`'s connections every KAFKA_REVOCATION_CHECK_SECONDS while it serves."""

    def __init__(self, listener: Listener) -> None:
        self.listener = listener

    async def loop(self) -> None:
        while True:
            await asyncio.sleep(settings.KAFKA_REVOCATION_CHECK_SECONDS)
            try:
                await check_once(self.listener)
            except Exception as error:  # the database restarting: check again next time
                log.warning("kafka_revocation_check_failed", error=str(error))
