"""SaslHandshake (17) and SaslAuthenticate (36): SASL/PLAIN with the user name and an API token
as the password, checked as the REST API checks tokens (knox, accounts.tokens).

Handshake v0 clients (old kafka-python) send the PLAIN token next as a bare frame rather than
in SaslAuthenticate; that frame is answered with an empty one, or the connection is closed
when it fails, as Kafka does. A failed SaslAuthenticate is answered after Kafka's short delay,
then the connection is closed, as Kafka closes it; an address that failed too often lately is
refused without its token being checked (workers/kafka/limits.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from rest_framework.exceptions import AuthenticationFailed

from workers.kafka import errors
from workers.kafka.codec import build
from workers.kafka.dispatch import RequestHeader, handles, on_raw_sasl, response_class
from workers.kafka.errors import CloseConnection, KafkaError
from workers.kafka.limits import (
    FAILED_SIGN_IN_DELAY,
    address_of,
    sign_in_blocked,
    sign_in_failed,
)
from workers.kafka.session import Session

MECHANISMS = ("PLAIN",)


def check_plain(username: str, token: str) -> AbstractBaseUser | None:
    """The active user `username` when `token` is one of their API tokens."""
    from accounts.tokens import TokenAuthentication

    try:
        user, _ = TokenAuthentication().authenticate_credentials(token.encode())
    except (AuthenticationFailed, UnicodeError):
        return None
    if not user.is_active or user.get_username() != username:
        return None
    return user


def parse_plain(auth_bytes: bytes) -> tuple[str, str]:
    """(user, password) of a PLAIN message `[authzid] NUL authcid NUL passwd` (RFC 4616)."""
    try:
        _, username, password = auth_bytes.decode().split("\0")
    except ValueError as error:
        raise KafkaError(errors.SASL_AUTHENTICATION_FAILED,
                         "malformed SASL/PLAIN message: expected authzid\\0user\\0token") from error
    return username, password


async def _authenticate(session: Session, auth_bytes: bytes) -> None:
    address = address_of(session.peer)
    if await session.run_sync(sign_in_blocked, address):
        session.note("sasl_authentication_throttled", address=address)
        raise KafkaError(errors.SASL_AUTHENTICATION_FAILED,
                         f"too many failed sign-ins from {address}: wait up to "
                         f"{settings.KAFKA_SASL_FAILURE_WINDOW} s before trying again")
    try:
        username, password = parse_plain(auth_bytes)
        user = await session.run_sync(check_plain, username, password)
        if user is None:
            raise KafkaError(errors.SASL_AUTHENTICATION_FAILED,
                             f"authentication failed for {username!r}: the password must be one "
                             "of the user's API tokens (create one with 'streamgate login')")
    except KafkaError as error:
        session.note("sasl_authentication_failed", reason=error.message)
        await session.run_sync(sign_in_failed, address)
        await asyncio.sleep(FAILED_SIGN_IN_DELAY)
        raise
    session.user = user
    session.log = session.log.bind(user=username)


@handles(17, 0, 1)
async def sasl_handshake(session: Session, header: RequestHeader, request: Any) -> Any:
    response = response_class(request)
    if request.mechanism not in MECHANISMS:
        session.note("sasl_mechanism_unsupported", mechanism=request.mechanism)
        return build(response, error_code=errors.UNSUPPORTED_SASL_MECHANISM,
                     mechanisms=MECHANISMS)
    session.sasl_mechanism = request.mechanism
    session.raw_sasl = request.__version__ == 0
    return build(response, mechanisms=MECHANISMS)


@handles(36, 0, 2)
async def sasl_authenticate(session: Session, header: RequestHeader, request: Any) -> Any:
    if session.sasl_mechanism is None or session.user is not None:
        raise KafkaError(errors.ILLEGAL_SASL_STATE,
                         "SaslAuthenticate needs a SaslHandshake first, once per connection")
    try:
        await _authenticate(session, request.auth_bytes)
    except KafkaError as error:
        session.close_after = f"SASL authentication failed: {error.message}"
        raise
    return build(response_class(request), auth_bytes=b"", session_lifetime=0)


@on_raw_sasl
async def raw_token(session: Session, payload: bytes) -> bytes | None:
    session.raw_sasl = False
    try:
        await _authenticate(session, payload)
    except KafkaError as error:
        raise CloseConnection(error.message) from error
    return b""
