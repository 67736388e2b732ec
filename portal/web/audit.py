"""Pages of the operations app, served with the web pages: the audit trail (changes to the
objects of the user's tenants; operators: all), newest first, and the overview's alarm
fragment, both through the tenant-scoping choke point."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from operations.audit import hide_aces
from operations.models import AuditAction, AuditEvent, Interface
from portal.web.tenancy import render_page

PAGE_SIZE = 50


@login_required
def audit_log(request: HttpRequest) -> HttpResponse:
    events = AuditEvent.objects.restrict(request.user).order_by("-at", "-pk")
    chosen = {name: request.GET.get(name, "") for name in ("action", "interface", "object_type")}
    valid = {"action": AuditAction.values, "interface": Interface.values,
             "object_type": list(AuditEvent.objects.restrict(request.user).order_by()
                                 .values_list("object_type", flat=True).distinct())}
    for name, value in chosen.items():
        if value in valid[name]:
            events = events.filter(**{name: value})
    page = Paginator(events, PAGE_SIZE).get_page(request.GET.get("page"))
    page.object_list = hide_aces(page.object_list, request.user)
    filters = [(name, valid[name], chosen[name]) for name in chosen]
    return render_page(request, "web/audit.html", {"page": page, "filters": filters})


@login_required
def alarms_fragment(request: HttpRequest) -> HttpResponse:
    """The overview's alarms alone, re-fetched by static/js/live.js on alarm events."""
    return render(request, "web/_alarms.html")
