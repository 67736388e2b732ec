"""API token authentication (django-rest-knox), without knox's per-request housekeeping.

knox reads every token of the user on every request to delete the expired ones. Tokens here
do not expire (REST_KNOX TOKEN_TTL None) and sign-out deletes its token, so that read (a
query on every produce call) only cost time. A token that does carry an expiry (from a time
a TTL was set) is still refused once past it.

Every token has a scope (accounts.models.TokenScope, kept in its TokenInfo; none: admin),
carried on the user object a sign-in returns (`token_scope`) so the one permission choke
point (replication/scopes.py) masks what the token may not do, and its last use, written at
most once a minute per token.

Long-lived connections (the Kafka listener's) authenticate once: they keep the TokenGrant
they were given (by a token, or by a SCRAM credential: accounts/scram.py) and ask
`grants_revoked` now and then whether it still holds.
"""

from __future__ import annotations

import binascii
import hmac
import threading
import time
from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from drf_spectacular.authentication import BasicScheme
from drf_spectacular.contrib.knox_auth_token import KnoxTokenScheme
from knox.auth import TokenAuthentication as KnoxTokenAuthentication
from knox.crypto import hash_token
from knox.models import AuthToken
from knox.settings import CONSTANTS
from rest_framework.authentication import BasicAuthentication
from rest_framework.exceptions import AuthenticationFailed

from accounts.models import Membership, ScramCredential, TokenInfo, TokenScope
from accounts.secondfactor import has_second_factor

USE_NOTED_SECONDS = 60
_noted: dict[str, float] = {}
_noted_lock = threading.Lock()


def token_scope(user: Any) -> str:
    """The scope of the token `user` signed in with; a session or SCRAM sign-in: admin."""
    return getattr(user, "token_scope", TokenScope.ADMIN)


def token_expiry(user: Any) -> datetime | None:
    """When the token `user` signed in with expires; a session, SCRAM or a lasting token:
    None."""
    return getattr(user, "token_expiry", None)


def info_of(auth_token: AuthToken) -> TokenInfo | None:
    try:
        return auth_token.info
    except TokenInfo.DoesNotExist:
        return None


def note_use(auth_token: AuthToken) -> None:
    """Record that the token was used now: at most one write per token a minute (this
    process remembers its last write; the UPDATE's condition covers the other processes)."""
    now = time.monotonic()
    if now - _noted.get(auth_token.digest, -USE_NOTED_SECONDS) < USE_NOTED_SECONDS:
        return
    with _noted_lock:
        if len(_noted) > 10_000:
            _noted.clear()
        _noted[auth_token.digest] = now
    stamp = timezone.now()
    info = info_of(auth_token)
    if info is not None and info.last_used and stamp - info.last_used < timedelta(
            seconds=USE_NOTED_SECONDS):
        return
    stale = Q(last_used__isnull=True) | Q(last_used__lt=stamp - timedelta(
        seconds=USE_NOTED_SECONDS))
    if not TokenInfo.objects.filter(stale, token_id=auth_token.digest).update(last_used=stamp) \
            and info is None:
        TokenInfo.objects.get_or_create(token_id=auth_token.digest,
                                        defaults={"last_used": stamp})


def issue_token(user: AbstractBaseUser, *, name: str, scope: str = TokenScope.ADMIN,
                expiry: datetime | None = None) -> tuple[AuthToken, str]:
    """A new token of `user` with its TokenInfo, and its secret (shown once: knox keeps only
    the digest). Every way of making one comes here (the Tokens page through
    replication/services/tokens.py, the API's token login, `createtenantuser`)."""
    with transaction.atomic():
        auth_token, secret = AuthToken.objects.create(user, expiry=None)
        if expiry is not None:
            # knox takes a lifetime from its own now; people choose a moment: kept exactly.
            auth_token.expiry = expiry
            auth_token.save(update_fields=["expiry"])
        TokenInfo.objects.create(token=auth_token, name=name, scope=scope)
    return auth_token, secret


class TokenAuthentication(KnoxTokenAuthentication):
    def authenticate_credentials(self, token: bytes) -> tuple[AbstractBaseUser, AuthToken]:
        """knox's check, reading the token's TokenInfo in the same query; the user comes back
        carrying the token's scope (`token_scope`)."""
        text = token.decode("utf-8")
        for auth_token in AuthToken.objects.filter(
                token_key=text[:CONSTANTS.TOKEN_KEY_LENGTH]).select_related("user", "info"):
            if self._cleanup_token(auth_token):
                continue
            try:
                digest = hash_token(text)
            except (TypeError, binascii.Error) as error:
                raise AuthenticationFailed("Invalid token.") from error
            if hmac.compare_digest(digest, auth_token.digest):
                user, _ = self.validate_user(auth_token)
                info = info_of(auth_token)
                user.token_scope = info.scope if info is not None else TokenScope.ADMIN
                user.token_expiry = auth_token.expiry
                note_use(auth_token)
                return user, auth_token
        raise AuthenticationFailed("Invalid token.")

    def _cleanup_token(self, auth_token: AuthToken) -> bool:
        if auth_token.expiry is None:
            return False
        if auth_token.expiry < timezone.now():
            return super()._cleanup_token(auth_token)  # refuses it, and tidies up
        return False


