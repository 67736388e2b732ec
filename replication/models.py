from __future__ import annotations

import uuid as uuid_lib
from datetime import timedelta
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from accounts.models import Membership, Tenant
from accounts.scoping import RestrictedQuerySet
from replication import ace
from replication.errors import NotFound, PermissionDenied
from replication.paths import parse_stream_path

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

PERMISSIONS = ("produceperm", "consumeperm", "topicperm", "copyperm", "adminperm")
GATEWAY_HEARTBEAT_TIMEOUT = timedelta(seconds=15)


class Compression(models.TextChoices):
    OFF = "off"
    LZ4 = "lz4"
    LZF = "lzf"
    ZLIB = "zlib"


class TimestampType(models.TextChoices):
    CREATETIME = "createtime"
    LOGAPPENDTIME = "logappendtime"


class Cluster(models.Model):
    class State(models.TextChoices):
        ONLINE = "ONLINE"
        OFFLINE = "OFFLINE"

    name = models.CharField(max_length=63, unique=True)
    # Where the cluster's message store lives; empty means the default for the mode.
    store_url = models.CharField(max_length=1024, blank=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.ONLINE)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class GatewayQuerySet(models.QuerySet):
    def live(self, now=None) -> GatewayQuerySet:  # type: ignore[no-untyped-def]
        now = now or timezone.now()
        return self.filter(enabled=True, last_heartbeat__gte=now - GATEWAY_HEARTBEAT_TIMEOUT)


class Gateway(models.Model):
    class Status(models.TextChoices):
        UNKNOWN = "UNKNOWN", "No heartbeat yet"
        UP = "UP"
        DOWN = "DOWN"
        DISABLED = "DISABLED"

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="gateways")
    name = models.CharField(max_length=255)
    address = models.CharField(max_length=255, blank=True)
    enabled = models.BooleanField(default=True)
    last_heartbeat = models.DateTimeField(null=True, blank=True)
    # The status last announced to the pages ("gateway.status" events), so that of several
    # processes watching presence exactly one announces each change (workers/gateway.py).
    announced_status = models.CharField(max_length=16, blank=True)
    # What the gateway process applied, flushed with its heartbeat (workers/gateway.py).
    batches_applied = models.PositiveBigIntegerField(default=0)
    messages_applied = models.PositiveBigIntegerField(default=0)
    bytes_applied = models.PositiveBigIntegerField(default=0)  # logical: keys, values, headers
    errors = models.PositiveBigIntegerField(default=0)
    created = models.DateTimeField(auto_now_add=True)

    objects = GatewayQuerySet.as_manager()

    class Meta:
        ordering = ["cluster__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="gateway_name_per_cluster")
        ]

    def __str__(self) -> str:
        return f"{self.name}@{self.cluster.name}"

    @property
    def status(self) -> str:
        if not self.enabled:
            return self.Status.DISABLED
        if self.last_heartbeat is None:
            return self.Status.UNKNOWN
        if timezone.now() - self.last_heartbeat > GATEWAY_HEARTBEAT_TIMEOUT:
            return self.Status.DOWN
        return self.Status.UP


class StreamQuerySet(RestrictedQuerySet):
    tenant_paths = ("tenant",)

    def by_path(self, text: str, *, field: str = "path") -> Stream:
        """The stream at a MapR path; absent and invisible streams read alike (404)."""
        path = str(parse_stream_path(text, field=field))
        stream = self.select_related("cluster", "tenant").filter(path=path).first()
        if stream is None:
            raise NotFound(
                f"stream {path} does not exist: check -{field}, or create it with "
                f"'streamgate stream create -path {path}'",
                field=field,
            )
        return stream


