"""Kafka page: the current tenant's default streams (where plain Kafka topic names live) and a
form that sets one, through the same service as the CLI and the API."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from portal.web.forms import field_errors
from portal.web.tenancy import current_tenant, render_page
from replication.errors import StreamgateError
from replication.listeners import live_listeners
from replication.models import Cluster, DefaultStream
from replication.services.defaultstreams import default_stream_set

FIELDS = ("cluster", "path", "scope")


@login_required
def kafka_settings(request: HttpRequest) -> HttpResponse:
    return _page(request, {}, {})


def _page(request: HttpRequest, form: dict[str, str], errors: dict[str, str]) -> HttpResponse:
    """The page; after a refusal, with the error beside its field and what was typed."""
    tenant = current_tenant(request)
    settings = DefaultStream.objects.restrict(request.user).filter(tenant=tenant).select_related(
        "cluster", "user")
    rows = [s for s in settings if s.user_id in (None, request.user.pk)]
    clusters = list(Cluster.objects.all())
    return render_page(request, "web/kafka.html", {
        "default_streams": rows, "clusters": clusters, "listeners": _listeners(clusters),
        "form": form, "errors": errors}, status=400 if errors else 200)


def _listeners(clusters: list[Cluster]) -> list[tuple[str, str]]:
    """(what it serves, bootstrap address) of each live Kafka listener."""
    try:
        live = live_listeners(["*", *(c.name for c in clusters)])
    except Exception:  # Redis unreachable: the page still shows the settings
        return []
    return [("every cluster" if scope == "*" else scope, f"{node.host}:{node.port}")
            for scope, nodes in live.items() for node in nodes]


@login_required
@require_POST
def default_stream_save(request: HttpRequest) -> HttpResponse:
    tenant = current_tenant(request)
    try:
        default_stream_set(actor=request.user, cluster=request.POST.get("cluster", ""),
                           path=request.POST.get("path", ""),
                           tenant=tenant.name if tenant else None,
                           personal=request.POST.get("scope") == "user")
    except StreamgateError as err:
        return _page(request, {k: request.POST.get(k, "") for k in FIELDS},
                     field_errors(err, FIELDS))
    messages.success(request, "default stream set")
    return redirect("kafka")