class PasswordBasicAuthentication(BasicAuthentication):
    """HTTP Basic with the password, refused for a user with a second factor: the password
    alone would sign them in around it. They use an API token made on the Tokens page."""

    def authenticate_credentials(self, userid: str, password: str,
                                 request: Any = None) -> tuple[AbstractBaseUser, Any]:
        user, auth = super().authenticate_credentials(userid, password, request)
        if has_second_factor(user):
            raise AuthenticationFailed(
                f"{userid} signs in with a second factor, so a password alone is refused "
                "here: use an API token (Authorization: Token ...) made on the account "
                "page's Tokens page")
        return user, auth


class BasicTokenAuthentication(PasswordBasicAuthentication):
    """HTTP Basic with the user's password or one of their API tokens as the password, as the
    Kafka listener's SASL/PLAIN takes it (maprcli's /rest clients send Basic credentials)."""

    def authenticate_credentials(self, userid: str, password: str,
                                 request: Any = None) -> tuple[AbstractBaseUser, Any]:
        granted = token_grant(userid, password)
        if granted is not None:
            return granted[0], None
        return super().authenticate_credentials(userid, password, request)


class TokenScheme(KnoxTokenScheme):
    """The API documentation describes these tokens as knox's (a bearer-style header)."""

    target_class = "accounts.tokens.TokenAuthentication"


class PasswordBasicScheme(BasicScheme):
    """The token login's HTTP Basic, as the API documentation describes Basic."""

    target_class = "accounts.tokens.PasswordBasicAuthentication"


@dataclass(frozen=True)
class TokenGrant:
    """What one sign-in granted when it was checked: its user, and the tenants (with roles)
    the user belonged to then. `digest` names the secret it was checked against: the token's
    knox digest (PLAIN), or the SCRAM credential's StoredKey in hex (its mechanism), which a
    new password for the mechanism replaces."""

    digest: str
    user_id: int
    expiry: datetime | None
    memberships: frozenset[tuple[int, str]]
    mechanism: str = "PLAIN"
    scope: str = TokenScope.ADMIN


def token_grant(username: str, token: str) -> tuple[AbstractBaseUser, TokenGrant] | None:
    """The active user `username` and what `token` grants, when it is one of their tokens."""
    try:
        user, auth_token = TokenAuthentication().authenticate_credentials(token.encode())
    except (AuthenticationFailed, UnicodeError):
        return None
    if not user.is_active or user.get_username() != username:
        return None
    held = frozenset(Membership.objects.filter(user=user).values_list("tenant_id", "role"))
    return user, TokenGrant(auth_token.digest, user.pk, auth_token.expiry, held,
                            scope=token_scope(user))


def _live_secrets(grants: Collection[TokenGrant]) -> set[str]:
    """The digests among `grants` whose token or SCRAM credential is still there, its user
    active: one query per kind of grant present."""
    tokens = {g.digest for g in grants if g.mechanism == "PLAIN"}
    scram = {(g.mechanism, g.digest) for g in grants if g.mechanism != "PLAIN"}
    live: set[str] = set()
    if tokens:
        live |= set(AuthToken.objects.filter(digest__in=tokens, user__is_active=True)
                    .filter(Q(expiry__isnull=True) | Q(expiry__gt=timezone.now()))
                    .values_list("digest", flat=True))
    if scram:
        live |= {bytes(key).hex() for mechanism, key in ScramCredential.objects.filter(
            stored_key__in=[bytes.fromhex(digest) for _, digest in scram],
            user__is_active=True).values_list("mechanism", "stored_key")
            if (mechanism, bytes(key).hex()) in scram}
    return live


def grants_revoked(grants: Collection[TokenGrant]) -> set[TokenGrant]:
    """Those of `grants` that no longer hold: the token deleted (sign-out) or expired, the
    SCRAM credential deleted or given a new password, the user deactivated or deleted, or a
    membership it was given removed or its role changed. Two queries, three when tokens and
    SCRAM credentials are both among the grants, whatever their number."""
    live = _live_secrets(grants)
    held: dict[int, set[tuple[int, str]]] = defaultdict(set)
    users = {g.user_id for g in grants if g.digest in live}
    for user_id, tenant_id, role in Membership.objects.filter(user_id__in=users).values_list(
            "user_id", "tenant_id", "role"):
        held[user_id].add((tenant_id, role))
    return {g for g in grants if g.digest not in live or not g.memberships <= held[g.user_id]}
