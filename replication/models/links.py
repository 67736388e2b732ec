"""Replication between streams: the links a source registers, the upstreams a replica
declares (both needed, DESIGN.md invariant 5), their mode switches, and failovers."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from datetime import timedelta
from uuid import UUID

from django.conf import settings
from django.db import models
from django.utils import timezone

from accounts.modelbases import abstract_model, lowercase_choices, shown_as
from accounts.scoping import RestrictedQuerySet
from replication.compiled import PLACEHOLDER, Compiled
from replication.models.moving import GatewayLink, MovingLink, carried_topics
from replication.models.streams import Cluster, Compression, Stream, Topic


class ReplicaState(models.TextChoices):
    # MapR's names, so the seeds read naturally against the product.
    CREATE_SCHEDULE = "REPLICA_STATE_CREATE_SCHEDULE"
    COPY_SCHEDULE = "REPLICA_STATE_COPY_SCHEDULE"
    COPY_IN_PROGRESS = "REPLICA_STATE_COPY_IN_PROGRESS"
    COPY_IN_RECOVER = "REPLICA_STATE_COPY_IN_RECOVER"
    REPLICATING = "REPLICA_STATE_REPLICATING"
    UNEXPECTED = "REPLICA_STATE_UNEXPECTED"
    # streamgate's own: registered at the source, but the replica has not declared the upstream.
    WAITING_FOR_UPSTREAM = "REPLICA_STATE_WAITING_FOR_UPSTREAM"


# The mode a link replicates in now; only a `-synchronous true` link is ever in SYNC.
SyncMode = lowercase_choices("SyncMode", "SYNC ASYNC", __name__)


def stream_pair(owner: str, other: str, *, unique: str, idx: str, itself: str,
                shown: str) -> type[models.Model]:
    """The base of what a link (the source's side) and an upstream (the replica's side) both
    record: the position in the owner's list (the stream whose list it is in), who made it
    and when; listed by the owner's path and position; one per pair of streams, one per
    position in the owner's list, never a stream with itself. The subclass adds the two
    streams, `owner` and `other`; `shown` as in shown_as()."""
    return abstract_model(f"StreamPair_{owner}", {
        "ordering": [f"{owner}__path", "idx"],
        "constraints": [
            models.UniqueConstraint(fields=[owner, other], name=unique),
            models.UniqueConstraint(fields=[owner, "idx"], name=idx),
            models.CheckConstraint(condition=~models.Q(source=models.F("replica")), name=itself),
        ],
    }, idx=models.PositiveSmallIntegerField(), created_by=models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"),
        created=models.DateTimeField(auto_now_add=True), __str__=shown_as(shown),
        __module__=__name__)


class ReplicaLinkQuerySet(RestrictedQuerySet):
    # The owners of either end see the link: the source lists it, the replica approves it.
    tenant_paths = ("source__tenant", "replica__tenant")

    def with_agreement(self) -> ReplicaLinkQuerySet:
        """Annotate `is_agreed`: whether the replica declared the source as its upstream
        (DESIGN.md invariant 5), in the list query itself rather than a query per row."""
        upstreams = Upstream.objects.filter(
            replica=models.OuterRef("replica"), source=models.OuterRef("source")
        )
        return self.annotate(is_agreed=models.Exists(upstreams))

    def agreed(self) -> ReplicaLinkQuerySet:
        """Links with the two-way agreement: only these move data."""
        return self.with_agreement().filter(is_agreed=True)

    def moving(self) -> ReplicaLinkQuerySet:
        """Agreed, not paused, and not handed to a Spark copy (autosetup's copy step or a
        large-backlog catch-up): the links the gateways serve now."""
        return self.agreed().filter(paused=False).exclude(state=ReplicaState.COPY_IN_PROGRESS)

    def moving_links(self, *, sources: Iterable[str] | None = None,
                     ids: Iterable[int] | None = None) -> list[MovingLink]:
        """The moving links out of the given source streams (by UUID) or with the given ids;
        every moving link when both are None. Two queries, whatever the number of links."""
        links = self.moving()
        if sources is not None or ids is not None:
            links = links.filter(source__uuid__in=list(sources or ())) | links.filter(
                pk__in=list(ids or ()))
        rows = list(links.order_by("pk").values_list(
            "pk", "source__uuid", "source__cluster__name", "source__cluster__store_url",
            "replica__uuid", "replica__cluster__name", "replica__cluster__store_url", "throttle",
            "source_id", "replica_id", "source__tenant_id", "replica__tenant_id"))
        topics = _topics_by_stream({row[8] for row in rows})
        clusters: dict[tuple[str, str], Cluster] = {}

        def cluster(name: str, url: str) -> Cluster:  # only what store_for reads, one a cluster
            return clusters.setdefault((name, url), Cluster(name=name, store_url=url))

        return [
            MovingLink(pk, source, cluster(src_name, src_url), replica,
                       cluster(dst_name, dst_url), carried_topics(replica, topics[source_id]),
                       throttle, source_id, replica_id, frozenset({source_tenant, replica_tenant}))
            for (pk, source, src_name, src_url, replica, dst_name, dst_url, throttle, source_id,
                 replica_id, source_tenant, replica_tenant) in rows
        ]

    def moving_ids(self) -> set[int]:
        """Every moving link's id, by SQL compiled once (the replicator asks every retry
        interval): the whole table's, whatever this queryset filters."""
        return {pk for (pk,) in _moving_ids_sql().run()}

    def gateway_link(self, link_id: int) -> GatewayLink | None:
        """The link if it moves, None when it does not, by SQL compiled once (a gateway asks
        once per links epoch): the whole table's, whatever this queryset filters."""
        rows = _gateway_link_sql().run(link_id)
        if not rows:
            return None
        source, replica, src_name, src_url, dst_name, dst_url, feeds, synchronous = rows[0]
        return GatewayLink(UUID(str(source)), UUID(str(replica)), _cluster(src_name, src_url),
                           _cluster(dst_name, dst_url), bool(feeds), synchronous)


