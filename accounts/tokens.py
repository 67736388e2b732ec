"""API token authentication (django-rest-knox), without knox's per-request housekeeping.

knox reads every token of the user on every request to delete the expired ones. Tokens here
do not expire (REST_KNOX TOKEN_TTL None) and sign-out deletes its token, so that read (a
query on every produce call) only cost time. A token that does carry an expiry (from a time
a TTL was set) is still refused once past it.
"""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.contrib.knox_auth_token import KnoxTokenScheme
from knox.auth import TokenAuthentication as KnoxTokenAuthentication
from knox.models import AuthToken


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
