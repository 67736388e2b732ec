"""API token authentication (django-rest-knox), without knox's per-request housekeeping.

knox reads every token of the user on every request to delete the expired ones. Tokens here
do not expire (REST_KNOX TOKEN_TTL None) and sign-out deletes its token, so that read (a
query on every produce call) only cost time. A token that does carry an expiry (from a time
a TTL was set) is still refused once past it.

Long-lived connections (the Kafka listener's) authenticate once: they keep the TokenGrant
they were given and ask `grants_revoked` now and then whether it still holds.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Q
from django.utils import timezone
from drf_spectacular.contrib.knox_auth_token import KnoxTokenScheme
from knox.auth import TokenAuthentication as KnoxTokenAuthentication
from knox.models import AuthToken
from rest_framework.exceptions import AuthenticationFailed

from accounts.models import Membership


class TokenAuthentication(KnoxTokenAuthentication):
    def _cleanup_token(self, auth_token: AuthToken) -> bool:
        if auth_token.expiry is None:
            return False
        if auth_token.expiry < timezone.now():
            return super()._cleanup_token(auth_token)  # refuses it, and tidies up
        return False


class TokenScheme(KnoxTokenScheme):
    """The API documentation describes these tokens as knox's (a bearer-style header)."""

    target_class = "accounts.tokens.TokenAuthentication"


@dataclass(frozen=True)
class TokenGrant:
    """What one token granted when it was checked: its user, and the tenants (with roles)
    the user belonged to then."""

    digest: str
    user_id: int
    expiry: datetime | None
    memberships: frozenset[tuple[int, str]]


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


def grants_revoked(grants: Collection[TokenGrant]) -> set[TokenGrant]:
    """Those of `grants` that no longer hold: the token deleted (sign-out) or expired, its
    user deactivated or deleted, or a membership it was given removed or its role changed.
    Two queries whatever the number of grants."""
    live = set(AuthToken.objects.filter(digest__in={g.digest for g in grants},
                                        user__is_active=True)
               .filter(Q(expiry__isnull=True) | Q(expiry__gt=timezone.now()))
               .values_list("digest", flat=True))
    held: dict[int, set[tuple[int, str]]] = defaultdict(set)
    users = {g.user_id for g in grants if g.digest in live}
    for user_id, tenant_id, role in Membership.objects.filter(user_id__in=users).values_list(
            "user_id", "tenant_id", "role"):
        held[user_id].add((tenant_id, role))
    return {g for g in grants if g.digest not in live or not g.memberships <= held[g.user_id]}
