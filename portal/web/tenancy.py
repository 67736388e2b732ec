"""The current tenant of a browser session: one of the user's memberships, kept in the session.

Lists on the pages show the current tenant's objects; single objects are still reached through
`restrict(user)` (the one choke point), so a link into another of the user's tenants works and
another tenant's object stays a 404.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from accounts.models import Tenant
from replication.models import Stream

SESSION_KEY = "streamgate_tenant"


def user_tenants(request: HttpRequest) -> list[Tenant]:
    # Memberships, not restrict(): staff see every tenant's rows, but switch among their own.
    # Kept on the request: a page asks several times (lists, counts, the switcher).
    cached = getattr(request, "_streamgate_tenants", None)
    if cached is None:
        cached = list(Tenant.objects.filter(memberships__user=request.user).order_by("name"))
        request._streamgate_tenants = cached  # type: ignore[attr-defined]
    return cached


def current_tenant(request: HttpRequest, tenants: list[Tenant] | None = None) -> Tenant | None:
    tenants = user_tenants(request) if tenants is None else tenants
    chosen = request.session.get(SESSION_KEY)
    for tenant in tenants:
        if tenant.pk == chosen:
            return tenant
    return tenants[0] if tenants else None


def tenant_stream_paths(request: HttpRequest) -> list[str]:
    """The current tenant's streams the user may see, by path: what a path picker offers."""
    return list(Stream.objects.restrict(request.user).filter(tenant=current_tenant(request))
                .order_by("path").values_list("path", flat=True))


def render_page(
    request: HttpRequest, template: str, context: dict[str, Any] | None = None, status: int = 200
) -> HttpResponse:
    """render() plus what base.html needs for the tenant switcher."""
    tenants = user_tenants(request)
    page = {"tenants": tenants, "current_tenant": current_tenant(request, tenants)}
    page.update(context or {})
    return render(request, template, page, status=status)


View = Callable[..., HttpResponse]


def open_to_pending(view: View) -> View:
    """Mark a page that a member of a tenant waiting for approval may still use (their account,
    the tenant switcher, another tenant's invitation); every other page shows them the
    waiting page (portal/web/pending.py)."""
    view.open_to_pending = True  # type: ignore[attr-defined]
    return view


DetailView = Callable[[HttpRequest, int], HttpResponse]


def page_and_fragment(page: str, fragment: str,
                      context: Callable[[HttpRequest, int], dict[str, Any]]
                      ) -> tuple[DetailView, DetailView]:
    """The views of an object's page and of its live part (the fragment static/js/live.js
    re-fetches when the object changes), both from one context function."""

    @login_required
    def page_view(request: HttpRequest, pk: int) -> HttpResponse:
        return render_page(request, page, context(request, pk))

    @login_required
    def fragment_view(request: HttpRequest, pk: int) -> HttpResponse:
        return render(request, fragment, context(request, pk))

    return page_view, fragment_view
