"""Alarms (conditions the engine raises and clears) and audit events (who changed what)."""

from __future__ import annotations

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.db.models import Q
from django.utils import timezone

from accounts.models import Tenant
from accounts.scoping import RestrictedQuerySet
from replication.models import Cluster, ReplicaLink, Stream


class AlarmKind(models.TextChoices):
    # MapR's naming (CLUSTER_ALARM_..., VOLUME_ALARM_...), for streamgate's conditions.
    REPLICATION_ERROR = "STREAM_ALARM_REPLICATION_ERROR", "Replication error on a replica link"
    ASYNC_FALLBACK = ("STREAM_ALARM_REPLICA_ASYNC_FALLBACK",
                      "Synchronous replica fell back to asynchronous")
    STALLED = "STREAM_ALARM_REPLICA_STALLED", "Replica link stalled"
    GATEWAYS_DOWN = "CLUSTER_ALARM_GATEWAYS_DOWN", "All gateways of a destination cluster down"
    WAITING_FOR_UPSTREAM = ("STREAM_ALARM_REPLICA_WAITING_FOR_UPSTREAM",
                            "Replica waiting for upstream approval")
    RETENTION_UNREPLICATED = ("STREAM_ALARM_RETENTION_UNREPLICATED",
                              "Retention deleted unreplicated messages")
    DIVERGED = "STREAM_ALARM_REPLICA_DIVERGED", "A replica differs from its source"
    COPIES_SHORT = ("CLUSTER_ALARM_STORE_COPIES_SHORT",
                    "A cluster's store keeps fewer copies than the cluster requires")
    # An event, not a state: raised by a failover, open until someone clears it.
    FAILOVER = "STREAM_ALARM_REPLICA_FAILOVER", "A replica took over from its source"


CLUSTER_KINDS = frozenset({AlarmKind.GATEWAYS_DOWN, AlarmKind.COPIES_SHORT})


class AlarmQuerySet(RestrictedQuerySet):
    # A link's alarm is seen by the tenants of both ends (as the link itself is); a cluster's
    # by the tenants with streams on that cluster.
    tenant_paths = ("link__source__tenant", "link__replica__tenant", "cluster__streams__tenant",
                    "stream__tenant")

    def open(self) -> AlarmQuerySet:
        return self.filter(cleared__isnull=True)


