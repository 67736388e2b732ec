"""The Django side of the replication engine: which links move data and which topics each
carries, applying a batch for a gateway, and recording what happened on the link.

The engine core (replication/engine/replicator.py) holds no state; the replica's partitions
are the only record of progress. What is kept here (last error, last progress) is for the
operators' eyes only, never a check.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import NamedTuple
from uuid import UUID

import structlog
from django.conf import settings
from django.db import transaction
from django.db.models import Exists, F, OuterRef, QuerySet
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver
from django.utils import timezone

from replication.compiled import PLACEHOLDER, Compiled
from replication.engine.replicator import BatchSpec, apply_spec
from replication.engine.store import Applied, Misordered
from replication.events import publish_after_commit
from replication.models import Cluster, Gateway, ReplicaLink, Stream, Topic, Upstream
from replication.presence import presence
from replication.stores import store_for

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class MovingLink:
    """A link that moves data now: agreed both ways and not paused (DESIGN.md invariant 5)."""

    id: int
    source: UUID
    source_cluster: Cluster
    replica: UUID
    replica_cluster: Cluster
    topics: dict[str, UUID]  # the source's topics (name -> origin) that go to this replica
    throttle: bool = False  # `-throttle true`: the replicator limits its rate
    # Stream ids and their tenants, for the events the replicator publishes about the link.
    source_id: int = 0
    replica_id: int = 0
    tenants: frozenset[int] = frozenset()

    def spec(self, topic: str, partition: int, start: int, end: int) -> BatchSpec:
        return BatchSpec(self.source, self.replica, topic, partition, start, end)


def links_moving(
    *, sources: Iterable[str] | None = None, ids: Iterable[int] | None = None
) -> list[MovingLink]:
    """The moving links out of the given source streams (by UUID) or with the given ids;
    every moving link when both are None. Two queries, whatever the number of links."""
    links = ReplicaLink.objects.moving()
    if sources is not None or ids is not None:
        links = links.filter(source__uuid__in=list(sources or ())) | links.filter(
            pk__in=list(ids or ())
        )
    # Plain rows, not five model instances a link: the sweep reads every moving link, and
    # building those instances was half of an idle replicator's CPU (1,000 links).
    rows = list(links.order_by("pk").values_list(
        "pk", "source__uuid", "source__cluster__name", "source__cluster__store_url",
        "replica__uuid", "replica__cluster__name", "replica__cluster__store_url", "throttle",
        "source_id", "replica_id", "source__tenant_id", "replica__tenant_id"))
    topics = _topics_by_stream({row[8] for row in rows})
    clusters: dict[tuple[str, str], Cluster] = {}

    def cluster(name: str, url: str) -> Cluster:  # only what store_for reads, one per cluster
        return clusters.setdefault((name, url), Cluster(name=name, store_url=url))

    return [
        MovingLink(pk, source, cluster(src_name, src_url), replica, cluster(dst_name, dst_url),
                   carried_topics(replica, topics[source_id]), throttle, source_id, replica_id,
                   frozenset({source_tenant, replica_tenant}))
        for (pk, source, src_name, src_url, replica, dst_name, dst_url, throttle, source_id,
             replica_id, source_tenant, replica_tenant) in rows
    ]


def link_ids_moving() -> set[int]:
    return {pk for (pk,) in _moving_ids_sql().run()}


_LINK_FIELDS = ("source__uuid", "replica__uuid", "source__cluster__name",
                "source__cluster__store_url", "replica__cluster__name",
                "replica__cluster__store_url")


@functools.cache
def _moving_ids_sql() -> Compiled:
    """The moving links' ids, compiled once: the replicator asks every retry interval."""
    return Compiled(ReplicaLink.objects.moving().values_list("pk").order_by())


class GatewayLink(NamedTuple):
    """What a gateway needs of a moving link to apply a batch."""

    source: UUID
    replica: UUID
    source_cluster: Cluster
    replica_cluster: Cluster
    feeds: bool  # the replica is the source of a moving link too: its replicator wants a wake
    synchronous: bool  # producers may be waiting for the replica (replication/services/sync.py)


@functools.cache
def _gateway_link_sql() -> Compiled:
    """One moving link, compiled once (a gateway asks for every batch)."""
    moving = ReplicaLink.objects.moving()
    feeds = Exists(ReplicaLink.objects.moving().filter(source_id=OuterRef("replica_id")))
    return Compiled(moving.filter(pk=PLACEHOLDER).annotate(feeds=feeds)
                    .values_list(*_LINK_FIELDS, "feeds", "synchronous").order_by())


