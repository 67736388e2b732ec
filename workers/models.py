"""Records of the bulk jobs (copystream, diffstreams, large-backlog catch-up) that run on
Spark: who asked, what, how far along, and how it ended."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from portal.accounts.models import Tenant
from portal.accounts.scoping import RestrictedQuerySet
from replication.models import ReplicaLink, Stream


class JobQuerySet(RestrictedQuerySet):
    # The destination's and the source's owners see a job too: it writes to, or reads, theirs.
    tenant_paths = ("tenant", "source__tenant", "destination__tenant")

    def active(self) -> JobQuerySet:
        return self.filter(state__in=Job.ACTIVE)


class Job(models.Model):
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


class KafkaProducerId(models.Model):
    """One row per producer id the Kafka listeners hand out (InitProducerId): the table's
    sequence makes ids unique across listeners and restarts, which idempotent producers'
    state in the message stores relies on."""

    id = models.BigAutoField(primary_key=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL,
                             related_name="+")
    client_id = models.CharField(max_length=255, blank=True)
    created = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"producer {self.pk}"


class KafkaGroup(models.Model):
    """A Kafka consumer group's membership as its coordinator (a Kafka listener, another
    process) last published it, for `stream assign list` in the portal. The listener rewrites
    the row on every state change and refreshes it while the group lives; a row past
    `expires` belongs to a group whose listener is gone. The database rather than a cache:
    in the embedded default the listener and the portal are separate processes sharing only
    the database."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    group_id = models.CharField(max_length=255)
    state = models.JSONField(default=dict)  # workers/kafka/board.py's snapshot
    expires = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "group_id"],
                                               name="one_kafka_group_per_tenant")]
        ordering = ["group_id"]

    def __str__(self) -> str:
        return self.group_id
