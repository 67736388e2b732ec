"""SaslHandshake (17) and SaslAuthenticate (36): SASL/PLAIN with the user name and an API token
as the password, checked as the REST API checks tokens (knox, accounts.tokens), and
SCRAM-SHA-256/512 with a SCRAM password the user set (broker/scram.py: two SaslAuthenticate
rounds). The handshake offers the mechanisms of KAFKA_SASL_MECHANISMS.

Handshake v0 clients (old kafka-python) send the SASL tokens next as bare frames rather than
in SaslAuthenticate; each is answered with a bare frame (empty for PLAIN), or the connection
is closed when the sign-in fails, as Kafka does.

A sign-in lasts KAFKA_SESSION_LIFETIME_SECONDS (Kafka's connections.max.reauth.ms), or less
when the token expires sooner; SaslAuthenticate v1+ tells the client (session_lifetime_ms),
which then re-authenticates on the open connection (KIP-368: SaslHandshake v1 and
SaslAuthenticate again, as the same user and with the same mechanism). A session past its
end is closed on its next request (broker/dispatch.py). A failed SaslAuthenticate (either
round of SCRAM) signs the connection out, is answered after Kafka's short delay, then the
connection is closed, as Kafka closes it; an address that failed too often lately is
refused without its token or proof being checked (broker/limits.py)."""

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
from broker.scram import Found, ScramExchange
from broker.session import Session

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

    from accounts.tokens import TokenGrant


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


class PlainExchange:
    """SASL/PLAIN: one message, the user name and one of their API tokens."""

    mechanism = "PLAIN"
    started = False

    async def step(self, session: Session, data: bytes) -> tuple[bytes, Found | None]:
        self.started = True
        username, password = parse_plain(data)
        found = await session.run_sync(check_plain, username, password)
        if found is None:
            raise KafkaError(errors.SASL_AUTHENTICATION_FAILED,
                             f"authentication failed for {username!r}: the password must be one "
                             "of the user's API tokens (POST /api/v1/auth/login/ makes one)")
        return b"", found


def exchange_for(mechanism: str) -> PlainExchange | ScramExchange:
    return PlainExchange() if mechanism == "PLAIN" else ScramExchange(mechanism)


async def _step(session: Session, data: bytes) -> bytes:
    """One round of the session's SASL exchange: its answer; once the exchange ends
    (`session.sasl_exchange` back to None), the session is signed in (or again, KIP-368)
    until `session.expires`."""
    exchange = session.sasl_exchange
    assert exchange is not None  # set by SaslHandshake; its callers check
    try:
        answer, found = await _guarded(session, exchange, data)
    except KafkaError:
        # Signed out (on a re-authentication, the old grant may be the one revoked).
        session.sasl_exchange = None
        session.user, session.grant = None, None
        raise
    if found is not None:
        session.sasl_exchange = None
        _sign_in(session, found, exchange.mechanism)
    return answer


async def _guarded(session: Session, exchange: PlainExchange | ScramExchange,
                   data: bytes) -> tuple[bytes, Found | None]:
    """The exchange's next step; a failure counts against the client's address and is
    answered only after Kafka's delay. An address that failed too often lately is refused
    before its first message is looked at."""
    address = address_of(session.peer)
    try:
        if not exchange.started and await session.run_sync(sign_in_blocked, address):
            session.note("sasl_authentication_throttled", address=address)
            raise KafkaError(errors.SASL_AUTHENTICATION_FAILED,
                             f"too many failed sign-ins from {address}: wait up to "
                             f"{settings.KAFKA_SASL_FAILURE_WINDOW} s before trying again")
        answer, found = await exchange.step(session, data)
        if found is not None and session.user is not None and found[0].pk != session.user.pk:
            # re-authentication keeps the user, as Kafka keeps the principal
            raise KafkaError(errors.SASL_AUTHENTICATION_FAILED,
                             f"re-authentication as {found[0].get_username()!r} on a "
                             f"connection signed in as {session.user.get_username()!r}")
    except KafkaError as error:
        session.note("sasl_authentication_failed", reason=error.message)
        await session.run_sync(sign_in_failed, address)
        await asyncio.sleep(FAILED_SIGN_IN_DELAY)
        raise
    return answer, found


def _sign_in(session: Session, found: Found, mechanism: str) -> None:
    session.user, session.grant = found
    session.signed_in_with = mechanism
    session.lifetime = lifetime_seconds(session.grant)
    session.expires = time.monotonic() + session.lifetime
    session.log = session.log.bind(user=session.user.get_username())


@handles(17, 0, 1)
async def sasl_handshake(session: Session, header: RequestHeader, request: Any) -> Any:
    response = response_class(request)
    mechanisms = settings.KAFKA_SASL_MECHANISMS
    if request.mechanism not in mechanisms:
        session.note("sasl_mechanism_unsupported", mechanism=request.mechanism)
        return build(response, error_code=errors.UNSUPPORTED_SASL_MECHANISM,
                     mechanisms=mechanisms)
    if session.user is not None and request.__version__ == 0:
        raise KafkaError(errors.ILLEGAL_SASL_STATE,
                         "re-authentication needs SaslHandshake v1 and SaslAuthenticate (KIP-368)")
    if session.user is not None and request.mechanism != session.signed_in_with:
        raise KafkaError(errors.ILLEGAL_SASL_STATE,
                         f"re-authentication must use {session.signed_in_with}, the mechanism "
                         f"this connection signed in with, not {request.mechanism} (KIP-368)")
    session.sasl_exchange = exchange_for(request.mechanism)
    session.raw_sasl = request.__version__ == 0
    return build(response, mechanisms=mechanisms)


@handles(36, 0, 2)
async def sasl_authenticate(session: Session, header: RequestHeader, request: Any) -> Any:
    if session.sasl_exchange is None:
        raise KafkaError(errors.ILLEGAL_SASL_STATE,
                         "SaslAuthenticate needs a SaslHandshake first, once per sign-in")
    try:
        answer = await _step(session, request.auth_bytes)
    except KafkaError as error:
        # Answered, then closed, as Kafka closes it.
        session.close_after = f"SASL authentication failed: {error.message}"
        raise
    # The lifetime comes with the last round; 0 (none) with SCRAM's first, as in Kafka.
    done = session.sasl_exchange is None
    return build(response_class(request), auth_bytes=answer,
                 session_lifetime=max(int(session.lifetime * 1000), 1) if done else 0)


@on_raw_sasl
async def raw_token(session: Session, payload: bytes) -> bytes | None:
    try:
        answer = await _step(session, payload)
    except KafkaError as error:
        raise CloseConnection(error.message) from error
    session.raw_sasl = session.sasl_exchange is not None  # SCRAM's second round comes bare too
    return answer
