"""Account: the Tokens page. API tokens made (named, scoped, with an optional expiry), listed
and revoked in the browser through the same service as the API's token login and
`createtenantuser` (replication/services/tokens.py). A new token's secret is in the answer
to the POST that made it, once: it is never kept, so never shown again."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from accounts.models import TokenScope
from portal.web.forms import field_errors
from portal.web.tenancy import render_page
from replication.errors import StreamgateError
from replication.services.tokens import (
    EXPIRY_DAYS,
    expiry_from,
    token_create,
    token_revoke,
    tokens_of,
)

FIELDS = ("name", "scope", "expiry")


def _page(request: HttpRequest, *, form: dict[str, str] | None = None,
          errors: dict[str, str] | None = None, secret: str = "",
          made: str = "") -> HttpResponse:
    response = render_page(request, "web/tokens.html", {
        "tokens": tokens_of(actor=request.user), "scopes": TokenScope.choices,
        "expiries": EXPIRY_DAYS, "form": form or {"expires": "90", "scope": "read"},
        "errors": errors or {}, "secret": secret, "made": made},
        status=400 if errors else 200)
    return response


@login_required
@never_cache
def token_list(request: HttpRequest) -> HttpResponse:
    return _page(request)


@login_required
@never_cache
@require_POST
def token_make(request: HttpRequest) -> HttpResponse:
    form = {key: request.POST.get(key, "") for key in ("name", "scope", "expires", "expires_on")}
    try:
        expiry = expiry_from(form["expires"], form["expires_on"])
        _, secret = token_create(actor=request.user, name=form["name"], scope=form["scope"],
                                 expiry=expiry)
    except StreamgateError as err:
        return _page(request, form=form, errors=field_errors(err, FIELDS))
    return _page(request, secret=secret, made=form["name"].strip())


def _row(request: HttpRequest, token_id: str):  # type: ignore[no-untyped-def]
    row = next((t for t in tokens_of(actor=request.user) if t.id == token_id), None)
    if row is None:
        raise Http404("no such token of yours")
    return row


@login_required
@require_http_methods(["GET", "POST"])
def token_revoke_confirm(request: HttpRequest, token_id: str) -> HttpResponse:
    """GET: what revoking does, and the button; POST: revoke it."""
    row = _row(request, token_id)
    if request.method != "POST":
        return render_page(request, "web/token_revoke.html", {"token": row})
    try:
        token_revoke(actor=request.user, token_id=token_id)
    except StreamgateError as err:
        raise Http404(str(err)) from err
    messages.success(request, f"token {row.name or row.id} revoked")
    return redirect("tokens")


