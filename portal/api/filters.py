"""Filtersets for the API's lists (django-filter)."""

from __future__ import annotations

from django.db.models import Q, QuerySet
from django.utils import timezone
from django_filters import rest_framework as filters

from replication.models import (
    GATEWAY_HEARTBEAT_TIMEOUT,
    Gateway,
    ReplicaLink,
    Stream,
)
from replication.paths import parse_stream_path


def gateway_status_q(status: str) -> Q:
    """`Gateway.status` as a condition, so a list can filter on it in SQL."""
    stale = timezone.now() - GATEWAY_HEARTBEAT_TIMEOUT
    return {
        Gateway.Status.DISABLED: Q(enabled=False),
        Gateway.Status.UNKNOWN: Q(enabled=True, last_heartbeat__isnull=True),
        Gateway.Status.DOWN: Q(enabled=True, last_heartbeat__lt=stale),
        Gateway.Status.UP: Q(enabled=True, last_heartbeat__gte=stale),
    }[Gateway.Status(status)]


class StreamFilter(filters.FilterSet):
    path = filters.CharFilter(method="filter_path", help_text="exact stream path")
    cluster = filters.CharFilter(field_name="cluster__name", help_text="cluster name")
    tenant = filters.CharFilter(field_name="tenant__name", help_text="tenant name")

    class Meta:
        model = Stream
        fields = {"path": ["startswith"]}

    def filter_path(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        return queryset.filter(path=str(parse_stream_path(value, field=name)))


class GatewayFilter(filters.FilterSet):
    cluster = filters.CharFilter(field_name="cluster__name", help_text="cluster name")
    status = filters.ChoiceFilter(choices=Gateway.Status.choices, method="filter_status")

    class Meta:
        model = Gateway
        fields = ["cluster", "status"]

    def filter_status(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        return queryset.filter(gateway_status_q(value))


class ReplicaLinkFilter(filters.FilterSet):
    waiting_for_upstream = filters.BooleanFilter(
        method="filter_waiting",
        help_text="true: links registered at the source whose replica has not yet declared "
                  "the source as upstream (awaiting the replica owner's approval)",
    )
    source = filters.CharFilter(method="filter_path", help_text="source stream path")
    replica = filters.CharFilter(method="filter_path", help_text="replica stream path")

    class Meta:
        model = ReplicaLink
        fields = ["waiting_for_upstream", "source", "replica"]

    def filter_waiting(self, queryset: QuerySet, name: str, value: bool) -> QuerySet:
        return queryset.filter(is_agreed=not value)

    def filter_path(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        # Normalised as everywhere else (`mapr/sf/a` is `/mapr/sf/a`); a malformed path is a
        # 400 that says why, not an empty list.
        path = str(parse_stream_path(value, field=name))
        return queryset.filter(**{f"{name}__path": path})
