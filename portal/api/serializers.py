"""Serializers: output shapes, and input types for the services.

Input serializers only convert types and report DRF-style field errors; the domain rules
(ranges, ACE syntax, topology, permissions) stay in `replication.services`, so the API, the
/rest facade and the CLI refuse the same things with the same words.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from rest_framework import serializers

from accounts.models import Membership, Tenant
from replication import ace
from replication.figures import LinkStatus, epoch_ms, link_statuses
from replication.models import (
    PERMISSIONS,
    CleanupPolicy,
    Cluster,
    Compression,
    Gateway,
    ReplicaLink,
    ReplicaState,
    Stream,
    TimestampType,
    Topic,
    Upstream,
)
from replication.services.compaction import compaction_summary
from replication.services.topiccompaction import INHERIT_POLICY

METADATA_FIELDS = ("defaultpartitions", "ttl", "compression", "autocreate",
                   "defaulttimestamptype", "compact", "mincompactionlag", "deleteretention",
                   "mincleanabledirtyratio")


class StreamAccess:
    """Who the user is in each tenant, loaded once per request.

    Mirrors `Stream.identity_of`, which costs two queries per stream: deciding per row whether
    to show a list's ACEs must not cost queries per row.
    """

    def __init__(self, user: AbstractBaseUser | AnonymousUser) -> None:
        self.user = user
        self._identities: dict[int, ace.Identity] | None = None

    def identity(self, tenant_id: int) -> ace.Identity:
        if self._identities is None:
            self._identities = self._load()
        return self._identities.get(tenant_id) or ace.Identity(self.user.get_username(),
                                                               self._groups)

    def _load(self) -> dict[int, ace.Identity]:
        self._groups = frozenset(self.user.groups.values_list("name", flat=True))
        roles: dict[int, set[str]] = {}
        for tenant_id, role in Membership.objects.filter(user=self.user).values_list(
            "tenant_id", "role"
        ):
            roles.setdefault(tenant_id, set()).add(role)
        name = self.user.get_username()
        return {t: ace.Identity(name, self._groups, frozenset(r)) for t, r in roles.items()}

    def is_admin(self, stream: Stream) -> bool:
        if not self.user.is_authenticated:
            return False
        return ace.allows(stream.adminperm, self.identity(stream.tenant_id))


class StrictSerializer(serializers.Serializer):
    """Refuses fields it does not know: a misspelt option silently ignored would be an option
    accepted without effect (DESIGN.md invariant 8)."""

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if isinstance(data, Mapping):
            writable = sorted(n for n, f in self.fields.items() if not f.read_only)
            unknown = sorted(set(data) - set(writable))
            if unknown:
                allowed = ", ".join(writable)
                raise serializers.ValidationError(
                    {name: [f"unknown field here; the fields are: {allowed}"] for name in unknown}
                )
        return super().to_internal_value(data)


# --- tenants, clusters, gateways ---------------------------------------------------------


class TenantSerializer(serializers.ModelSerializer):
    role = serializers.CharField(read_only=True, allow_null=True,
                                 help_text="your role in the tenant; null for operators")
    plan = serializers.SlugRelatedField(
        slug_field="name", read_only=True,
        help_text="the plan an operator assigned (limits and default quotas); null: none")

    class Meta:
        model = Tenant
        fields = ["id", "name", "role", "plan", "produce_bytes_rate", "fetch_bytes_rate",
                  "request_rate"]
        read_only_fields = fields
        extra_kwargs = {
            "produce_bytes_rate": {"help_text": "quota: bytes a second produced into the "
                                                "tenant's streams per process; null: no limit"},
            "fetch_bytes_rate": {"help_text": "quota: bytes a second fetched; null: no limit"},
            "request_rate": {"help_text": "quota: requests a second its members send; null: "
                                          "no limit"},
        }


class TenantQuotaSerializer(serializers.Serializer):
    """What an operator sets: a rate a second, 0 to remove a limit, left out to keep it."""

    produce_bytes_rate = serializers.IntegerField(min_value=0, required=False)
    fetch_bytes_rate = serializers.IntegerField(min_value=0, required=False)
    request_rate = serializers.IntegerField(min_value=0, required=False)


class GatewayBriefSerializer(serializers.ModelSerializer):
    status = serializers.ChoiceField(choices=Gateway.Status.choices, read_only=True)

    class Meta:
        model = Gateway
        fields = ["name", "address", "enabled", "status", "last_heartbeat"]


class GatewaySerializer(GatewayBriefSerializer):
    cluster = serializers.CharField(source="cluster.name", read_only=True)

    class Meta(GatewayBriefSerializer.Meta):
        fields = ["id", "cluster", *GatewayBriefSerializer.Meta.fields]


class ClusterSerializer(serializers.ModelSerializer):
    gateways = GatewayBriefSerializer(many=True, read_only=True)

    class Meta:
        model = Cluster
        fields = ["name", "state", "created", "required_copies", "gateways"]


class ClusterCreateSerializer(StrictSerializer):
    name = serializers.CharField()
    store_url = serializers.CharField(required=False, allow_blank=True, max_length=1024,
                                      help_text="the cluster's message store; empty for the "
                                                "default of the mode")
    required_copies = serializers.IntegerField(
        required=False, min_value=1, max_value=9,
        help_text="servers every acknowledged produce is on; refused where the store's group "
                  "has fewer members")


class GatewaySetSerializer(StrictSerializer):
    gateways = serializers.CharField(allow_blank=True,
                                     help_text='host or host:port names separated by spaces, '
                                               'e.g. "gw1 gw2:7660"; replaces the list')


class StoreGroupAddSerializer(StrictSerializer):
    name = serializers.CharField(help_text="the new group's name (lowercase, e.g. s2)")
    url = serializers.CharField(max_length=1024,
                                help_text="its message store: postgresql://user@host:port/db")


class RebalanceStartSerializer(StrictSerializer):
    kind = serializers.ChoiceField(choices=["rebalance", "drain"], default="rebalance")
    group = serializers.CharField(required=False, help_text="drain: the group to empty")
    dryrun = serializers.BooleanField(default=False, help_text="the plan only, nothing moved")
    throttle = serializers.IntegerField(required=False, min_value=1,
                                        help_text="at most this many bytes moved per second")

    def validate(self, data: dict) -> dict:
        if data["kind"] == "drain" and not data.get("group"):
            raise serializers.ValidationError({"group": "a drain needs the group to empty"})
        if data["kind"] == "rebalance" and data.get("group"):
            raise serializers.ValidationError({"group": "a rebalance moves over every group: "
                                                        "leave group out, or use kind drain"})
        return data


class PartitionMoveSerializer(StrictSerializer):
    partition = serializers.IntegerField(min_value=0, help_text="the partition to move")
    to = serializers.CharField(help_text="the store group to move it to")
    throttle = serializers.IntegerField(required=False, min_value=1,
                                        help_text="at most this many bytes copied per second")


class RebalanceSerializer(serializers.Serializer):
    """A rebalance, drain or partition move: its plan and progress (`cluster store
    rebalancestatus`)."""

    id = serializers.IntegerField(allow_null=True, help_text="null for a dry run's plan")
    cluster = serializers.CharField(required=False)
    kind = serializers.CharField(help_text="rebalance, drain or move (one partition)")
    group = serializers.CharField(allow_null=True, required=False)
    state = serializers.CharField(help_text="PLANNED (dry run), QUEUED, RUNNING, SUCCEEDED, "
                                            "FAILED")
    movesTotal = serializers.IntegerField(required=False)  # the CLI's names
    movesDone = serializers.IntegerField(required=False)
    bytesTotal = serializers.IntegerField()
    bytesDone = serializers.IntegerField(required=False)
    percent = serializers.IntegerField(required=False)
    error = serializers.CharField(required=False, allow_blank=True)
    moves = serializers.ListField(child=serializers.DictField(), help_text=(
        "the plan, in order: {path, stream, topic, partition, from, to, bytes}, with "
        "messagesCopied and seconds once moved"))
    result = serializers.DictField(allow_null=True, required=False, help_text=(
        "a partition move once it succeeded: {partition, from, to, messagesCopied, seconds, "
        "id}"))


class StoreGroupSerializer(serializers.Serializer):
    """A row of `cluster store list` (read-only)."""

    name = serializers.CharField()
    url = serializers.CharField(help_text="without its password")
    state = serializers.CharField()
    partitions = serializers.IntegerField()
    bytes = serializers.IntegerField(allow_null=True)
    messages = serializers.IntegerField(allow_null=True)
    msgpersec = serializers.FloatField(allow_null=True, help_text=(
        "messages written per second, averaged since the last sample (up to 10 s old); null "
        "until the group was looked at twice"))
    health = serializers.CharField()


# --- streams ------------------------------------------------------------------------------


def _ace_field(perm: str) -> serializers.CharField:
    # Not read-only, so the schema marks it optional: it is absent for non-administrators.
    return serializers.CharField(required=False, help_text=f"{perm} ACE; shown to stream "
                                                           "administrators only")


class StreamSerializer(serializers.ModelSerializer):
    cluster = serializers.CharField(source="cluster.name", read_only=True)
    tenant = serializers.CharField(source="tenant.name", read_only=True)
    numtopics = serializers.IntegerField(read_only=True)
    produceperm = _ace_field("produceperm")
    consumeperm = _ace_field("consumeperm")
    topicperm = _ace_field("topicperm")
    copyperm = _ace_field("copyperm")
    adminperm = _ace_field("adminperm")
    compaction = serializers.SerializerMethodField(
        help_text="what log compaction did (partitions, passes, messagesremoved, "
                  "bytesreclaimed, lastrun in ms) and the passes running now (running: "
                  "topic, partition, percent done); on a single "
                  "stream's page, null when none of its topics is compacted")

    class Meta:
        model = Stream
        fields = ["uuid", "path", "cluster", "tenant", "created", "numtopics",
                  *METADATA_FIELDS, *PERMISSIONS, "compaction"]
        read_only_fields = ["created", *METADATA_FIELDS]

    def get_compaction(self, instance: Stream) -> dict[str, Any] | None:
        view = self.context.get("view")
        if getattr(view, "action", None) != "retrieve":
            return None  # a list would ask every stream's store
        return compaction_summary(instance)

    def to_representation(self, instance: Stream) -> dict[str, Any]:
        data = super().to_representation(instance)
        access: StreamAccess | None = self.context.get("access")
        # MapR shows a stream's ACEs to its administrators only.
        if access is None or not access.is_admin(instance):
            for perm in PERMISSIONS:
                data.pop(perm, None)
        return data


class StreamMetadataSerializer(StrictSerializer):
    defaultpartitions = serializers.IntegerField(required=False)
    # The bound is the column's (bigint), so a huge number is a 400, not a database error.
    ttl = serializers.IntegerField(required=False, max_value=2**63 - 1,
                                   help_text="seconds; 0 keeps forever")
    compression = serializers.ChoiceField(choices=Compression.choices, required=False)
    autocreate = serializers.BooleanField(required=False)
    defaulttimestamptype = serializers.ChoiceField(choices=TimestampType.choices,
                                                   required=False)
    compact = serializers.BooleanField(required=False, help_text="log compaction")
    mincompactionlag = serializers.IntegerField(required=False, min_value=0,
                                                max_value=2**63 - 1, help_text="ms")
    deleteretention = serializers.IntegerField(required=False, min_value=0,
                                               max_value=2**63 - 1, help_text="ms")
    mincleanabledirtyratio = serializers.FloatField(required=False, min_value=0, max_value=1)
    produceperm = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False)
    consumeperm = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False)
    topicperm = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False)
    copyperm = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False)
    adminperm = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False)


class StreamCreateSerializer(StreamMetadataSerializer):
    path = serializers.CharField(help_text="/mapr/<cluster>/<stream>")
    tenant = serializers.CharField(required=False,
                                   help_text="needed only when you belong to several tenants")
    copymetafrom = serializers.CharField(required=False,
                                         help_text="path of a stream whose metadata and ACEs "
                                                   "to copy")


# --- topics -------------------------------------------------------------------------------


class TopicSerializer(serializers.ModelSerializer):
    stream = serializers.CharField(source="stream.path", read_only=True)
    origin = serializers.CharField(source="origin_path", read_only=True, allow_null=True,
                                   help_text="path of the stream where the topic was created")
    is_origin = serializers.BooleanField(read_only=True)
    policy = serializers.CharField(read_only=True, help_text=(
        "Kafka's cleanup.policy in force: the topic's cleanuppolicy, else the stream's"))
    cleanuppolicy = serializers.CharField(read_only=True, help_text=(
        "the topic's own cleanup.policy; empty: the stream's -compact"))

    class Meta:
        model = Topic
        fields = ["name", "stream", "partitions", "timestamptype", "created", "origin",
                  "origin_uuid", "is_origin", "policy", "cleanuppolicy", "mincompactionlag",
                  "deleteretention", "mincleanabledirtyratio"]
        read_only_fields = fields


class PartitionTxnsSerializer(serializers.Serializer):
    """A partition's last stable offset and open Kafka transactions."""

    partition = serializers.IntegerField()
    last_stable_offset = serializers.IntegerField()
    open_transactions = serializers.SerializerMethodField()

    def get_open_transactions(self, found: Any) -> list[dict[str, Any]]:
        return [{"producer_id": pid, "first_offset": first, "transactional_id": name}
                for pid, first, name in found.open]


