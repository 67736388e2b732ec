"""Account: browser sessions (listed from the records kept at login, accounts/sessions.py;
one or all others signed out) and the optional TOTP second factor (accounts/secondfactor.py):
set up with a code from the app, asked for after the password at sign-in, removed with a
code. Another user's session answers 404."""

from __future__ import annotations

from typing import Any

import segno
from django.contrib import messages
from django.contrib.auth import logout
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils.safestring import SafeString, mark_safe
from django.views.decorators.http import require_POST

from accounts import totp
from accounts.models import SignInSession, TotpDevice
from accounts.secondfactor import device_start, recovery_codes_left
from accounts.sessions import end_sessions
from portal.web.tenancy import open_to_pending


def security_context(request: HttpRequest) -> dict[str, Any]:
    """What the account page shows of the user's sessions and second factor."""
    device = TotpDevice.objects.filter(user=request.user).first()
    context: dict[str, Any] = {
        "sign_ins": SignInSession.objects.filter(user=request.user),
        "current_session": request.session.session_key, "totp": device,
        "recovery_left": recovery_codes_left(request.user) if device else 0}
    if device is not None and not device.confirmed:
        uri = totp.provisioning_uri(device.secret, account=request.user.get_username())
        context.update(otpauth=uri, otpauth_qr=qr_svg(uri))
    return context


def qr_svg(text: str) -> SafeString:
    """`text` as a QR code, an inline SVG drawn here (no network, no script): black on white
    with the standard quiet zone whatever the theme, so every authenticator app reads it."""
    code = segno.make(text, error="m")
    svg = code.svg_inline(scale=4, border=4, dark="#000", light="#fff",
                          title="QR code of the setup URI: scan it with your authenticator app")
    return mark_safe(svg.replace("<svg ", '<svg role="img" id="totp-qr" ', 1))


@open_to_pending
@login_required
@require_POST
def session_end(request: HttpRequest, pk: int) -> HttpResponse:
    record = SignInSession.objects.filter(user=request.user, pk=pk).first()
    if record is None:
        raise Http404("no such session of yours")
    if record.session_key == request.session.session_key:
        logout(request)
        return redirect("login")
    end_sessions([record])
    messages.success(request, "that session is signed out")
    return redirect("account")


@open_to_pending
@login_required
@require_POST
def sessions_end_others(request: HttpRequest) -> HttpResponse:
    others = list(SignInSession.objects.filter(user=request.user)
                  .exclude(session_key=request.session.session_key))
    messages.success(request, f"{end_sessions(others)} other session(s) signed out")
    return redirect("account")


@open_to_pending
@login_required
@require_POST
def totp_start(request: HttpRequest) -> HttpResponse:
    if TotpDevice.objects.filter(user=request.user, confirmed=True).exists():
        messages.error(request, "a second factor is already on: disable it first")
    else:
        device_start(request.user)
    return redirect("account")
