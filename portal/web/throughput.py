"""Throughput charts' data (static/js/throughput.js): a stream's, and each cluster's for the
current tenant, over the last hour (operations/throughput.py)."""

from __future__ import annotations

from collections import defaultdict

import orjson
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from operations.throughput import KEEP_SECONDS, cluster_throughput, stream_throughput
from portal.web.streams import visible_stream
from portal.web.tenancy import current_tenant
from replication.models import Cluster, Stream

FIELDS = ["t", "in_messages", "in_bytes", "replicated_messages", "replicated_bytes"]


def _json(charts: list[dict]) -> HttpResponse:
    return HttpResponse(orjson.dumps({"fields": FIELDS, "keep_seconds": KEEP_SECONDS,
                                      "charts": charts}), content_type="application/json")


@login_required
@require_GET
def stream_rates(request: HttpRequest, pk: int) -> HttpResponse:
    stream = visible_stream(request, pk)
    points = stream_throughput([stream.pk])[stream.pk]
    return _json([{"title": stream.path, "points": points}])


@login_required
@require_GET
def cluster_rates(request: HttpRequest) -> HttpResponse:
    """Per cluster with streams of the current tenant: produced into those streams, and
    replicated: out of those streams for a tenant's user, applied by the cluster's gateways
    (every tenant's traffic) for an operator."""
    streams = Stream.objects.restrict(request.user)
    tenant = current_tenant(request)
    if tenant is not None:
        streams = streams.filter(tenant=tenant)
    by_cluster: dict[int, list[int]] = defaultdict(list)
    for pk, cluster in streams.values_list("pk", "cluster_id"):
        by_cluster[cluster].append(pk)
    names = dict(Cluster.objects.filter(pk__in=by_cluster).values_list("pk", "name"))
    gateways = request.user.is_staff
    return _json([{"title": names[c], "cluster": c,
                   "points": cluster_throughput(c, ids, gateways=gateways)}
                  for c, ids in sorted(by_cluster.items(), key=lambda kv: names[kv[0]])])