class Alarm(models.Model):
    kind = models.CharField(max_length=64, choices=AlarmKind.choices)
    # The object the alarm is about, as "link:<id>" or "cluster:<id>": one open alarm per
    # (kind, key), whatever the number of evaluators racing.
    key = models.CharField(max_length=64)
    # What maprcli's `alarm list` shows as the entity: "<source> -> <replica>" or the cluster.
    entity = models.CharField(max_length=2100)
    # No database constraint: an evaluator may raise an alarm on a link deleted a moment ago;
    # the next evaluation clears it (the row keeps its entity text).
    link = models.ForeignKey(ReplicaLink, null=True, blank=True, on_delete=models.SET_NULL,
                             db_constraint=False, related_name="+")
    cluster = models.ForeignKey(Cluster, null=True, blank=True, on_delete=models.SET_NULL,
                                db_constraint=False, related_name="+")
    # A stream's own alarm (a failover: the link it was about is gone), seen by its tenant.
    stream = models.ForeignKey(Stream, null=True, blank=True, on_delete=models.SET_NULL,
                               db_constraint=False, related_name="+")
    description = models.TextField()
    raised = models.DateTimeField(default=timezone.now)
    # When the condition was last seen true (retention losses are events: they stay raised a
    # while after the last one).
    last_seen = models.DateTimeField(default=timezone.now)
    cleared = models.DateTimeField(null=True, blank=True, db_index=True)

    objects = AlarmQuerySet.as_manager()

    class Meta:
        ordering = ["-raised", "-pk"]
        constraints = [
            models.UniqueConstraint(fields=["kind", "key"], condition=Q(cleared__isnull=True),
                                    name="one_open_alarm_per_object"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} on {self.entity}"

    @property
    def is_open(self) -> bool:
        return self.cleared is None

    @property
    def alarm_type(self) -> str:
        return "CLUSTER" if self.kind in CLUSTER_KINDS else "STREAM"


class Interface(models.TextChoices):
    API = "api", "API (/api/v1)"
    REST = "rest", "maprcli REST or the streamgate CLI (/rest)"
    WEB = "web", "Browser portal"
    ADMIN = "admin", "Admin site"
    SYSTEM = "system", "System (engine, tasks, commands)"


class AuditAction(models.TextChoices):
    CREATE = "create"
    EDIT = "edit"
    DELETE = "delete"
    PAUSE = "pause"
    RESUME = "resume"
    APPROVE = "approve"  # a replica's owner adding the upstream a registered link waits for
    FAILOVER = "failover"  # a replica taking over from its source
    PURGE = "purge"  # `stream purge`: messages deleted by hand (no model row changes)
    RESET = "reset"  # a consumer group's offsets moved by hand (no model row changes)
    REPAIR = "repair"  # a replica's repair started (its link's diffstreams -repair job)
    MOVE = "move"  # a partition moved to another store group (no stream row changes)


class AuditEventQuerySet(RestrictedQuerySet):
    tenant_paths = ("tenant", "peer_tenant")


class AuditEvent(models.Model):
    """One control-plane change. Foreign keys carry no database constraint and names are kept
    as text: the record outlives the users, tenants and objects it names."""

    at = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                              on_delete=models.DO_NOTHING, db_constraint=False, related_name="+")
    actor_name = models.CharField(max_length=150, blank=True)
    interface = models.CharField(max_length=8, choices=Interface.choices)
    request_id = models.CharField(max_length=64, blank=True)
    # The owning tenant, and for links and upstreams the other end's (both see the change).
    tenant = models.ForeignKey(Tenant, null=True, blank=True, on_delete=models.DO_NOTHING,
                               db_constraint=False, related_name="+")
    peer_tenant = models.ForeignKey(Tenant, null=True, blank=True, on_delete=models.DO_NOTHING,
                                    db_constraint=False, related_name="+")
    tenant_name = models.CharField(max_length=63, blank=True)
    object_type = models.CharField(max_length=32)  # the model: "stream", "replicalink", ...
    object_id = models.CharField(max_length=64)
    object_repr = models.CharField(max_length=2100)  # a path, "<source> -> <replica>", ...
    action = models.CharField(max_length=8, choices=AuditAction.choices)
    # The changed fields only (all of them on create and delete), as JSON.
    before = models.JSONField(null=True, blank=True, encoder=DjangoJSONEncoder)
    after = models.JSONField(null=True, blank=True, encoder=DjangoJSONEncoder)

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        ordering = ["-at", "-pk"]
        indexes = [models.Index(fields=["object_type", "object_id"])]

    def __str__(self) -> str:
        who = self.actor_name or "system"
        return f"{self.at:%Y-%m-%d %H:%M:%S} {who} {self.action} {self.object_type} " \
               f"{self.object_repr}"


class UsageQuerySet(RestrictedQuerySet):
    tenant_paths = ("tenant",)


class UsageDay(models.Model):
    """One stream's traffic on one day (UTC), rolled up from the live counters in Redis by
    `rollup_usage_task` (operations/usage.py), so history outlives a Redis restart. The path
    and tenant are kept beside the stream's UUID: the row stays after the stream is deleted."""

    day = models.DateField()
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    stream_uuid = models.UUIDField()
    path = models.CharField(max_length=2048)
    produced_messages = models.PositiveBigIntegerField(default=0)
    produced_bytes = models.PositiveBigIntegerField(default=0)
    consumed_messages = models.PositiveBigIntegerField(default=0)
    consumed_bytes = models.PositiveBigIntegerField(default=0)
    replicated_messages = models.PositiveBigIntegerField(default=0)
    replicated_bytes = models.PositiveBigIntegerField(default=0)
    stored_bytes = models.PositiveBigIntegerField(default=0)  # at the day's last rollup

    objects = UsageQuerySet.as_manager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["stream_uuid", "day"],
                                               name="one_usage_row_per_stream_and_day")]
        indexes = [models.Index(fields=["tenant", "day"])]
        ordering = ["-day", "path"]

    def __str__(self) -> str:
        return f"{self.path} on {self.day}"


class UsageMark(models.Model):
    """The live counters' totals of a stream as the last rollup read them: the next rollup
    adds only what grew since. `epoch` names the Redis the totals came from; counters read
    from another (Redis restarted, its counters from zero) are all new."""

    stream_uuid = models.UUIDField(unique=True)
    epoch = models.CharField(max_length=32)
    totals = models.JSONField(default=dict)  # "<direction>_<figure>" -> count
    updated = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"usage mark of {self.stream_uuid}"
