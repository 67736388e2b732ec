"""Gateways going up and down, told to the pages ("gateway.status" events).

Whoever watches presence (each gateway's heartbeat, workers/replication/gateway.py) calls
`gateways_announce` with the gateways live now; the change from the status last announced is
claimed with a conditional UPDATE, so of several watchers exactly one announces it.
"""

from __future__ import annotations

import structlog
from django.db.models import F, Q
from django.utils import timezone

from replication.events import publish_after_commit
from replication.models import Gateway, Stream

log = structlog.get_logger(__name__)
GatewayId = tuple[str, str]


def gateways_announce(*, live: set[GatewayId]) -> int:
    """Announce each gateway whose liveness changed since its last announcement. A gateway
    never seen up is not announced down. Returns how many were announced."""
    announced = 0
    for gateway in Gateway.objects.select_related("cluster"):
        up = gateway.enabled and (gateway.cluster.name, gateway.name) in live
        status = Gateway.Status.UP if up else Gateway.Status.DOWN
        if gateway.announced_status == status or (
                not up and gateway.announced_status != Gateway.Status.UP):
            continue
        claimed = Gateway.objects.filter(
            pk=gateway.pk, announced_status=gateway.announced_status
        ).update(announced_status=status)
        if claimed:
            gateway_status_publish(gateway=gateway, status=status)
            announced += 1
    return announced


def gateway_status_publish(*, gateway: Gateway, status: str) -> None:
    """To every tenant with streams on the gateway's cluster or replicas into it: the page
    re-fetches what it shows, so the payload carries ids only."""
    tenants = set(Stream.objects.filter(
        Q(cluster_id=gateway.cluster_id) | Q(replica_links__replica__cluster_id=gateway.cluster_id)
    ).order_by().values_list("tenant_id", flat=True).distinct())
    log.info("gateway_status", cluster=gateway.cluster.name, gateway=gateway.name, status=status)
    if tenants:
        publish_after_commit(tenant_ids=tenants, event="gateway.status",
                             payload={"cluster": gateway.cluster_id, "gateway": gateway.pk})


def gateways_configured() -> dict[str, list[str]]:
    """Per destination cluster name, its enabled gateways' names, sorted (round-robin order)."""
    names: dict[str, list[str]] = {}
    rows = Gateway.objects.filter(enabled=True).order_by("cluster__name", "name")
    for cluster, name in rows.values_list("cluster__name", "name"):
        names.setdefault(cluster, []).append(name)
    return names


def gateway_flush(*, cluster: str, name: str, batches: int = 0, messages: int = 0,
                  nbytes: int = 0, errors: int = 0, heartbeat: bool = True) -> None:
    """A gateway's heartbeat in the control database, with the counters it gathered since
    the last one (one UPDATE every few seconds rather than one per batch)."""
    values: dict = {"batches_applied": F("batches_applied") + batches,
                    "messages_applied": F("messages_applied") + messages,
                    "bytes_applied": F("bytes_applied") + nbytes,
                    "errors": F("errors") + errors}
    if heartbeat:
        values["last_heartbeat"] = timezone.now()
    Gateway.objects.filter(cluster__name=cluster, name=name).update(**values)