def _topics_by_stream(stream_ids: set[int]) -> dict[int, dict[str, UUID]]:
    by_stream: dict[int, dict[str, UUID]] = {sid: {} for sid in stream_ids}
    rows = Topic.objects.filter(stream_id__in=stream_ids).values_list(
        "stream_id", "name", "origin_uuid")
    for stream_id, name, origin in rows:
        by_stream[stream_id][name] = origin
    return by_stream


@functools.cache
def _moving_ids_sql() -> Compiled:
    return Compiled(ReplicaLink.objects.moving().values_list("pk").order_by())


@functools.cache
def _gateway_link_sql() -> Compiled:
    moving = ReplicaLink.objects.moving()
    feeds = models.Exists(ReplicaLink.objects.moving().filter(source_id=models.OuterRef(
        "replica_id")))
    return Compiled(moving.filter(pk=PLACEHOLDER).annotate(feeds=feeds).values_list(
        "source__uuid", "replica__uuid", "source__cluster__name", "source__cluster__store_url",
        "replica__cluster__name", "replica__cluster__store_url", "feeds", "synchronous",
    ).order_by())


@functools.lru_cache(maxsize=256)
def _cluster(name: str, store_url: str) -> Cluster:
    return Cluster(name=name, store_url=store_url)  # only what store_for reads


class ReplicaLink(stream_pair("source", "replica", unique="one_link_per_pair",
                              idx="replica_idx_per_source", itself="no_replica_of_itself",
                              shown="{self.source.path} -> {self.replica.path}")):
    source = models.ForeignKey(Stream, on_delete=models.CASCADE, related_name="replica_links")
    replica = models.ForeignKey(Stream, on_delete=models.CASCADE, related_name="source_links")
    paused = models.BooleanField(default=False)
    synchronous = models.BooleanField(default=False)
    throttle = models.BooleanField(default=False)
    networkcompression = models.CharField(max_length=8, choices=Compression.choices)
    networkencryption = models.BooleanField(default=False)
    # The engine's lifecycle state; the agreement part of replicaState is derived.
    state = models.CharField(
        max_length=48, choices=ReplicaState.choices, default=ReplicaState.REPLICATING
    )
    copy_percentage = models.PositiveSmallIntegerField(default=0)
    last_error = models.TextField(blank=True)
    # The gateway the last error came from ("" when the source side itself reported it).
    last_error_gateway = models.CharField(max_length=255, blank=True)
    # When a batch last applied, for the `stalled` flag of `replica list`.
    last_progress = models.DateTimeField(null=True, blank=True)
    # `synchronous` is what the owner asked for; `mode` what the link does now: a synchronous
    # link falls back to async by itself and returns when it can (replication/services/sync.py).
    mode = models.CharField(max_length=8, choices=SyncMode.choices, default=SyncMode.ASYNC)
    mode_since = models.DateTimeField(null=True, blank=True)
    mode_reason = models.CharField(max_length=255, blank=True)
    # Continuous verification (replication/services/verify.py): how often, when last, how far
    # (per "topic:partition", the offset below which the replica was found equal), and what.
    verify_interval = models.PositiveIntegerField(default=3600, help_text="seconds")
    last_verified = models.DateTimeField(null=True, blank=True)
    verified_upto = models.JSONField(default=dict, blank=True)
    verify_duration_ms = models.PositiveIntegerField(null=True, blank=True)
    # "" while the replica matches; else where it diverges first, for the alarm.
    verify_error = models.TextField(blank=True)

    objects = ReplicaLinkQuerySet.as_manager()

    @property
    def agreed(self) -> bool:
        annotated = getattr(self, "is_agreed", None)  # from with_agreement(), when used
        if annotated is not None:
            return annotated
        return Upstream.objects.filter(replica=self.replica_id, source=self.source_id).exists()

    def replica_state(self) -> str:
        if not self.agreed:
            return ReplicaState.WAITING_FOR_UPSTREAM
        return self.state


