"""Kafka page: the current tenant's default streams (where plain Kafka topic names live) and a
form that sets one, through the same service as the CLI and the API."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from portal.web.tenancy import current_tenant, render_page
from replication.errors import StreamgateError
from replication.models import Cluster, DefaultStream
from replication.services.defaultstreams import default_stream_set


@login_required
def kafka_settings(request: HttpRequest) -> HttpResponse:
    tenant = current_tenant(request)
    settings = DefaultStream.objects.restrict(request.user).filter(tenant=tenant).select_related(
        "cluster", "user")
    rows = [s for s in settings if s.user_id in (None, request.user.pk)]
    return render_page(request, "web/kafka.html", {
        "default_streams": rows, "clusters": Cluster.objects.all()})


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
        messages.error(request, err.desc)
    else:
        messages.success(request, "default stream set")
    return redirect("kafka")
