"""Clusters, their gateways, streams and topics."""

from __future__ import annotations

import uuid as uuid_lib
from datetime import timedelta
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import models
from django.utils import timezone

from accounts.modelbases import lowercase_choices, named_within, titled
from accounts.models import Membership, Tenant
from accounts.scoping import RestrictedQuerySet
from replication import ace
from replication.errors import Hint, NotFound, PermissionDenied
from replication.paths import parse_stream_path
from replication.scopes import scope_mask, scope_require_perms

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

PERMISSIONS = ("produceperm", "consumeperm", "topicperm", "copyperm", "adminperm")
GATEWAY_HEARTBEAT_TIMEOUT = timedelta(seconds=15)


Compression = lowercase_choices("Compression", "OFF LZ4 LZF ZLIB", __name__)
TimestampType = lowercase_choices("TimestampType", "CREATETIME LOGAPPENDTIME", __name__)


class CleanupPolicy(models.TextChoices):
    """Kafka's cleanup.policy values, as topics here take them (issue 31)."""

    COMPACT = "compact"
    DELETE = "delete"
    COMPACT_DELETE = "compact,delete"


class Cluster(titled("name")):
    class State(models.TextChoices):
        ONLINE = "ONLINE"
        OFFLINE = "OFFLINE"

    name = models.CharField(max_length=63, unique=True)
    # Where the cluster's message store lives; empty means the default for the mode.
    store_url = models.CharField(max_length=1024, blank=True)
    # Servers an acknowledged acks=all (and REST) produce must be on (invariant 11): refused at
    # creation where the store's group has fewer members (replication/services/clusters.py).
    required_copies = models.PositiveSmallIntegerField(default=1)
    state = models.CharField(max_length=16, choices=State.choices, default=State.ONLINE)
    created = models.DateTimeField(auto_now_add=True)
    # Bumped by every change of its store groups or of where a partition lives (placement.py):
    # processes that route cache the placement with this version (issue 33).
    placement_version = models.PositiveBigIntegerField(default=0)


class GatewayQuerySet(models.QuerySet):
    def live(self, now=None) -> GatewayQuerySet:  # type: ignore[no-untyped-def]
        now = now or timezone.now()
        return self.filter(enabled=True, last_heartbeat__gte=now - GATEWAY_HEARTBEAT_TIMEOUT)


class Gateway(named_within("cluster", "name", shown="{self.name}@{self.cluster.name}")):
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
    # processes watching presence exactly one announces each change (workers/replication/
    # gateway.py).
    announced_status = models.CharField(max_length=16, blank=True)
    # What the gateway process applied, flushed with its heartbeat (workers/replication/gateway.py).
    batches_applied = models.PositiveBigIntegerField(default=0)
    messages_applied = models.PositiveBigIntegerField(default=0)
    bytes_applied = models.PositiveBigIntegerField(default=0)  # logical: keys, values, headers
    errors = models.PositiveBigIntegerField(default=0)
    created = models.DateTimeField(auto_now_add=True)

    objects = GatewayQuerySet.as_manager()

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
            raise NotFound(f"stream {path} does not exist", field=field, hint=Hint(
                "stream.create", f"check the {field}, or create the stream", {"path": path},
                cli=f"check -{field}, or create it with {{command}}"))
        return stream


