"""API token authentication (django-rest-knox), without knox's per-request housekeeping.

knox reads every token of the user on every request to delete the expired ones. Tokens here
do not expire (REST_KNOX TOKEN_TTL None) and sign-out deletes its token, so that read (a
query on every produce call) only cost time. A token that does carry an expiry (from a time
a TTL was set) is still refused once past it.

Long-lived connections (the Kafka listener's) authenticate once: they keep the TokenGrant
they were given (by a token, or by a SCRAM credential: accounts/scram.py) and ask
`grants_revoked` now and then whether it still holds.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Q
from django.utils import timezone
from drf_spectacular.contrib.knox_auth_token import KnoxTokenScheme
from knox.auth import TokenAuthentication as KnoxTokenAuthentication
from knox.models import AuthToken
from rest_framework.authentication import BasicAuthentication
from rest_framework.exceptions import AuthenticationFailed

from accounts.models import Membership, ScramCredential


class TokenAuthentication(KnoxTokenAuthentication):
    def _cleanup_token(self, auth_token: AuthToken) -> bool:
        if auth_token.expiry is None:
            return False
        if auth_token.expiry < timezone.now():
            return super()._cleanup_token(auth_token)  # refuses it, and tidies up
        return False


class BasicTokenAuthentication(BasicAuthentication):
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


def token_grant(username: str, token: str) -> tuple[AbstractBaseUser, TokenGrant] | None:
    """The active user `username` and what `token` grants, when it is one of their tokens."""
    try:
        user, auth_token = TokenAuthentication().authenticate_credentials(token.encode())
    except (AuthenticationFailed, UnicodeError):
        return None
    if not user.is_active or user.get_username() != username:
        return None
    held = frozenset(Membership.objects.filter(user=user).values_list("tenant_id", "role"))
    return user, TokenGrant(auth_token.digest, user.pk, auth_token.expiry, held)


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