class TopicEditSerializer(StrictSerializer):
    partitions = serializers.IntegerField(required=False)
    timestamptype = serializers.ChoiceField(choices=TimestampType.choices, required=False)
    # Per-topic compaction: "stream" and -1 go back to the stream's setting.
    cleanuppolicy = serializers.ChoiceField(
        choices=[*CleanupPolicy.values, INHERIT_POLICY], required=False)
    mincompactionlag = serializers.IntegerField(required=False, min_value=-1)
    deleteretention = serializers.IntegerField(required=False, min_value=-1)
    mincleanabledirtyratio = serializers.FloatField(required=False, min_value=-1, max_value=1)


class TopicCreateSerializer(TopicEditSerializer):
    name = serializers.CharField(trim_whitespace=False)


# --- replicas and upstreams ---------------------------------------------------------------


class EpochMillisField(serializers.IntegerField):
    """A moment as milliseconds since the epoch."""

    def to_representation(self, value: datetime) -> int | None:
        return epoch_ms(value)


class ReplicaLinkSerializer(serializers.ModelSerializer):
    """One row of `stream replica list`, with MapR's field names and the same live figures
    (backlog, lag, stalled, copy progress, sync mode) as /rest and the command line."""

    sourcePath = serializers.CharField(source="source.path", read_only=True)
    replicaPath = serializers.CharField(source="replica.path", read_only=True)
    uuid = serializers.UUIDField(source="replica.uuid", read_only=True,
                                 help_text="the replica stream's uuid")
    replicaState = serializers.ChoiceField(source="live.state", read_only=True,
                                           choices=ReplicaState.choices)
    isUptodate = serializers.BooleanField(source="live.up_to_date", read_only=True)
    messagesPending = serializers.IntegerField(source="live.pending.messages", read_only=True)
    bytesPending = serializers.IntegerField(source="live.pending.bytes", read_only=True)
    minPendingTS = serializers.IntegerField(source="live.pending.min_ts", read_only=True,
                                            allow_null=True)
    maxPendingTS = serializers.IntegerField(source="live.pending.max_ts", read_only=True,
                                            allow_null=True)
    timeLag = serializers.FloatField(source="live.time_lag", read_only=True,
                                     help_text="seconds: the oldest unreplicated message's age")
    stalled = serializers.BooleanField(source="live.stalled", read_only=True)
    copyTableCompletionPercentage = serializers.IntegerField(
        source="live.copy_percentage", read_only=True)
    mode = serializers.CharField(read_only=True,
                                 help_text="sync or async: what the link does now")
    modeSince = EpochMillisField(source="mode_since", read_only=True, allow_null=True)
    modeReason = serializers.CharField(source="mode_reason", read_only=True)
    errors = serializers.ListField(source="live.errors", child=serializers.CharField(),
                                   read_only=True)

    class Meta:
        model = ReplicaLink
        fields = ["sourcePath", "replicaPath", "replicaState", "paused", "throttle", "idx",
                  "networkencryption", "synchronous", "networkcompression", "isUptodate",
                  "messagesPending", "bytesPending", "minPendingTS", "maxPendingTS",
                  "timeLag", "stalled", "copyTableCompletionPercentage", "mode", "modeSince",
                  "modeReason", "uuid", "errors"]
        read_only_fields = fields

    def to_representation(self, link: ReplicaLink) -> dict[str, Any]:
        link.live = self._live(link)
        return super().to_representation(link)

    def _live(self, link: ReplicaLink) -> LinkStatus:
        """The link's status, for the whole page at once: the stores are asked once per page,
        not once per link."""
        statuses = self.context.setdefault("link_statuses", {})
        if link.pk not in statuses:
            statuses.update(link_statuses(getattr(self.parent, "instance", None) or [link]))
        return statuses[link.pk]