class Stream(models.Model):
    path = models.CharField(max_length=1024, unique=True)
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="streams")
    name = models.CharField(max_length=1024)
    uuid = models.UUIDField(default=uuid_lib.uuid4, unique=True, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="streams")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    defaultpartitions = models.PositiveIntegerField(default=1)
    ttl = models.PositiveBigIntegerField(default=604800, help_text="seconds; 0 keeps forever")
    compression = models.CharField(max_length=8, choices=Compression.choices, default="lz4")
    autocreate = models.BooleanField(default=True)
    defaulttimestamptype = models.CharField(
        max_length=16, choices=TimestampType.choices, default=TimestampType.CREATETIME
    )
    produceperm = models.TextField()
    consumeperm = models.TextField()
    topicperm = models.TextField()
    copyperm = models.TextField()
    adminperm = models.TextField()
    created = models.DateTimeField(auto_now_add=True)
    modified = models.DateTimeField(auto_now=True)

    objects = StreamQuerySet.as_manager()

    class Meta:
        ordering = ["path"]

    def __str__(self) -> str:
        return self.path

    def identity_of(self, user: AbstractBaseUser) -> ace.Identity:
        roles = Membership.objects.filter(user=user, tenant_id=self.tenant_id).values_list(
            "role", flat=True
        )
        groups = user.groups.values_list("name", flat=True)
        return ace.Identity(user.get_username(), frozenset(groups), frozenset(roles))

    def allows(self, user: AbstractBaseUser, perm: str) -> bool:
        return ace.allows(getattr(self, perm), self.identity_of(user))

    def perms_of(self, user: AbstractBaseUser) -> frozenset[str]:
        """The permissions `user` holds on this stream (one identity lookup for all five)."""
        who = self.identity_of(user)
        return frozenset(perm for perm in PERMISSIONS if ace.allows(getattr(self, perm), who))

    def require(self, user: AbstractBaseUser, *perms: str, action: str) -> None:
        """Pass when the user holds any one of `perms` on this stream."""
        who = self.identity_of(user)
        if not any(ace.allows(getattr(self, perm), who) for perm in perms):
            needed = " or ".join(perms)
            raise PermissionDenied(
                f"{user.get_username()} may not {action} on {self.path}: it needs {needed}; "
                f"ask the stream's administrator to add you to the {perms[0]} ACE"
            )


class TopicQuerySet(RestrictedQuerySet):
    tenant_paths = ("stream__tenant",)


class Topic(models.Model):
    stream = models.ForeignKey(Stream, on_delete=models.CASCADE, related_name="topics")
    name = models.CharField(max_length=249)
    partitions = models.PositiveIntegerField(default=1)
    timestamptype = models.CharField(
        max_length=16, choices=TimestampType.choices, default=TimestampType.CREATETIME
    )
    # The stream where the topic was first created (DESIGN.md invariant 4: one origin per topic).
    origin_uuid = models.UUIDField()
    created = models.DateTimeField(auto_now_add=True)

    objects = TopicQuerySet.as_manager()

    class Meta:
        ordering = ["stream__path", "name"]
        constraints = [
            models.UniqueConstraint(fields=["stream", "name"], name="topic_name_per_stream")
        ]

    def __str__(self) -> str:
        return f"{self.stream.path}:{self.name}"

    @property
    def is_origin(self) -> bool:
        return self.origin_uuid == self.stream.uuid


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


class SyncMode(models.TextChoices):
    """The mode a link replicates in now; only a `-synchronous true` link is ever in SYNC."""

    SYNC = "sync"
    ASYNC = "async"


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


