"""The clusters' pages: each cluster's required copies and its message store's replicated group
(members, roles, replication lag, timeline and last failover) with the copies alarm, as
`streamgate cluster info` shows them (operations.storegroups). Clusters belong to no tenant:
any signed-in user reads them, as the CLI's `cluster list` and `cluster info`."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse

from operations.storegroups import cluster_group
from portal.web.tenancy import render_page
from replication.models import Cluster


def _group(cluster: Cluster) -> dict[str, Any]:
    info = cluster_group(cluster)
    failover = info["lastFailover"]
    return {**info, "lastFailover": datetime.fromisoformat(failover) if failover else None}


@login_required
def cluster_list(request: HttpRequest) -> HttpResponse:
    groups = [_group(c) for c in Cluster.objects.order_by("name")]
    return render_page(request, "web/clusters.html", {"groups": groups})


@login_required
def cluster_detail(request: HttpRequest, name: str) -> HttpResponse:
    cluster = Cluster.objects.filter(name=name).first()
    if cluster is None:
        raise Http404(f"no cluster named {name}")
    return render_page(request, "web/clusters.html", {"groups": [_group(cluster)],
                                                      "cluster": cluster})