class ReplicaOptionsSerializer(StrictSerializer):
    throttle = serializers.BooleanField(required=False)
    synchronous = serializers.BooleanField(required=False)
    networkcompression = serializers.ChoiceField(choices=Compression.choices, required=False)
    networkencryption = serializers.BooleanField(required=False)


class ReplicaEditSerializer(ReplicaOptionsSerializer):
    # Accepted so the service can say why it is refused, rather than "unknown field".
    newreplica = serializers.CharField(required=False)


class ReplicaAddSerializer(ReplicaOptionsSerializer):
    replica = serializers.CharField(help_text="path of the replica stream")
    paused = serializers.BooleanField(default=False)


class ReplicaAutosetupSerializer(ReplicaOptionsSerializer):
    replica = serializers.CharField(help_text="path of the replica stream to create")
    multimaster = serializers.BooleanField(default=False)
    tenant = serializers.CharField(required=False,
                                   help_text="the new replica's tenant, when you have several")


class UpstreamSerializer(serializers.ModelSerializer):
    upstreamPath = serializers.CharField(source="source.path", read_only=True)
    uuid = serializers.UUIDField(source="source.uuid", read_only=True,
                                 help_text="the upstream (source) stream's uuid")

    class Meta:
        model = Upstream
        fields = ["upstreamPath", "uuid", "idx", "created"]
        read_only_fields = fields


class UpstreamAddSerializer(StrictSerializer):
    upstream = serializers.CharField(help_text="path of the source stream")


# --- auth ---------------------------------------------------------------------------------


class TokenSerializer(serializers.Serializer):
    token = serializers.CharField(help_text='send as "Authorization: Token <token>"')
    expiry = serializers.DateTimeField(allow_null=True)
