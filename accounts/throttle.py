"""Sign-in rate limit: after LOGIN_FAILURE_LIMIT failed sign-ins for one username within
LOGIN_FAILURE_WINDOW seconds, further attempts are refused until the window passes, whatever
the password. One mechanism for every way in (the sign-in page, HTTP Basic on /rest and
/api/v1, the token login), because all of them go through `authenticate()`: its failure signal
counts, this backend refuses. The counts live in the shared cache (Redis in production), so
every web worker sees them."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.dispatch import receiver
from django.http import HttpRequest


def _key(username: str) -> str:
    return f"login-failures:{username.strip().lower()}"


def login_blocked(username: str | None) -> bool:
    return bool(username) and cache.get(_key(username), 0) >= settings.LOGIN_FAILURE_LIMIT


class ThrottledModelBackend(ModelBackend):
    def authenticate(self, request: HttpRequest | None, username: str | None = None,
                     password: str | None = None, **kwargs: Any) -> Any:
        if login_blocked(username):
            # PermissionDenied stops authenticate() at once: no other backend is tried, and
            # the failure signal still fires (and keeps the window from closing early).
            raise PermissionDenied("too many failed sign-ins")
        return super().authenticate(request, username=username, password=password, **kwargs)


@receiver(user_login_failed)
def _count_failure(sender: Any, credentials: dict[str, Any], **kwargs: Any) -> None:
    username = credentials.get("username")
    if not username:
        return
    key = _key(username)
    cache.add(key, 0, timeout=settings.LOGIN_FAILURE_WINDOW)
    cache.incr(key)


@receiver(user_logged_in)
def _forget_failures(sender: Any, user: Any, **kwargs: Any) -> None:
    cache.delete(_key(user.get_username()))
