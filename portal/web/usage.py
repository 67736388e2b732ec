"""Usage page: the current tenant's plan with how much of each limit it uses (bars), and per
day and per stream the messages and bytes produced, consumed and replicated, and bytes stored
(operations/usage.py: the daily rollup plus today's live counters); the same rows as CSV.
Only the current tenant's figures: it is one of the user's own memberships (tenancy.py), so
another tenant's usage is never shown."""

from __future__ import annotations

import csv

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse

from operations.usage import COLUMNS, UsageRow, usage_keys, usage_rows, with_live
from portal.web.paging import paged
from portal.web.tenancy import current_tenant, render_page
from replication.plans import plan_use

DAYS = (7, 30, 90)


def _days(request: HttpRequest) -> int:
    """The period asked for (?days=7|30|90); anything else is the default 30."""
    asked = request.GET.get("days", "")
    return int(asked) if asked.isdigit() and int(asked) in DAYS else 30


def _rows(request: HttpRequest, days: int) -> list[UsageRow]:
    tenant = current_tenant(request)
    return [] if tenant is None else usage_rows(tenant=tenant, days=days)


@login_required
def usage(request: HttpRequest) -> HttpResponse:
    tenant, days = current_tenant(request), _days(request)
    return render_page(request, "web/usage.html", {
        "plan": tenant.plan if tenant else None,
        "uses": plan_use(tenant) if tenant else [],
        **_page(request, days), "days": days, "choices": DAYS})


def _page(request: HttpRequest, days: int) -> dict[str, object]:
    """One page of rows: cut first (order is day then path, never a live figure), then today's
    live figures read for the page's streams only (issue 34)."""
    tenant = current_tenant(request)
    if tenant is None:
        shown = paged(request, [])
        return {"rows": shown["page"], "pager": shown["pager"]}
    shown = paged(request, usage_keys(tenant=tenant, days=days))
    return {"rows": with_live(tenant, list(shown["page"])), "pager": shown["pager"]}


@login_required
def usage_csv(request: HttpRequest) -> HttpResponse:
    tenant, days = current_tenant(request), _days(request)
    name = tenant.name if tenant else "none"
    response = HttpResponse(content_type="text/csv; charset=utf-8", headers={
        "Content-Disposition": f'attachment; filename="usage-{name}-{days}d.csv"'})
    out = csv.writer(response)
    out.writerow(COLUMNS)
    for row in _rows(request, days):
        out.writerow(row.cells())
    return response
