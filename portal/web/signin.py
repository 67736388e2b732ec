"""Sign-in's second step for a user with a TOTP second factor: the password step
(views.SignInView) leaves who passed it in the (still anonymous) session, and this page signs
them in once a code from their app, or a recovery code, is right. Five wrong codes, or five
minutes, and the password is asked for again. A wrong code counts as a failed sign-in in the
sign-in rate limit (accounts/throttle.py), so starting again with the password does not buy
an endless run of guesses: past the limit the address is refused for the user."""

from __future__ import annotations

import time
from typing import Any

from django.contrib.auth import get_user_model, login
from django.contrib.auth.signals import user_login_failed
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache

from accounts.secondfactor import code_accepted
from accounts.throttle import login_blocked

PENDING = "signin_second_factor"
MAX_TRIES = 5
PENDING_SECONDS = 300


def second_factor_pending(request: HttpRequest, user: Any, next_url: str) -> HttpResponse:
    """After the password: remember who passed it, and ask for the code."""
    request.session[PENDING] = {"user": user.pk, "backend": user.backend, "next": next_url,
                                "tries": 0, "at": time.time()}
    return redirect("login-code")


def _pending(request: HttpRequest) -> dict[str, Any] | None:
    pending = request.session.get(PENDING)
    if pending is None or time.time() - pending["at"] > PENDING_SECONDS:
        request.session.pop(PENDING, None)
        return None
    return pending


@never_cache
def sign_in_code(request: HttpRequest) -> HttpResponse:
    pending = _pending(request)
    if pending is None:
        return redirect("login")
    if request.method != "POST":
        return render(request, "registration/login_code.html", {})
    user = get_user_model().objects.filter(pk=pending["user"], is_active=True).first()
    if user is None or login_blocked(user.get_username(), request):
        del request.session[PENDING]
        return redirect("login")
    if code_accepted(user, request.POST.get("code", "")):
        del request.session[PENDING]
        login(request, user, backend=pending["backend"])
        return redirect(pending["next"])
    user_login_failed.send(sender=__name__, credentials={"username": user.get_username()},
                           request=request)
    pending["tries"] += 1
    if pending["tries"] >= MAX_TRIES:
        del request.session[PENDING]
        return redirect("login")
    request.session[PENDING] = pending
    return render(request, "registration/login_code.html", {
        "error": "that code is wrong or already used: type the 6 digits your app shows now, "
                 "or an unused recovery code"}, status=400)
