from collections import Counter
from typing import Any

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Count, Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.views.decorators.http import require_POST

from accounts.secondfactor import has_second_factor
from accounts.throttle import login_blocked
from portal.web.attention import attention, needing_attention
from portal.web.health import LINK_VALUES, Health, rows_health, streams_health
from portal.web.signin import second_factor_pending
from portal.web.tenancy import (
    SESSION_KEY,
    current_tenant,
    open_to_pending,
    render_page,
    user_tenants,
)
from replication.lag_history import gateway_rates
from replication.models import Cluster, Gateway, ReplicaLink, Stream

STREAMS_PER_PAGE = 50
LINKS_SHOWN = 50


def _link_rows(request: HttpRequest) -> list[dict[str, Any]]:
    """Every link of the tenant as a values() row with its health and last sample, the worst
    first: a tenant may have thousands, and model instances would cost more than the page."""
    links = ReplicaLink.objects.restrict(request.user)
    tenant = current_tenant(request)
    if tenant is not None:
        links = links.filter(Q(source__tenant=tenant) | Q(replica__tenant=tenant))
    rows = list(links.with_agreement().values(*LINK_VALUES, "source__path", "replica__path")
                .order_by())
    rows_health(rows)
    rows.sort(key=lambda r: (-r["health"].rank, r["source__path"], r["replica__path"]))
    return rows


def _instances(rows: list[dict[str, Any]]) -> dict[int, ReplicaLink]:
    """The few links a page shows in full (its table, its to-do list), in one query."""
    found = (ReplicaLink.objects.filter(pk__in={r["pk"] for r in rows})
             .select_related("source", "replica").with_agreement())
    return {link.pk: link for link in found}


def _gateways(request: HttpRequest) -> list[Gateway]:
    """Every gateway with its health; its rate (every tenant's traffic) for operators only."""
    gateways = list(Gateway.objects.select_related("cluster"))
    rates = gateway_rates(gw.pk for gw in gateways) if request.user.is_staff else {}
    for gw in gateways:
        gw.rate = rates.get(gw.pk)  # type: ignore[attr-defined]
    return gateways


def _live_context(request: HttpRequest) -> dict[str, Any]:
    rows, gateways = _link_rows(request), _gateways(request)
    # The worst first, and only so many: a stream's own page lists all its replicas.
    shown, needy = rows[:LINKS_SHOWN], needing_attention(rows)
    full = _instances([*shown, *needy])
    table = [(full[r["pk"]], full[r["pk"]].replica_state(), r["health"], r["point"])
             for r in shown if r["pk"] in full]
    return {
        "links": table, "links_hidden": max(0, len(rows) - LINKS_SHOWN),
        **attention(rows, [(full[r["pk"]], r["health"]) for r in needy if r["pk"] in full],
                    gateways, request.user),
        "gateways": gateways,
        "stream_health": streams_health(rows),
    }


def _visible_streams(request: HttpRequest) -> QuerySet[Stream]:
    streams = Stream.objects.restrict(request.user)
    tenant = current_tenant(request)
    return streams.filter(tenant=tenant) if tenant is not None else streams


def _stream_page(request: HttpRequest, stream_health: dict[int, Health]) -> dict[str, Any]:
    """The streams table: those that need attention first (worst health), then by path, a
    page at a time, and a count per health for the whole list. Rows are plain values: a
    tenant may hold thousands of streams, and model instances would cost more than the page."""
    rows = list(_visible_streams(request).values("pk", "path", "ttl", "cluster_id",
                                                 "tenant__name")
                .annotate(num_topics=Count("topics")).order_by())
    summary: Counter[str] = Counter()
    for row in rows:
        row["health"] = stream_health.get(row["pk"])
        summary[row["health"].label if row["health"] else "Not replicated"] += 1
    rows.sort(key=lambda r: (-(r["health"].rank if r["health"] else -1), r["path"]))
    page = Paginator(rows, STREAMS_PER_PAGE).get_page(request.GET.get("page"))
    return {"stream_rows": page, "stream_count": len(rows),
            "health_summary": sorted(summary.items(), key=lambda kv: -kv[1]),
            "streams_per_cluster": Counter(row["cluster_id"] for row in rows)}


def _overview_context(request: HttpRequest) -> dict[str, Any]:
    live = _live_context(request)
    streams = _stream_page(request, live["stream_health"])
    # Clusters are shared infrastructure, but the stream counts are of visible streams only.
    clusters = list(Cluster.objects.all())
    by_cluster: dict[int, list[Gateway]] = {}
    for gw in live["gateways"]:
        by_cluster.setdefault(gw.cluster_id, []).append(gw)
    for cluster in clusters:
        cluster.num_streams = streams["streams_per_cluster"][cluster.pk]  # type: ignore[attr-defined]
        cluster.gateway_list = sorted(by_cluster.get(cluster.pk, []),  # type: ignore[attr-defined]
                                      key=lambda gw: gw.name)
    return {"clusters": clusters, **streams, **live}


@login_required
def overview(request: HttpRequest) -> HttpResponse:
    return render_page(request, "web/overview.html", _overview_context(request))


@login_required
def overview_links(request: HttpRequest) -> HttpResponse:
    """The overview's replication table, re-fetched by static/js/live.js on events, with the
    counts and to-do list swapped in out of band (htmx): one fetch, one context."""
    context = _live_context(request)
    table = render_to_string("web/_overview_links.html", context, request)
    status = render_to_string("web/_overview_status.html", {**context, "oob": True}, request)
    return HttpResponse(table + status)


@login_required
def overview_live(request: HttpRequest) -> HttpResponse:
    """Gateways and stream health, re-fetched by static/js/live.js (at most every few seconds
    on lag events)."""
    return render(request, "web/_overview_live.html", _overview_context(request))


@open_to_pending
@login_required
@require_POST
def switch_tenant(request: HttpRequest) -> HttpResponse:
    wanted = request.POST.get("tenant", "")
    tenant = next((t for t in user_tenants(request) if str(t.pk) == wanted), None)
    if tenant is None:
        raise Http404("no such tenant among yours")
    request.session[SESSION_KEY] = tenant.pk
    return redirect("overview")


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """The portal's 404: where to go instead, in the portal's frame."""
    context = {"request_path": request.path}
    if not request.user.is_authenticated:
        return render(request, "404.html", context, status=404)
    return render_page(request, "404.html", context, status=404)


class SignInView(auth_views.LoginView):
    """Django's sign-in page, saying so when the sign-in rate limit refuses the user, with
    links to the password reset and, unless STREAMGATE_SIGNUP is off, to sign-up; a user with
    a second factor goes on to the code step (portal/web/signin.py)."""

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        return {**super().get_context_data(**kwargs), "signup": settings.SIGNUP != "off"}

    def form_valid(self, form: Any) -> HttpResponse:
        user = form.get_user()
        if has_second_factor(user):
            return second_factor_pending(self.request, user, self.get_success_url())
        return super().form_valid(form)

    def form_invalid(self, form: Any) -> HttpResponse:
        blocked = login_blocked(form.data.get("username"), self.request)
        return self.render_to_response(self.get_context_data(form=form, blocked=blocked),
                                       status=429 if blocked else 200)
