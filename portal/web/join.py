"""An invitation's link: whoever holds it joins the tenant with the invitation's role, signed
in already, after signing in, or with a new account made here. The token in the address is the
credential, so this page looks nothing up by the visitor's tenants; the link works once."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.models import AnonymousUser
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from accounts.models import Invitation, Membership
from accounts.throttle import attempt_allowed
from portal.web.forms import FORM, field_errors
from portal.web.signup import TOO_MANY, act_as, passwords_differ
from portal.web.tenancy import SESSION_KEY, open_to_pending, render_page
from replication.errors import StreamgateError
from replication.services.members import invitation_accept, invitation_open, invitation_signup

ACCOUNT_FIELDS = ("username", "email", "password")


def _render(request: HttpRequest, context: dict[str, Any], status: int = 200) -> HttpResponse:
    if request.user.is_authenticated:
        return render_page(request, "web/join.html", context, status=status)
    return render(request, "web/join.html", context, status=status)


def _joined(request: HttpRequest, membership: Membership) -> HttpResponse:
    request.session[SESSION_KEY] = membership.tenant_id
    messages.success(request, f"You joined {membership.tenant.name} as {membership.role}")
    return redirect("overview")


def _new_account(request: HttpRequest, token: str, invitation: Invitation) -> HttpResponse:
    form = {name: request.POST.get(name, "").strip() for name in ("username", "email")}
    context = {"invitation": invitation, "token": token, "form": form}
    if not attempt_allowed("signup", request):
        return _render(request, {**context, "errors": {FORM: TOO_MANY}}, status=429)
    errors = passwords_differ(request)
    if errors:
        return _render(request, {**context, "errors": errors}, status=400)
    try:
        membership = invitation_signup(token=token, **form,
                                       password=request.POST.get("password", ""),
                                       on_user_created=act_as(request))
    except StreamgateError as err:
        request.user = AnonymousUser()  # the newcomer the hook set was rolled back
        return _render(request, {**context, "errors": field_errors(err, ACCOUNT_FIELDS)},
                       status=err.http_status)
    login(request, membership.user, backend=settings.AUTHENTICATION_BACKENDS[0])
    return _joined(request, membership)


@open_to_pending
def invitation_accept_view(request: HttpRequest, token: str) -> HttpResponse:
    try:
        invitation = invitation_open(token=token)
    except StreamgateError as err:
        return _render(request, {"refused": err.desc}, status=err.http_status)
    if request.method != "POST":
        return _render(request, {"invitation": invitation, "token": token,
                                 "form": {"email": invitation.email}})
    if not request.user.is_authenticated:
        return _new_account(request, token, invitation)
    try:
        membership = invitation_accept(actor=request.user, token=token)
    except StreamgateError as err:
        return _render(request, {"invitation": invitation, "token": token,
                                 "errors": {FORM: err.desc}}, status=err.http_status)
    return _joined(request, membership)