class Stream(titled("path")):
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
    # Log compaction (MapR-ES 6.1's -compact, -mincompactionlag, -deleteretention; issue 31),
    # for every topic of the stream; Kafka's topic configs map onto these.
    compact = models.BooleanField(default=False)
    mincompactionlag = models.PositiveBigIntegerField(
        default=0, help_text="ms a message stays uncompacted")
    deleteretention = models.PositiveBigIntegerField(
        default=86_400_000, help_text="ms a tombstone is kept once compaction reaches it")
    mincleanabledirtyratio = models.FloatField(
        default=0.5, help_text="share of a partition not yet compacted before a pass runs")
    produceperm = models.TextField()
    consumeperm = models.TextField()
    topicperm = models.TextField()
    copyperm = models.TextField()
    adminperm = models.TextField()
    # Why producers are refused here ("" while they are not): a stream a failover moved its
    # producers away from (replication/services/failover.py), so none writes to both sides.
    producers_stopped = models.TextField(blank=True)
    created = models.DateTimeField(auto_now_add=True)
    modified = models.DateTimeField(auto_now=True)

    objects = StreamQuerySet.as_manager()

    @property
    def cleanuppolicy(self) -> str:
        """Kafka's cleanup.policy of the stream's topics without their own."""
        if not self.compact:
            return CleanupPolicy.DELETE
        return CleanupPolicy.COMPACT_DELETE if self.ttl else CleanupPolicy.COMPACT

    def identity_of(self, user: AbstractBaseUser) -> ace.Identity:
        roles = Membership.objects.filter(user=user, tenant_id=self.tenant_id).values_list(
            "role", flat=True
        )
        groups = user.groups.values_list("name", flat=True)
        return ace.Identity(user.get_username(), frozenset(groups), frozenset(roles))

    def allows(self, user: AbstractBaseUser, perm: str) -> bool:
        return bool(scope_mask(user, frozenset({perm}))) and ace.allows(
            getattr(self, perm), self.identity_of(user))

    def perms_of(self, user: AbstractBaseUser) -> frozenset[str]:
        """The permissions `user` holds on this stream (one identity lookup for all five),
        less those the scope of the API token they signed in with does not cover."""
        who = self.identity_of(user)
        return scope_mask(user, frozenset(
            perm for perm in PERMISSIONS if ace.allows(getattr(self, perm), who)))

    def require(self, user: AbstractBaseUser, *perms: str, action: str) -> None:
        """Pass when the user holds any one of `perms` on this stream, and the scope of the API
        token they signed in with (if any) covers it: every interface's check comes here."""
        scope_require_perms(user, perms, action=f"{action} on {self.path}")
        who = self.identity_of(user)
        if not any(ace.allows(getattr(self, perm), who) for perm in perms):
            needed = " or ".join(perms)
            raise PermissionDenied(
                f"{user.get_username()} may not {action} on {self.path}: it needs {needed}; "
                f"ask the stream's administrator to add you to the {perms[0]} ACE"
            )


class TopicQuerySet(RestrictedQuerySet):
    tenant_paths = ("stream__tenant",)


class Topic(named_within("stream", "path", shown="{self.stream.path}:{self.name}")):
    stream = models.ForeignKey(Stream, on_delete=models.CASCADE, related_name="topics")
    name = models.CharField(max_length=249)
    partitions = models.PositiveIntegerField(default=1)
    timestamptype = models.CharField(
        max_length=16, choices=TimestampType.choices, default=TimestampType.CREATETIME
    )
    # The stream where the topic was first created (DESIGN.md invariant 4: one origin per topic).
    origin_uuid = models.UUIDField()
    created = models.DateTimeField(auto_now_add=True)
    # Per-topic compaction (issue 31): Kafka applications create compacted changelog topics
    # beside delete-policy topics in one stream. Empty/null: the stream's setting.
    cleanuppolicy = models.CharField(max_length=16, blank=True, default="",
                                     choices=CleanupPolicy.choices)
    mincompactionlag = models.PositiveBigIntegerField(null=True, blank=True)
    deleteretention = models.PositiveBigIntegerField(null=True, blank=True)
    mincleanabledirtyratio = models.FloatField(null=True, blank=True)
    # Kafka's flush.ms and flush.messages as set (null: not set). The store commits every write
    # before acknowledging it, so any value is more than honoured (services/topicflush.py).
    flushms = models.PositiveBigIntegerField(null=True, blank=True)
    flushmessages = models.PositiveBigIntegerField(null=True, blank=True)

    objects = TopicQuerySet.as_manager()

    @property
    def policy(self) -> str:
        """Kafka's cleanup.policy in force: the topic's override, else the stream's."""
        return self.cleanuppolicy or self.stream.cleanuppolicy

    @property
    def compacted(self) -> bool:
        return "compact" in self.policy

    @property
    def expires(self) -> bool:
        """Whether the stream's ttl deletes this topic's messages: not a compact-only topic's
        (Kafka's cleanup.policy=compact keeps records until compaction removes them)."""
        return self.policy != CleanupPolicy.COMPACT

    def compaction(self) -> tuple[int, int, float]:
        """(min lag ms, delete retention ms, min dirty ratio): the topic's, else the stream's."""
        values = (self.mincompactionlag, self.deleteretention, self.mincleanabledirtyratio)
        inherited = (self.stream.mincompactionlag, self.stream.deleteretention,
                     self.stream.mincleanabledirtyratio)
        return tuple(i if v is None else v  # type: ignore[return-value]
                     for v, i in zip(values, inherited, strict=True))

    @property
    def is_origin(self) -> bool:
        return self.origin_uuid == self.stream.uuid