@functools.lru_cache(maxsize=256)
def _cluster(name: str, store_url: str) -> Cluster:
    return Cluster(name=name, store_url=store_url)  # only what store_for reads


def gateway_link(link_id: int) -> GatewayLink | None:
    """The link if it moves; None when it does not."""
    rows = _gateway_link_sql().run(link_id)
    if not rows:
        return None
    source, replica, src_name, src_url, dst_name, dst_url, feeds, synchronous = rows[0]
    return GatewayLink(UUID(str(source)), UUID(str(replica)), _cluster(src_name, src_url),
                       _cluster(dst_name, dst_url), bool(feeds), synchronous)


def _topics_by_stream(stream_ids: set[int]) -> dict[int, dict[str, UUID]]:
    by_stream: dict[int, dict[str, UUID]] = {sid: {} for sid in stream_ids}
    rows = Topic.objects.filter(stream_id__in=stream_ids).values_list(
        "stream_id", "name", "origin_uuid"
    )
    for stream_id, name, origin in rows:
        by_stream[stream_id][name] = origin
    return by_stream


def carried_topics(replica: UUID, topics: dict[str, UUID]) -> dict[str, UUID]:
    """Invariant 3: a topic never travels back to the stream it originates in."""
    return {name: origin for name, origin in topics.items() if origin != replica}


# Waits before a batch that arrived ahead of its partition's previous one is refused: with
# several batches of a partition in flight, the previous one is usually being applied by
# another thread at that moment, and waiting a few ms beats a refusal and a resend.
MISORDER_WAITS = (0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2)


def batch_apply(*, link_id: int, topic: str, partition: int, start: int, end: int) -> Applied:
    """A gateway's work: copy [start, end) of the source partition to the replica and advance
    the replica's cursor in one transaction of the replica's store (`link_apply`). A link
    that lost its agreement or was paused since the batch was cut applies nothing, so pause
    stops at a batch boundary. New messages in a replica that is itself the source of a moving
    link (a chain's next hop, the way back of a multi-master pair) wake its replicator once
    the transaction commits (a gateway sends that wake-up with its acknowledgement instead)."""
    link = gateway_link(link_id)
    if link is None:
        return Applied({})
    applied = link_apply(link, link_id=link_id, topic=topic, partition=partition, start=start,
                         end=end)
    if applied.count and link.feeds:
        stream_wake(stream=link.replica)
    return applied


def link_apply(link: GatewayLink, *, link_id: int, topic: str, partition: int, start: int,
               end: int) -> Applied:
    """`batch_apply` of a link the caller read (`gateway_link`), without the wake-up. No
    produceperm check: gateways publish to replicas with implicit authority (DESIGN.md
    invariant 6). Returns what was newly applied: messages (`count`) and their logical
    bytes, both 0 for a redelivered batch (the replica trims what it already holds)."""
    spec = BatchSpec(link.source, link.replica, topic, partition, start, end)
    source, replica = store_for(link.source_cluster), store_for(link.replica_cluster)

    def apply() -> Applied:
        return apply_spec(source, replica, spec, link=str(link_id),
                          max_bytes=settings.REPLICATION_BATCH_BYTES)

    for wait in MISORDER_WAITS:
        try:
            return apply()
        except Misordered:
            time.sleep(wait)
    return apply()  # Misordered still: the previous batch is lost, not late; re-planned


def _note(links: QuerySet[ReplicaLink], **values: object) -> None:
    """Write the operators' notes on links (never a check) in one statement that skips the rows
    another transaction holds (a failover ending the link, a job changing its state) rather
    than waiting for them: a replicator or gateway never queues behind another's work
    (DESIGN.md invariant 14). A skipped note is written again at the link's next event."""
    held = links.order_by().select_for_update(skip_locked=True).values("pk")
    with transaction.atomic():  # FOR UPDATE needs one, even as a subquery
        ReplicaLink.objects.filter(pk__in=held).update(**values)


def link_progress(*, link_ids: Iterable[int]) -> None:
    """Batches applied: the links are moving, so their last error no longer stands."""
    _note(ReplicaLink.objects.filter(pk__in=list(link_ids)),
          last_progress=timezone.now(), last_error="", last_error_gateway="")


