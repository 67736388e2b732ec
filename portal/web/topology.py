"""The topology page: clusters as regions, streams as nodes, replica links as arrows coloured
by health (static/js/topology.js draws it with cytoscape.js).

The graph is the current tenant's, through the same choke point as every list
(`restrict(user)` plus the tenant filter of the overview): links with an end in the tenant,
streams of the tenant and the other ends of those links. Rows are plain tuples, built from
`values()` queries: a tenant of 1,000 streams and 2,000 links renders in a few tens of ms.
"""

from __future__ import annotations

from typing import Any

import orjson
from django.contrib.auth.decorators import login_required
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.utils.safestring import SafeString, mark_safe
from django.views.decorators.http import require_GET

from portal.web import health as h
from portal.web.templatetags.human import lag_text
from portal.web.tenancy import current_tenant, render_page
from replication.lag_history import KEEP_SECONDS, SAMPLE_SECONDS, lag_history
from replication.models import Cluster, ReplicaLink, Stream


def _link_rows(request: HttpRequest) -> list[dict[str, Any]]:
    links = ReplicaLink.objects.restrict(request.user).with_agreement()
    tenant = current_tenant(request)
    if tenant is not None:
        links = links.filter(Q(source__tenant=tenant) | Q(replica__tenant=tenant))
    return list(links.values(*h.LINK_VALUES).order_by())


def _stream_rows(request: HttpRequest, ends: set[int]) -> list[tuple[int, str, int, bool]]:
    """(id, path, cluster id, of this tenant) for the tenant's streams and the link ends."""
    tenant = current_tenant(request)
    own = Stream.objects.restrict(request.user)
    own = own.filter(tenant=tenant) if tenant is not None else own
    rows = {pk: (pk, path, cluster, True)
            for pk, path, cluster in own.values_list("pk", "path", "cluster_id").order_by()}
    # The other end of a visible link is shown by path (as the overview's tables do).
    others = ends - rows.keys()
    if others:
        for pk, path, cluster in (Stream.objects.filter(pk__in=others)
                                  .values_list("pk", "path", "cluster_id").order_by()):
            rows[pk] = (pk, path, cluster, False)
    return sorted(rows.values(), key=lambda row: row[1])


def topology_data(request: HttpRequest) -> dict[str, Any]:
    links = _link_rows(request)
    h.rows_health(links)
    edges = [[row["pk"], row["source_id"], row["replica_id"], row["health"].css,
              lag_text(row["point"], row["health"])] for row in links]
    streams = _stream_rows(request, {r["source_id"] for r in links} |
                           {r["replica_id"] for r in links})
    used = {row[2] for row in streams}
    clusters = [[pk, name] for pk, name in Cluster.objects.filter(pk__in=used)
                .values_list("pk", "name").order_by("name")]
    return {"clusters": clusters, "streams": [list(row) for row in streams], "links": edges,
            "healths": [[x.css, x.label, x.rank] for x in h.ALL]}


def _script_json(data: dict[str, Any]) -> SafeString:
    # Inside <script type="application/json">: escape what could end the element.
    text = orjson.dumps(data).decode()
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return mark_safe(text)  # escaped just above


@login_required
@require_GET
def topology(request: HttpRequest) -> HttpResponse:
    data = topology_data(request)
    return render_page(request, "web/topology.html", {
        "data_json": _script_json(data), "clusters": data["clusters"],
        "healths": h.ALL, "stream_count": len(data["streams"]), "link_count": len(data["links"]),
    })


@login_required
@require_GET
def topology_json(request: HttpRequest) -> HttpResponse:
    """The same graph, re-fetched by the page when a link is added, removed, paused..."""
    return HttpResponse(orjson.dumps(topology_data(request)), content_type="application/json")


@login_required
@require_GET
def link_lag(request: HttpRequest, pk: int) -> HttpResponse:
    """One link's lag history, in the stream lag view's shape (static/js/lagchart.js)."""
    link = get_object_or_404(ReplicaLink.objects.restrict(request.user)
                             .select_related("source", "replica"), pk=pk)
    return HttpResponse(orjson.dumps({
        "stream": link.source_id, "sample_seconds": SAMPLE_SECONDS, "keep_seconds": KEEP_SECONDS,
        "fields": ["t", "messages_pending", "bytes_pending", "time_lag_ms", "stalled"],
        "links": [{"link": link.pk, "replica": link.replica.path,
                   "source": link.source.path, "points": lag_history([link.pk])[link.pk]}],
    }), content_type="application/json")
