"""Prometheus metrics at /metrics, for operators (staff; a knox token works for the scraper).

Everything is read at scrape time from the control database and the cluster stores, so every
web worker answers the same and nothing is lost on restart. Offsets never restart, so the sum
of a topic's high watermarks at its origin is an honest produced-messages counter (and at a
replica, a replicated-messages counter); Prometheus's rate() turns them into throughput.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime

import redis
from django.db.models import Count
from django.http import HttpResponse
from django.utils import timezone
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from rest_framework.authentication import BasicAuthentication, SessionAuthentication
from rest_framework.permissions import IsAdminUser
from rest_framework.request import Request
from rest_framework.views import APIView

from operations.models import Alarm, AlarmKind
from replication.counters import CONSUMED, FIGURES, PRODUCED, refusal_totals, traffic_totals
from replication.engine.store import UnknownTopic
from replication.figures import pending_figures, time_lag
from replication.models import (
    Cluster,
    Gateway,
    Job,
    ReplicaLink,
    Stream,
    SyncMode,
    Topic,
    link_is_stalled,
)
from replication.services.clusters import cluster_info, control_info
from replication.stores import store_for
from replication.transport import transport
from replication.transport.leases import replicator_rows

LINK = ["source", "replica"]


def replica_metrics() -> Iterator[Metric]:
    links = list(ReplicaLink.objects.select_related("source__cluster", "replica__cluster")
                 .with_agreement())
    pending = pending_figures(links)
    families = {
        "messages": GaugeMetricFamily("streamgate_replica_lag_messages",
                                      "Messages not yet applied at the replica", labels=LINK),
        "bytes": GaugeMetricFamily("streamgate_replica_lag_bytes",
                                   "Bytes not yet applied at the replica", labels=LINK),
        "seconds": GaugeMetricFamily("streamgate_replica_lag_seconds",
                                     "Age of the oldest unreplicated message", labels=LINK),
        "stalled": GaugeMetricFamily("streamgate_replica_stalled",
                                     "1 when messages are pending and none applied lately",
                                     labels=LINK),
        "synchronous": GaugeMetricFamily("streamgate_replica_synchronous",
                                         "1 when the replica is synchronous", labels=LINK),
        "sync_now": GaugeMetricFamily("streamgate_replica_mode_sync",
                                      "1 when the replica replicates synchronously now (0 for "
                                      "asynchronous, including a synchronous one that fell "
                                      "back)", labels=LINK),
    }
    for link in links:
        figures, labels = pending[link.pk], [link.source.path, link.replica.path]
        families["messages"].add_metric(labels, figures.messages)
        families["bytes"].add_metric(labels, figures.bytes)
        families["seconds"].add_metric(labels, time_lag(figures))
        families["stalled"].add_metric(
            labels, int(link_is_stalled(link, figures.messages)))
        families["synchronous"].add_metric(labels, int(link.synchronous))
        families["sync_now"].add_metric(labels, int(link.mode == SyncMode.SYNC))
    yield from families.values()


def gateway_metrics() -> Iterator[Metric]:
    labels = ["cluster", "gateway"]
    counters = {name: CounterMetricFamily(f"streamgate_gateway_{name}", help_, labels=labels)
                for name, help_ in (("batches", "Batches applied"),
                                    ("messages", "Messages applied"),
                                    ("bytes", "Logical bytes (keys, values, headers) applied"),
                                    ("errors", "Batches that failed"))}
    age = GaugeMetricFamily("streamgate_gateway_heartbeat_age_seconds",
                            "Seconds since the gateway's last heartbeat", labels=labels)
    up = GaugeMetricFamily("streamgate_gateway_up", "1 when the gateway is UP", labels=labels)
    now = timezone.now()
    for gateway in Gateway.objects.select_related("cluster"):
        key = [gateway.cluster.name, gateway.name]
        counters["batches"].add_metric(key, gateway.batches_applied)
        counters["messages"].add_metric(key, gateway.messages_applied)
        counters["bytes"].add_metric(key, gateway.bytes_applied)
        counters["errors"].add_metric(key, gateway.errors)
        if gateway.last_heartbeat is not None:
            age.add_metric(key, (now - gateway.last_heartbeat).total_seconds())
        up.add_metric(key, int(gateway.status == Gateway.Status.UP))
    yield from (*counters.values(), age, up)


def replicator_metrics() -> Iterator[Metric]:
    """Each replicator heard of in the last hour (replication/transport/leases.py)."""
    labels = ["replicator", "host", "pid"]
    live = GaugeMetricFamily("streamgate_replicators_live", "Replicators alive now")
    up = GaugeMetricFamily("streamgate_replicator_up", "1 while the replicator beats",
                           labels=labels)
    links = GaugeMetricFamily("streamgate_replicator_links",
                              "Replica links the replicator holds a lease on", labels=labels)
    age = GaugeMetricFamily("streamgate_replicator_heartbeat_age_seconds",
                            "Seconds since the replicator's last beat", labels=labels)
    try:
        rows = replicator_rows(transport().leases)
    except redis.RedisError:  # the other figures still come; no replicator figure is a gap
        rows = []
    live.add_metric([], sum(r["alive"] for r in rows))
    for row in rows:
        key = [row["replicator"], row["host"], str(row["pid"])]
        up.add_metric(key, int(row["alive"]))
        links.add_metric(key, row["linksHeld"])
        age.add_metric(key, row["heartbeatAge"])
    yield from (live, up, links, age)


def store_metrics() -> Iterator[Metric]:
    """Each cluster's store group as its leader sees it now (replication/engine/copies.py):
    members, their roles and lag, the copies a commit is on against the cluster's required
    copies (CLUSTER_ALARM_STORE_COPIES_SHORT while fewer), timeline and last failover."""
    families = GroupFamilies("streamgate_store", "the cluster's message store", ["cluster"])
    required = GaugeMetricFamily("streamgate_store_required_copies",
                                 "Copies the cluster requires", labels=["cluster"])
    for cluster in Cluster.objects.order_by("name"):
        families.add([cluster.name], cluster_info(cluster))
        required.add_metric([cluster.name], cluster.required_copies)
    yield from (*families.all(), required)


def control_metrics() -> Iterator[Metric]:
    """The control database's group, the same figures as a store's (issue 32)."""
    families = GroupFamilies("streamgate_control_db", "the control database", [])
    families.add([], control_info())
    yield from families.all()


class GroupFamilies:
    """A PostgreSQL group's figures (replication.services.clusters' `*_info` shape) under one
    metric prefix, one sample per group labelled by `labels`."""

    def __init__(self, prefix: str, what: str, labels: list[str]) -> None:
        self.gauge = {name: GaugeMetricFamily(f"{prefix}_{name}", help_, labels=labels)
                      for name, help_ in (
                          ("up", f"1 when {what} answers"),
                          ("members", "Servers in the group (the leader, standbys, and standbys "
                                      "down that still hold a replication slot)"),
                          ("copies", "Servers an acknowledged commit is on now"),
                          ("timeline", "The group's PostgreSQL timeline: one more at each "
                                       "failover"),
                          ("last_failover_timestamp_seconds", "When the current timeline "
                                                              "began"))}
        member = [*labels, "member"]
        self.role = GaugeMetricFamily(f"{prefix}_member_role", "1 for each member's current "
                                      "role (leader, sync_standby, replica) and state",
                                      labels=[*member, "role", "state"])
        self.lag_bytes = GaugeMetricFamily(f"{prefix}_member_lag_bytes",
                                           "WAL bytes the member has yet to replay", labels=member)
        self.lag_seconds = GaugeMetricFamily(f"{prefix}_member_lag_seconds",
                                             "How long the member's replay is behind",
                                             labels=member)

    def add(self, key: list[str], info: dict) -> None:
        self.gauge["up"].add_metric(key, int("storeError" not in info))
        self.gauge["members"].add_metric(key, len(info["members"]))
        self.gauge["copies"].add_metric(key, info["copies"])
        if info["timeline"] is not None:
            self.gauge["timeline"].add_metric(key, info["timeline"])
        if info["lastFailover"]:
            self.gauge["last_failover_timestamp_seconds"].add_metric(
                key, datetime.fromisoformat(info["lastFailover"]).timestamp())
        for row in info["members"]:
            labels = [*key, row["name"]]
            self.role.add_metric([*labels, row["role"], row["state"]], 1)
            self.lag_bytes.add_metric(labels, row["lagBytes"])
            self.lag_seconds.add_metric(labels, row["lagSeconds"])

    def all(self) -> tuple[Metric, ...]:
        return (*self.gauge.values(), self.role, self.lag_bytes, self.lag_seconds)


def message_metrics() -> Iterator[Metric]:
    labels = ["stream", "topic"]
    produced = CounterMetricFamily("streamgate_messages_produced",
                                   "Messages produced to the topic at its origin", labels=labels)
    replicated = CounterMetricFamily("streamgate_messages_replicated",
                                     "Messages of the topic applied at this replica",
                                     labels=labels)
    for topic in Topic.objects.select_related("stream__cluster"):
        try:
            marks = store_for(topic.stream.cluster).watermarks(topic.stream.uuid, topic.name)
        except UnknownTopic:  # nothing written yet
            marks = {}
        family = produced if topic.is_origin else replicated
        family.add_metric([topic.stream.path, topic.name], sum(h for _, h in marks.values()))
    yield from (produced, replicated)


def traffic_metrics() -> Iterator[Metric]:
    """What producers and consumers moved through the portal, per stream (replication/counters.py:
    totals in the shared cache, so every web worker reports all of it)."""
    streams = dict(Stream.objects.values_list("uuid", "path"))
    for direction, verb in ((PRODUCED, "produced to"), (CONSUMED, "consumed from")):
        totals = traffic_totals(direction, streams)
        families = [CounterMetricFamily(f"streamgate_{direction}_{figure}",
                                        f"{figure.capitalize()} {verb} the stream through the "
                                        "portal (API, CLI, pages)", labels=["stream"])
                    for figure in FIGURES]
        for uuid, path in streams.items():
            for family, value in zip(families, totals[uuid], strict=True):
                family.add_metric([path], value)
        yield from families


def kafka_metrics() -> Iterator[Metric]:
    """What the Kafka listeners refused, by reason (replication/counters.py)."""
    family = CounterMetricFamily("streamgate_kafka_refused",
                                 "Connections, frames, sign-ins and batches the Kafka listeners "
                                 "refused, by reason", labels=["reason"])
    for reason, total in refusal_totals().items():
        family.add_metric([reason], total)
    yield family


def alarm_metrics() -> Iterator[Metric]:
    family = GaugeMetricFamily("streamgate_alarms_open", "Alarms raised now, by alarm name",
                               labels=["alarm"])
    counts = dict(Alarm.objects.open().order_by().values_list("kind").annotate(n=Count("pk")))
    for kind in AlarmKind.values:
        family.add_metric([kind], counts.get(kind, 0))
    yield family


def job_metrics() -> Iterator[Metric]:
    """Progress of the queued and running bulk jobs (copystream, diffstreams, catch-up)."""
    labels = ["job", "kind", "state", "source", "destination"]
    families = {name: GaugeMetricFamily(f"streamgate_job_{name}", help_, labels=labels)
                for name, help_ in (("percent", "Completion of an active job, 0-100"),
                                    ("messages_done", "Messages an active job has processed"),
                                    ("messages_total", "Messages an active job has to process"),
                                    ("bytes_done", "Bytes an active job has processed"),
                                    ("bytes_total", "Bytes an active job has to process"))}
    for job in Job.objects.active().order_by("pk"):
        key = [str(job.pk), job.kind, job.state, job.source_path, job.destination_path]
        families["percent"].add_metric(key, job.percent)
        for name in ("messages_done", "messages_total", "bytes_done", "bytes_total"):
            families[name].add_metric(key, getattr(job, name))
    yield from families.values()


class Collector:
    def collect(self) -> Iterator[Metric]:
        started = time.monotonic()
        yield from replica_metrics()
        yield from gateway_metrics()
        yield from replicator_metrics()
        yield from store_metrics()
        yield from control_metrics()
        yield from message_metrics()
        yield from traffic_metrics()
        yield from kafka_metrics()
        yield from alarm_metrics()
        yield from job_metrics()
        yield GaugeMetricFamily("streamgate_scrape_seconds", "Time this scrape took",
                                value=time.monotonic() - started)


class MetricsView(APIView):
    """Stream paths of every tenant show here: operators only."""

    permission_classes = [IsAdminUser]
    authentication_classes = [*APIView.authentication_classes, BasicAuthentication,
                              SessionAuthentication]
    schema = None  # Prometheus text, not part of the API's OpenAPI document

    def get(self, request: Request) -> HttpResponse:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(Collector())
        return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