def link_error(*, link_id: int, error: str, gateway: str = "") -> None:
    _note(ReplicaLink.objects.filter(pk=link_id).exclude(
        last_error=error, last_error_gateway=gateway),
        last_error=error[:2000], last_error_gateway=gateway)


def link_waiting(*, link_ids: Iterable[int], cluster: str) -> None:
    """No live gateway on the destination cluster: say so where `replica list` shows it."""
    error = f"waiting: no live gateway on cluster {cluster}"
    _note(ReplicaLink.objects.filter(pk__in=list(link_ids)).exclude(last_error=error),
          last_error=error, last_error_gateway="")


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


def link_is_stalled(link: ReplicaLink, messages_pending: int) -> bool:
    """Messages pending and none applied for REPLICATION_STALL_SECONDS on a moving link."""
    if not messages_pending or link.paused or not link.agreed:
        return False
    since = link.last_progress or link.created
    return timezone.now() - since > timedelta(seconds=settings.REPLICATION_STALL_SECONDS)


def link_lag_publish(*, link: MovingLink, messages: int, nbytes: int, lag_ms: int,
                     stalled: bool) -> None:
    """Replica progress for the browser ("replica.lag"), to the tenants of both ends. The
    replicator runs outside any transaction, so this is sent at once."""
    publish_after_commit(tenant_ids=link.tenants, event="replica.lag", payload={
        "link": link.id, "source": link.source_id, "replica": link.replica_id,
        "messagesPending": messages, "bytesPending": nbytes, "timeLagMs": lag_ms,
        "stalled": stalled})


def link_catchup_request(*, link_id: int) -> bool:
    """Hands a link with a large backlog to the bulk catch-up job: True when a job runs or was
    just submitted for it (the replicator then leaves the link alone for a while)."""
    try:
        from replication.services.jobs import catchup_request
    except ImportError:  # the catch-up job is not built yet: the replicator copies as usual
        return False
    return bool(catchup_request(link_id=link_id))


# --- wake-ups ----------------------------------------------------------------------------------

# A wake-up of a source stream whose links changed carries this prefix, so the replicator
# re-reads the stream's links at once rather than trusting its cache (a produce's wake-up only
# says there is new data).
LINKS_CHANGED = "links:"
# A cursor commit's wake-up carries this one: the replicator copies cursors to the replicas on
# it (and on the sweep), not on every produce's wake-up.
CURSORS_CHANGED = "cursors:"


@receiver([post_save, post_delete], sender=ReplicaLink)
@receiver([post_save, post_delete], sender=Upstream)
def _link_changed(sender: type, instance: ReplicaLink | Upstream, **kwargs: object) -> None:
    # Signals rather than a call in each service: every path that adds, pauses, resumes,
    # edits or removes a link or an upstream saves or deletes one of these rows.
    _links_changed(instance.source_id)


@receiver(post_save, sender=Topic)
def _topic_changed(sender: type, instance: Topic, created: bool, **kwargs: object) -> None:
    if created:
        _links_changed(instance.stream_id)  # the stream's links carry one more topic


@receiver(post_save, sender=Cluster)
def _cluster_changed(sender: type, instance: Cluster, **kwargs: object) -> None:
    transaction.on_commit(_gateways_reread)  # a store URL the gateways may have read


def _gateways_reread() -> None:
    try:
        presence().links_changed()
    except Exception as error:  # Redis down: it gets a new epoch when it comes back
        log.warning("links_changed_failed", error=str(error))


def _links_changed(stream_id: int) -> None:
    def wake() -> None:
        _gateways_reread()
        found = Stream.objects.filter(pk=stream_id).values_list("uuid", flat=True).first()
        if found is not None:  # else deleted: the replicator's watch drops its links
            _wake([f"{LINKS_CHANGED}{found}"])

    transaction.on_commit(wake)


def stream_wake(*, stream: UUID) -> None:
    """New data in `stream`: wake the source side once the producing transaction commits."""
    transaction.on_commit(lambda: _wake([str(stream)]))


def cursors_wake(*, stream: UUID) -> None:
    """Consumer cursors committed in `stream`: its replicas get them now."""
    transaction.on_commit(lambda: _wake([f"{CURSORS_CHANGED}{stream}"]))


def _wake(streams: list[str]) -> None:
    try:
        presence().wake(streams)
    except Exception as error:  # the sweep catches up; a produce must not fail
        log.warning("wake_failed", streams=streams, error=str(error))
