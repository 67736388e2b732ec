from django.contrib.auth.decorators import login_required
from django.db.models import Count, Prefetch
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from replication.models import Cluster, Gateway, ReplicaLink, Stream


@login_required
def overview(request: HttpRequest) -> HttpResponse:
    streams = Stream.objects.restrict(request.user).select_related("cluster", "tenant")
    links = (
        ReplicaLink.objects.restrict(request.user)
        .select_related("source", "replica")
        .with_agreement()
    )
    clusters = Cluster.objects.prefetch_related(
        Prefetch("gateways", queryset=Gateway.objects.order_by("name"))
    ).annotate(num_streams=Count("streams"))
    context = {
        "clusters": clusters,
        "streams": streams.annotate(num_topics=Count("topics")),
        "links": [(link, link.replica_state()) for link in links],
    }
    return render(request, "web/overview.html", context)
