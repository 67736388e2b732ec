"""SaslHandshake (17) and SaslAuthenticate (36): SASL/PLAIN with the user name and an API token
as the password, checked as the REST API checks tokens (knox, accounts.tokens).

Handshake v0 clients (old kafka-python) send the PLAIN token next as a bare frame rather than
in SaslAuthenticate; that frame is answered with an empty one, or the connection is closed
when it fails, as Kafka does.

A sign-in lasts KAFKA_SESSION_LIFETIME_SECONDS (Kafka's connections.max.reauth.ms), or less
when the token expires sooner; SaslAuthenticate v1+ tells the client (session_lifetime_ms),
which then re-authenticates on the open connection (KIP-368: SaslHandshake v1 and
SaslAuthenticate again, as the same user). A session past its end is closed on its next
request (broker/dispatch.py). A failed SaslAuthenticate signs the connection out, is
answered after Kafka's short delay, then the connection is closed, as Kafka closes it; an
address that failed too often lately is refused without its token being checked
(broker/limits.py)."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.utils import timezone

from broker import errors
from broker.codec import build
from broker.dispatch import RequestHeader, handles, on_raw_sasl, response_class
from broker.errors import CloseConnection, KafkaError
from broker.limits import (
    FAILED_SIGN_IN_DELAY,
    address_of,
    sign_in_blocked,
    sign_in_failed,
)
from broker.session import Session

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

    from accounts.tokens import TokenGrant

MECHANISMS = ("PLAIN",)


def check_plain(username: str, token: str) -> tuple[AbstractBaseUser, TokenGrant] | None:
    """The active user `username` and what `token` grants, when it is one of their tokens."""
    from accounts.tokens import token_grant

    return token_grant(username, token)


def lifetime_seconds(grant: TokenGrant) -> float:
    """How long a sign-in with `grant` lasts: the configured lifetime, or until the token
    expires when that is sooner."""
    lifetime = settings.KAFKA_SESSION_LIFETIME_SECONDS
    if grant.expiry is not None:
        lifetime = min(lifetime, (grant.expiry - timezone.now()).total_seconds())
    return max(lifetime, 0.0)


def parse_plain(auth_bytes: bytes) -> tuple[str, str]:
    """(user, password) of a PLAIN message `[authzid] NUL authcid NUL passwd` (RFC 4616)."""
    try:
        _, username, password = auth_bytes.decode().split("\0")
    except ValueError as error:
        raise KafkaError(errors.SASL_AUTHENTICATION_FAILED,
                         "malformed SASL/PLAIN message: expected authzid\\0user\\0token") from error
    return username, password


async def _authenticate(session: Session, auth_bytes: bytes) -> float:
    """Sign the session in (or again, KIP-368); how long the sign-in lasts, in seconds."""
    address = address_of(session.peer)
    if await session.run_sync(sign_in_blocked, address):
        session.note("sasl_authentication_throttled", address=address)
        raise KafkaError(errors.SASL_AUTHENTICATION_FAILED,
                         f"too many failed sign-ins from {address}: wait up to "
                         f"{settings.KAFKA_SASL_FAILURE_WINDOW} s before trying again")
    try:
        username, password = parse_plain(auth_bytes)
        found = await session.run_sync(check_plain, username, password)
        if found is not None and session.user is not None and found[0].pk != session.user.pk:
            found = None  # re-authentication keeps the user, as Kafka keeps the principal
        if found is None:
            raise KafkaError(errors.SASL_AUTHENTICATION_FAILED,
                             f"authentication failed for {username!r}: the password must be one "
                             "of the user's API tokens (POST /api/v1/auth/login/ makes one)")
    except KafkaError as error:
        session.note("sasl_authentication_failed", reason=error.message)
        await session.run_sync(sign_in_failed, address)
        await asyncio.sleep(FAILED_SIGN_IN_DELAY)
        raise
    session.user, session.grant = found
    lifetime = lifetime_seconds(session.grant)
    session.expires = time.monotonic() + lifetime
    session.log = session.log.bind(user=username)
    return lifetime


@handles(17, 0, 1)
async def sasl_handshake(session: Session, header: RequestHeader, request: Any) -> Any:
    response = response_class(request)
    if request.mechanism not in MECHANISMS:
        session.note("sasl_mechanism_unsupported", mechanism=request.mechanism)
        return build(response, error_code=errors.UNSUPPORTED_SASL_MECHANISM,
                     mechanisms=MECHANISMS)
    if session.user is not None and request.__version__ == 0:
        raise KafkaError(errors.ILLEGAL_SASL_STATE,
                         "re-authentication needs SaslHandshake v1 and SaslAuthenticate (KIP-368)")
    session.sasl_mechanism = request.mechanism
    session.raw_sasl = request.__version__ == 0
    return build(response, mechanisms=MECHANISMS)


@handles(36, 0, 2)
async def sasl_authenticate(session: Session, header: RequestHeader, request: Any) -> Any:
    if session.sasl_mechanism is None:
        raise KafkaError(errors.ILLEGAL_SASL_STATE,
                         "SaslAuthenticate needs a SaslHandshake first, once per sign-in")
    session.sasl_mechanism = None  # the next (re-)authentication starts with a handshake
    try:
        lifetime = await _authenticate(session, request.auth_bytes)
    except KafkaError as error:
        # Signed out (on a re-authentication, the old grant may be the one revoked), answered,
        # then closed, as Kafka closes it.
        session.user, session.grant = None, None
        session.close_after = f"SASL authentication failed: {error.message}"
        raise
    return build(response_class(request), auth_bytes=b"",
                 session_lifetime=max(int(lifetime * 1000), 1))


@on_raw_sasl
async def raw_token(session: Session, payload: bytes) -> bytes | None:
    session.raw_sasl = False
    try:
        await _authenticate(session, payload)
    except KafkaError as error:
        raise CloseConnection(error.message) from error
    return b""
