"""Account page: the Kafka sign-in section (which SCRAM mechanisms have a password, and forms
that set or delete one, through the same service as the command line and the listener's
AlterUserScramCredentials: replication/services/credentials.py), a link to the API tokens
(portal/web/tokens.py), browser sessions and the second factor (portal/web/security.py);
confirming and disabling the second factor answer with this page."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from accounts.scram import DEFAULT_ITERATIONS
from accounts.secondfactor import device_confirm, device_disable
from portal.web.forms import field_errors
from portal.web.security import security_context
from portal.web.tenancy import open_to_pending, render_page
from replication.errors import StreamgateError
from replication.services.credentials import (
    MECHANISMS,
    scram_credential_delete,
    scram_credential_set,
    scram_credentials,
)
from replication.services.quotas import tenant_quotas

FIELDS = ("mechanism", "password")
WRONG_CODE = ("that code is wrong or already used: type the 6 digits the app shows now "
              "(or an unused recovery code)")


@open_to_pending
@login_required
def account(request: HttpRequest) -> HttpResponse:
    return _page(request, {}, {})


def _page(request: HttpRequest, form: dict[str, str], errors: dict[str, str],
          extra: dict[str, Any] | None = None, status: int = 200) -> HttpResponse:
    """The page; after a refusal, with the error beside its field (never the password)."""
    found = scram_credentials(actor=request.user, usernames=[request.user.get_username()])
    held = {c.mechanism: c for c in found.get(request.user.get_username(), [])}
    rows = [(mechanism, held.get(mechanism)) for mechanism in MECHANISMS]
    return render_page(request, "web/account.html", {
        "scram": rows, "mechanisms": MECHANISMS, "iterations": DEFAULT_ITERATIONS,
        "quotas": tenant_quotas(actor=request.user), "form": form, "errors": errors,
        "memberships": request.user.memberships.select_related("tenant").order_by(
            "tenant__name"),
        **security_context(request), **(extra or {})},
        status=400 if errors else status)


@open_to_pending
@login_required
@require_POST
def scram_set(request: HttpRequest) -> HttpResponse:
    mechanism = request.POST.get("mechanism", "")
    password = request.POST.get("password", "")
    try:
        if password != request.POST.get("confirm", ""):
            return _page(request, {"mechanism": mechanism},
                         {"password": "the two passwords differ: type the same one twice"})
        scram_credential_set(actor=request.user, mechanism=mechanism, password=password)
    except StreamgateError as err:
        return _page(request, {"mechanism": mechanism}, field_errors(err, FIELDS))
    messages.success(request, f"{mechanism} password set")
    return redirect("account")


@open_to_pending
@login_required
@require_POST
def scram_delete(request: HttpRequest) -> HttpResponse:
    mechanism = request.POST.get("mechanism", "")
    try:
        scram_credential_delete(actor=request.user, mechanism=mechanism)
    except StreamgateError as err:
        return _page(request, {}, field_errors(err, FIELDS))
    messages.success(request, f"{mechanism} password deleted")
    return redirect("account")


@open_to_pending
@login_required
@never_cache
@require_POST
def totp_confirm(request: HttpRequest) -> HttpResponse:
    codes = device_confirm(request.user, request.POST.get("code", ""))
    if codes is None:
        return _page(request, {}, {}, {"totp_error": WRONG_CODE}, status=400)
    # In this answer only: kept hashed, they cannot be shown again.
    return _page(request, {}, {}, {"recovery_codes": codes})


@open_to_pending
@login_required
@require_POST
def totp_disable(request: HttpRequest) -> HttpResponse:
    if not device_disable(request.user, request.POST.get("code", "")):
        return _page(request, {}, {}, {"totp_error": WRONG_CODE}, status=400)
    messages.success(request, "the second factor is off: sign-in asks for the password only")
    return redirect("account")
