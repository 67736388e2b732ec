"""/api/v1/alarms/ and /api/v1/audit/: read-only, through the tenant-scoping choke point.

Alarms of a replica link show to the tenants of both its ends, alarms of a cluster to the
tenants with streams on it; audit events to the tenants of the changed object; operators see
everything (operations/models.py).
"""

from __future__ import annotations

from typing import Any

from django.db.models import Q, QuerySet
from django_filters import rest_framework as filters
from rest_framework import serializers

from operations.audit import hide_aces
from operations.models import Alarm, AlarmKind, AuditAction, AuditEvent, Interface
from portal.api.viewsets import ReadOnlyViewSet

# --- serializers -----------------------------------------------------------------------------


class AlarmSerializer(serializers.ModelSerializer):
    alarm_type = serializers.CharField(read_only=True, help_text="STREAM or CLUSTER")
    open = serializers.BooleanField(source="is_open", read_only=True)

    class Meta:
        model = Alarm
        fields = ("id", "kind", "alarm_type", "entity", "description", "open", "raised",
                  "last_seen", "cleared")
        read_only_fields = fields


class AuditEventSerializer(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor_name", read_only=True,
                                  help_text="username; empty for the system")
    tenant = serializers.CharField(source="tenant_name", read_only=True)
    object = serializers.CharField(source="object_repr", read_only=True,
                                   help_text="a path, '<source> -> <replica>', a cluster name")
    before = serializers.JSONField(read_only=True, help_text="the changed fields before")
    after = serializers.JSONField(read_only=True, help_text="the changed fields after")

    class Meta:
        model = AuditEvent
        fields = ("id", "at", "actor", "interface", "request_id", "tenant", "object_type",
                  "object_id", "object", "action", "before", "after")
        read_only_fields = fields


# --- filters ---------------------------------------------------------------------------------


class AlarmFilter(filters.FilterSet):
    kind = filters.ChoiceFilter(choices=AlarmKind.choices)
    open = filters.BooleanFilter(field_name="cleared", lookup_expr="isnull",
                                 help_text="true: raised now; false: cleared")
    stream = filters.CharFilter(method="filter_stream",
                                help_text="alarms of links from or to this stream path")
    cluster = filters.CharFilter(method="filter_cluster",
                                 help_text="alarms of this cluster and of links into it")

    class Meta:
        model = Alarm
        fields = ("kind", "open", "stream", "cluster")

    def filter_stream(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        return queryset.filter(Q(link__source__path=value) | Q(link__replica__path=value))

    def filter_cluster(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        return queryset.filter(Q(cluster__name=value) | Q(link__replica__cluster__name=value))


class AuditEventFilter(filters.FilterSet):
    action = filters.ChoiceFilter(choices=AuditAction.choices)
    interface = filters.ChoiceFilter(choices=Interface.choices)
    actor = filters.CharFilter(field_name="actor_name", help_text="username")
    since = filters.IsoDateTimeFilter(field_name="at", lookup_expr="gte")
    until = filters.IsoDateTimeFilter(field_name="at", lookup_expr="lt")

    class Meta:
        model = AuditEvent
        fields = ("object_type", "object_id", "action", "interface", "actor", "since", "until")


# --- views -----------------------------------------------------------------------------------


class AlarmViewSet(ReadOnlyViewSet):
    """Alarms the engine raised and cleared (`alarm list`); `?open=true` for the current ones."""

    queryset = Alarm.objects.select_related("cluster")
    serializer_class = AlarmSerializer
    filterset_class = AlarmFilter
    lookup_url_kwarg = "alarm_id"


class AuditEventViewSet(ReadOnlyViewSet):
    """Control-plane changes: who, tenant, what, before/after, when, through which interface."""

    queryset = AuditEvent.objects.all()
    serializer_class = AuditEventSerializer
    filterset_class = AuditEventFilter
    lookup_url_kwarg = "event_id"

    def get_serializer(self, *args: Any, **kwargs: Any) -> serializers.Serializer:
        # A stream's ACEs only to its administrators, as `stream info` (operations/audit.py).
        if args and isinstance(args[0], AuditEvent):
            args = (hide_aces([args[0]], self.request.user)[0], *args[1:])
        elif args:
            args = (hide_aces(args[0], self.request.user), *args[1:])
        return super().get_serializer(*args, **kwargs)
