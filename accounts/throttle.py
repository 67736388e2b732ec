"""Sign-in rate limit (and, at the end, the sign-up and password-reset one): after
LOGIN_FAILURE_LIMIT failed sign-ins for one username from one client address within
LOGIN_FAILURE_WINDOW seconds, further attempts from that address are refused until the
window passes, whatever the password. The source, not the account, is locked:
counting per account alone let anyone lock a known user out with a few wrong passwords.
The address is the connection's (REMOTE_ADDR; behind a proxy, the ASGI server
rewrites it from X-Forwarded-For for the proxies it trusts: uvicorn's --forwarded-allow-ips).
One mechanism for every way in (the sign-in page, HTTP Basic on /rest and /api/v1, the token
login), because all of them go through `authenticate()`: its failure signal
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


def _key(username: str, request: Any) -> str:
    # DRF's Request proxies META; calls without a request (none today) share one source.
    address = getattr(request, "META", {}).get("REMOTE_ADDR") or "unknown"
    return f"login-failures:{address}:{username.strip().lower()}"


def login_blocked(username: str | None, request: Any) -> bool:
    return bool(username) and cache.get(_key(username, request), 0) >= settings.LOGIN_FAILURE_LIMIT


class ThrottledModelBackend(ModelBackend):
    def authenticate(self, request: HttpRequest | None, username: str | None = None,
                     password: str | None = None, **kwargs: Any) -> Any:
        if login_blocked(username, request):
            # PermissionDenied stops authenticate() at once: no other backend is tried, and
            # the failure signal still fires (and keeps the window from closing early).
            raise PermissionDenied("too many failed sign-ins")
        return super().authenticate(request, username=username, password=password, **kwargs)


@receiver(user_login_failed)
def _count_failure(sender: Any, credentials: dict[str, Any], request: Any = None,
                   **kwargs: Any) -> None:
    username = credentials.get("username")
    if not username:
        return
    key = _key(username, request)
    cache.add(key, 0, timeout=settings.LOGIN_FAILURE_WINDOW)
    cache.incr(key)


@receiver(user_logged_in)
def _forget_failures(sender: Any, user: Any, request: Any = None, **kwargs: Any) -> None:
    cache.delete(_key(user.get_username(), request))


def attempt_allowed(kind: str, request: Any) -> bool:
    """Count one `kind` attempt (sign-up, password reset) from the request's client address;
    False past SIGNUP_LIMIT within SIGNUP_WINDOW seconds. Every attempt counts, refused ones
    too: they create accounts and send mail, so a script must not repeat them at will."""
    address = getattr(request, "META", {}).get("REMOTE_ADDR") or "unknown"
    key = f"attempts:{kind}:{address}"
    cache.add(key, 0, timeout=settings.SIGNUP_WINDOW)
    return cache.incr(key) <= settings.SIGNUP_LIMIT
