"""Browser sign-ins kept as small records (SignInSession) at login, so the account page lists
a user's sessions and ends one without scanning the session table: ending one deletes its
session from the session store, which signs that browser out on its next request."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from importlib import import_module
from typing import Any

from django.conf import settings
from django.contrib.auth import SESSION_KEY
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from accounts.models import SignInSession

SEEN_SECONDS = 60
# Set in a session with a record: the others (made before records, or by tests' force_login)
# cost no query.
RECORDED = "sign_in_recorded"
_seen: dict[str, float] = {}
_seen_lock = threading.Lock()


def client_ip(request: HttpRequest) -> str | None:
    # The proxy in front (compose's) is the peer; Django's REMOTE_ADDR is what we trust.
    return request.META.get("REMOTE_ADDR") or None


def record_sign_in(sender: Any, request: HttpRequest | None, user: AbstractBaseUser,
                   **_: Any) -> None:
    """user_logged_in: keep a record of a browser session (not of the API's token login,
    which also sends the signal but puts no user in a session)."""
    session = getattr(request, "session", None)
    if session is None or session.get(SESSION_KEY) != str(user.pk):
        return
    if session.session_key is None:
        session.save()
    session[RECORDED] = True
    _seen[session.session_key] = time.monotonic()  # last_seen is now: no UPDATE for a minute
    SignInSession.objects.update_or_create(session_key=session.session_key, defaults={
        "user": user, "user_agent": request.META.get("HTTP_USER_AGENT", "")[:300],
        "ip": client_ip(request), "last_seen": timezone.now()})


def forget_sign_in(sender: Any, request: HttpRequest | None, **_: Any) -> None:
    """user_logged_out: the record goes with the session."""
    key = getattr(getattr(request, "session", None), "session_key", None)
    if key:
        SignInSession.objects.filter(session_key=key).delete()


def note_seen(request: HttpRequest) -> None:
    """Record that the session was seen now: at most one write a minute per session."""
    session = getattr(request, "session", None)
    key = getattr(session, "session_key", None)
    if not key or not session.get(RECORDED):
        return
    now = time.monotonic()
    if now - _seen.get(key, -SEEN_SECONDS) < SEEN_SECONDS:
        return
    with _seen_lock:
        if len(_seen) > 10_000:
            _seen.clear()
        _seen[key] = now
    stamp = timezone.now()
    SignInSession.objects.filter(
        Q(last_seen__lt=stamp - timedelta(seconds=SEEN_SECONDS)), session_key=key,
    ).update(last_seen=stamp)


class SignInSeenMiddleware:
    """Keeps each browser session's last-seen time (after SessionMiddleware)."""

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        note_seen(request)
        return response


def end_sessions(records: list[SignInSession]) -> int:
    """Sign the browsers of `records` out: their sessions deleted from the store."""
    store = import_module(settings.SESSION_ENGINE).SessionStore
    for record in records:
        store(session_key=record.session_key).delete()
    SignInSession.objects.filter(pk__in=[r.pk for r in records]).delete()
    return len(records)


def connect_receivers() -> None:
    from django.contrib.auth.signals import user_logged_in, user_logged_out

    user_logged_in.connect(record_sign_in, dispatch_uid="sign-in-session")
    user_logged_out.connect(forget_sign_in, dispatch_uid="sign-out-session")
