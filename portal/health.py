"""Health for load balancers and orchestrators: /healthz says the process is up, /readyz that
it can do its work (control database, every cluster's message store, Redis, and a live gateway
on every cluster that replicas are replicated to). Open without login, as probes are; they show
check names and failures, never tenant data."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache

from replication import placement
from replication.models import Cluster, Gateway, ReplicaLink
from replication.stores import store_for
from replication.transport import transport
from replication.transport.client import redis_client

NOBODY = uuid.UUID(int=0)  # a stream no one has: asking its sizes costs a query, finds nothing


@never_cache
def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


@never_cache
def readyz(request: HttpRequest) -> JsonResponse:
    checks = {name: _run(check) for name, check in CHECKS.items()}
    ready = all(result["ok"] for result in checks.values())
    return JsonResponse({"status": "ok" if ready else "unavailable", "checks": checks},
                        status=200 if ready else 503)


def _run(check: Callable[[], str]) -> dict[str, Any]:
    try:
        return {"ok": True, "detail": check()}
    except Exception as error:  # a probe reports every failure rather than raising
        return {"ok": False, "detail": f"{type(error).__name__}: {error}"[:300]}


def _database() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return connection.vendor


def _stores() -> str:
    clusters = list(Cluster.objects.all())
    failed, count = [], 0
    for cluster in clusters:
        for label, check in _store_checks(cluster):
            count += 1
            try:
                check()
            except Exception as error:
                failed.append(f"{label} ({type(error).__name__})")
    if failed:
        raise RuntimeError("message store unreachable: " + ", ".join(failed))
    return f"{count} stores of {len(clusters)} clusters reachable"


def _store_checks(cluster: Cluster) -> list[tuple[str, Callable[[], object]]]:
    """The cluster's store to reach, or each of its store groups by name (issue 33: one
    group's server down is named, not only its cluster)."""
    view = placement.view_of(cluster.name)
    if view is None:
        return [(cluster.name, lambda: store_for(cluster).sizes(NOBODY))]
    return [(f"{cluster.name} group {name}", functools.partial(store.sizes, NOBODY))
            for name, store in view.stores.items()]


def _redis() -> str:
    if not settings.REDIS_URL:
        return "embedded mode: no Redis"
    redis_client(settings.REDIS_URL).ping()
    return "reachable"


def _gateways() -> str:
    """Each destination cluster of a link that moves data needs one live gateway."""
    targets = set(ReplicaLink.objects.agreed().filter(paused=False)
                  .values_list("replica__cluster__name", flat=True))
    configured = list(Gateway.objects.filter(enabled=True, cluster__name__in=targets)
                      .values_list("cluster__name", "name"))
    live = {cluster for cluster, _ in transport().gateways.live(configured)}
    missing = sorted(targets - live)
    if missing:
        raise RuntimeError("no live gateway on cluster " + ", ".join(missing))
    return f"{len(targets)} destination clusters with a live gateway"


CHECKS: dict[str, Callable[[], str]] = {
    "database": _database, "stores": _stores, "redis": _redis, "gateways": _gateways,
}
