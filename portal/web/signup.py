"""Sign-up (a new tenant and its first administrator, as STREAMGATE_SIGNUP allows) and the
password reset, Django's own views with the portal's templates. Both are limited per client
address (accounts/throttle.py), besides CSRF on every form."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth import views as auth_views
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from accounts.throttle import attempt_allowed
from portal.web.forms import field_errors
from portal.web.tenancy import SESSION_KEY, open_to_pending
from replication.errors import StreamgateError
from replication.services.members import tenant_signup

SIGNUP_FIELDS = ("tenant", "username", "email", "password")
TOO_MANY = ("too many attempts from your address: wait an hour and try again, or ask an "
            "operator")


def passwords_differ(request: HttpRequest) -> dict[str, str]:
    if request.POST.get("password", "") != request.POST.get("confirm", ""):
        return {"password": "the two passwords differ: type the same one twice"}
    return {}


def act_as(request: HttpRequest) -> Callable[[AbstractBaseUser], None]:
    """The hook a service calls with a newly created user: from then on the request acts as
    that user, so the audit trail names the newcomer, not an anonymous visitor."""

    def hook(user: AbstractBaseUser) -> None:
        request.user = user

    return hook


def _signup_page(request: HttpRequest, form: dict[str, str], errors: dict[str, str],
                 status: int = 200) -> HttpResponse:
    return render(request, "registration/signup.html",
                  {"form": form, "errors": errors, "approval": settings.SIGNUP == "approval"},
                  status=status)


@open_to_pending
def signup(request: HttpRequest) -> HttpResponse:
    if settings.SIGNUP == "off":
        raise Http404("sign-up is off: an operator creates tenants here")
    if request.user.is_authenticated:
        return redirect("overview")
    if request.method != "POST":
        return _signup_page(request, {}, {})
    form = {name: request.POST.get(name, "").strip() for name in ("tenant", "username", "email")}
    if not attempt_allowed("signup", request):
        return _signup_page(request, form, {"form": TOO_MANY}, status=429)
    errors = passwords_differ(request)
    if errors:
        return _signup_page(request, form, errors, status=400)
    try:
        membership = tenant_signup(**form, password=request.POST.get("password", ""),
                                   approved=settings.SIGNUP == "open",
                                   on_user_created=act_as(request))
    except StreamgateError as err:
        request.user = AnonymousUser()  # the newcomer the hook set was rolled back
        return _signup_page(request, form, field_errors(err, SIGNUP_FIELDS),
                            status=err.http_status)
    login(request, membership.user, backend=settings.AUTHENTICATION_BACKENDS[0])
    request.session[SESSION_KEY] = membership.tenant_id
    waits = "" if membership.tenant.approved else ": it waits for an operator's approval"
    messages.success(request, f"Tenant {membership.tenant.name} created, with you as its "
                              f"administrator{waits}")
    return redirect("overview")


class PasswordResetView(auth_views.PasswordResetView):
    """Django's: a mail with a one-time link to every active account with that address, and
    the same answer whether there is one or not. Limited per client address, as sign-up."""

    email_template_name = "registration/password_reset_email.txt"
    subject_template_name = "registration/password_reset_subject.txt"

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not attempt_allowed("password-reset", request):
            form = self.get_form()
            return self.render_to_response(self.get_context_data(form=form, blocked=TOO_MANY),
                                           status=429)
        return super().post(request, *args, **kwargs)