class ReplicaLink(models.Model):
    source = models.ForeignKey(Stream, on_delete=models.CASCADE, related_name="replica_links")
    replica = models.ForeignKey(Stream, on_delete=models.CASCADE, related_name="source_links")
    idx = models.PositiveSmallIntegerField()
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
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created = models.DateTimeField(auto_now_add=True)

    objects = ReplicaLinkQuerySet.as_manager()

    class Meta:
        ordering = ["source__path", "idx"]
        constraints = [
            models.UniqueConstraint(fields=["source", "replica"], name="one_link_per_pair"),
            models.UniqueConstraint(fields=["source", "idx"], name="replica_idx_per_source"),
            models.CheckConstraint(
                condition=~models.Q(source=models.F("replica")), name="no_replica_of_itself"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.source.path} -> {self.replica.path}"

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


class UpstreamQuerySet(RestrictedQuerySet):
    tenant_paths = ("replica__tenant",)


class Upstream(models.Model):
    replica = models.ForeignKey(Stream, on_delete=models.CASCADE, related_name="upstreams")
    source = models.ForeignKey(Stream, on_delete=models.CASCADE, related_name="downstreams")
    idx = models.PositiveSmallIntegerField()
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created = models.DateTimeField(auto_now_add=True)

    objects = UpstreamQuerySet.as_manager()

    class Meta:
        ordering = ["replica__path", "idx"]
        constraints = [
            models.UniqueConstraint(fields=["replica", "source"], name="one_upstream_per_pair"),
            models.UniqueConstraint(fields=["replica", "idx"], name="upstream_idx_per_replica"),
            models.CheckConstraint(
                condition=~models.Q(source=models.F("replica")), name="no_upstream_of_itself"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.replica.path} <- {self.source.path}"


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


class JobQuerySet(RestrictedQuerySet):
    # The destination's and the source's owners see a job too: it writes to, or reads, theirs.
    tenant_paths = ("tenant", "source__tenant", "destination__tenant")

    def active(self) -> JobQuerySet:
        return self.filter(state__in=Job.ACTIVE)


class Job(models.Model):
    """A bulk job (copystream, diffstreams, a large backlog's catch-up) that runs on Spark: who
    asked, what, how far along, how it ended. The domain starts and finishes jobs
    (services/jobs.py); the workers run them (workers/jobs.py)."""

    class Kind(models.TextChoices):
        COPYSTREAM = "copystream"
        DIFFSTREAMS = "diffstreams"
        CATCHUP = "catchup"  # the engine hands a large backlog of a replica link to Spark

    class State(models.TextChoices):
        QUEUED = "QUEUED"
        RUNNING = "RUNNING"
        SUCCEEDED = "SUCCEEDED"
        FAILED = "FAILED"

    ACTIVE = (State.QUEUED, State.RUNNING)

    kind = models.CharField(max_length=16, choices=Kind.choices)
    state = models.CharField(max_length=16, choices=State.choices, default=State.QUEUED)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="jobs")
    # Paths are kept as text too: the record outlives the streams it names.
    source = models.ForeignKey(Stream, null=True, on_delete=models.SET_NULL, related_name="+")
    destination = models.ForeignKey(
        Stream, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    source_path = models.CharField(max_length=1024)
    destination_path = models.CharField(max_length=1024)
    # The link an autosetup copy or a catch-up serves: its state follows the job's.
    link = models.ForeignKey(
        ReplicaLink, null=True, blank=True, on_delete=models.SET_NULL, related_name="jobs"
    )
    # None when the engine asked (catch-up).
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
        related_name="+",
    )
    options = models.JSONField(default=dict, blank=True)
    messages_total = models.BigIntegerField(default=0)
    messages_done = models.BigIntegerField(default=0)
    bytes_total = models.BigIntegerField(default=0)
    bytes_done = models.BigIntegerField(default=0)
    result = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    created = models.DateTimeField(auto_now_add=True)
    started = models.DateTimeField(null=True, blank=True)
    finished = models.DateTimeField(null=True, blank=True)
    # Moves with every progress report: an active job that stops moving lost its worker.
    updated = models.DateTimeField(auto_now=True)

    objects = JobQuerySet.as_manager()

    class Meta:
        # Made by the workers app at first: the table keeps its name (and its rows).
        db_table = "workers_job"
        ordering = ["-created", "-pk"]
        indexes = [models.Index(fields=["tenant", "-created"])]

    def __str__(self) -> str:
        return f"{self.kind} {self.source_path} -> {self.destination_path} ({self.state})"

    @property
    def percent(self) -> int:
        """Completion, 0-100; 100 only once the job has succeeded."""
        if self.state == self.State.SUCCEEDED:
            return 100
        if not self.messages_total:
            return 0
        return min(99, self.messages_done * 100 // self.messages_total)

    @property
    def is_active(self) -> bool:
        return self.state in self.ACTIVE
class DefaultStreamQuerySet(RestrictedQuerySet):
    tenant_paths = ("tenant",)


class DefaultStream(models.Model):
    """Where a plain Kafka topic name (`orders`) lives on a cluster, as MapR's
    `streams.default.stream`: one per tenant and cluster, and a user's own override of it
    (`user` set). The stream need not exist yet: it is created on first use."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="default_streams")
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                             on_delete=models.CASCADE, related_name="default_streams")
    path = models.CharField(max_length=1024)
    set_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL,
                               related_name="+")
    modified = models.DateTimeField(auto_now=True)

    objects = DefaultStreamQuerySet.as_manager()

    class Meta:
        ordering = ["tenant__name", "cluster__name", "user__username"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "cluster"], condition=Q(user__isnull=True),
                                    name="one_default_stream_per_tenant_cluster"),
            models.UniqueConstraint(fields=["tenant", "cluster", "user"],
                                    condition=Q(user__isnull=False),
                                    name="one_default_stream_per_user_cluster"),
        ]

    def __str__(self) -> str:
        who = f" for {self.user}" if self.user_id else ""
        return f"{self.tenant} on {self.cluster}{who}: {self.path}"
