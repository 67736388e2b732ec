"""Bulk jobs run on Spark, and the default streams plain Kafka topic names resolve to."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from accounts.models import Tenant
from accounts.scoping import RestrictedQuerySet
from replication.models.links import ReplicaLink
from replication.models.streams import Cluster, Stream


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