def link_is_stalled(link: ReplicaLink, messages_pending: int) -> bool:
    """Messages pending and none applied for REPLICATION_STALL_SECONDS on a moving link."""
    if not messages_pending or link.paused or not link.agreed:
        return False
    since = link.last_progress or link.created
    return timezone.now() - since > timedelta(seconds=settings.REPLICATION_STALL_SECONDS)


class UpstreamQuerySet(RestrictedQuerySet):
    tenant_paths = ("replica__tenant",)


class Upstream(stream_pair("replica", "source", unique="one_upstream_per_pair",
                           idx="upstream_idx_per_replica", itself="no_upstream_of_itself",
                           shown="{self.replica.path} <- {self.source.path}")):
    replica = models.ForeignKey(Stream, on_delete=models.CASCADE, related_name="upstreams")
    source = models.ForeignKey(Stream, on_delete=models.CASCADE, related_name="downstreams")

    objects = UpstreamQuerySet.as_manager()


class ModeSwitch(models.Model):
    """A replica link switching between synchronous and asynchronous mode: never silent."""

    link = models.ForeignKey(ReplicaLink, on_delete=models.CASCADE, related_name="mode_switches")
    from_mode = models.CharField(max_length=8, choices=SyncMode.choices)
    to_mode = models.CharField(max_length=8, choices=SyncMode.choices)
    reason = models.CharField(max_length=255)
    at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-at", "-pk"]
        verbose_name_plural = "mode switches"

    def __str__(self) -> str:
        return f"{self.link}: {self.from_mode} -> {self.to_mode}"


class FailoverQuerySet(RestrictedQuerySet):
    # The owners of both ends see it, as they see the link it ended.
    tenant_paths = ("replica__tenant", "source__tenant")


class Failover(models.Model):
    """A replica that took over from its source (replication/services/failover.py): what was
    switched, and what may be missing, as known at the moment of the switch."""

    replica = models.ForeignKey(Stream, on_delete=models.CASCADE, related_name="failovers")
    source = models.ForeignKey(Stream, null=True, on_delete=models.SET_NULL, related_name="+")
    source_path = models.CharField(max_length=1024)  # kept if the source is deleted later
    forced = models.BooleanField(default=False)
    source_reachable = models.BooleanField(default=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    at = models.DateTimeField(default=timezone.now)
    # Per partition: {"topic", "partition", "replicaEnd", "sourceEnd" (None when unknown)}.
    partitions = models.JSONField(default=list)
    # The unreplicated tail: messages and the age of its oldest one; None when unknown.
    missing_messages = models.BigIntegerField(null=True)
    missing_ms = models.BigIntegerField(null=True)
    # Where the tail figures come from: the source's store, a lag sample, or nothing.
    missing_from = models.CharField(max_length=255, blank=True)
    topics = models.JSONField(default=list)  # the topics the replica now originates
    # The links the switch ended, as {"source", "replica", options}, for a failback.
    ended_links = models.JSONField(default=list)
    # Set once a failback brought the old source back (replication/services/failback.py), with
    # what it did per partition (common prefix, kept aside, copied).
    failed_back_at = models.DateTimeField(null=True, blank=True)
    failback = models.JSONField(default=dict, blank=True)

    objects = FailoverQuerySet.as_manager()

    class Meta:
        ordering = ["-at", "-pk"]

    def __str__(self) -> str:
        return f"{self.replica.path} took over from {self.source_path}"
