from typing import Any

from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.db.models import Count, Prefetch, Q
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from portal.accounts.throttle import login_blocked
from portal.web.tenancy import SESSION_KEY, current_tenant, render_page, user_tenants
from replication.models import Cluster, Gateway, ReplicaLink, Stream


def _links(request: HttpRequest) -> list[tuple[ReplicaLink, str]]:
    links = ReplicaLink.objects.restrict(request.user)
    tenant = current_tenant(request)
    if tenant is not None:
        links = links.filter(Q(source__tenant=tenant) | Q(replica__tenant=tenant))
    links = links.select_related("source", "replica").with_agreement()
    return [(link, link.replica_state()) for link in links]


def _alarms(links: list[tuple[ReplicaLink, str]]) -> list[str]:
    """What needs a person: gateways that stopped heartbeating, replica links with an error."""
    alarms = [f"gateway {gw} is down: no heartbeat since {gw.last_heartbeat:%Y-%m-%d %H:%M:%S} UTC"
              for gw in Gateway.objects.select_related("cluster")
              if gw.status == Gateway.Status.DOWN]
    alarms += [f"{link}: {link.last_error}" for link, _state in links if link.last_error]
    return alarms


def _live_context(request: HttpRequest) -> dict[str, object]:
    links = _links(request)
    return {"links": links, "alarms": _alarms(links)}


@login_required
def overview(request: HttpRequest) -> HttpResponse:
    streams = Stream.objects.restrict(request.user).select_related("cluster", "tenant")
    tenant = current_tenant(request)
    if tenant is not None:
        streams = streams.filter(tenant=tenant)
    # Clusters are shared infrastructure, but the stream counts are of visible streams only.
    clusters = Cluster.objects.prefetch_related(
        Prefetch("gateways", queryset=Gateway.objects.order_by("name"))
    ).annotate(num_streams=Count("streams", filter=Q(streams__in=streams.values("pk"))))
    context = {
        "clusters": clusters,
        "streams": streams.annotate(num_topics=Count("topics")),
        **_live_context(request),
    }
    return render_page(request, "web/overview.html", context)


@login_required
def overview_links(request: HttpRequest) -> HttpResponse:
    """The overview's replication table alone, re-fetched by static/js/live.js on events."""
    return render(request, "web/_overview_links.html", _live_context(request))


@login_required
@require_POST
def switch_tenant(request: HttpRequest) -> HttpResponse:
    wanted = request.POST.get("tenant", "")
    tenant = next((t for t in user_tenants(request) if str(t.pk) == wanted), None)
    if tenant is None:
        raise Http404("no such tenant among yours")
    request.session[SESSION_KEY] = tenant.pk
    return redirect("overview")


class SignInView(auth_views.LoginView):
    """Django's sign-in page, saying so when the sign-in rate limit refuses the user."""

    def form_invalid(self, form: Any) -> HttpResponse:
        blocked = login_blocked(form.data.get("username"))
        return self.render_to_response(self.get_context_data(form=form, blocked=blocked),
                                       status=429 if blocked else 200)
