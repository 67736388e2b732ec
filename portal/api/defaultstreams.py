"""/api/v1/defaultstreams/: where plain Kafka topic names live, per tenant and cluster, and
each user's own override (replication/services/defaultstreams.py)."""

from __future__ import annotations

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import serializers, status
from rest_framework.mixins import ListModelMixin
from rest_framework.request import Request
from rest_framework.response import Response

from portal.api.viewsets import TenantScopedViewSet
from replication.models import DefaultStream
from replication.services.defaultstreams import default_stream_remove, default_stream_set


class DefaultStreamSerializer(serializers.ModelSerializer):
    tenant = serializers.CharField(source="tenant.name", read_only=True)
    cluster = serializers.CharField(source="cluster.name", read_only=True)
    scope = serializers.SerializerMethodField()
    user = serializers.CharField(source="user.username", read_only=True, allow_null=True)

    class Meta:
        model = DefaultStream
        fields = ["id", "tenant", "cluster", "scope", "user", "path", "modified"]

    def get_scope(self, setting: DefaultStream) -> str:
        return "user" if setting.user_id else "tenant"


class DefaultStreamSetSerializer(serializers.Serializer):
    cluster = serializers.CharField(help_text="the cluster whose plain Kafka names it serves")
    path = serializers.CharField(help_text="the stream, e.g. /mapr/sanfrancisco/kafka; created "
                                           "on first use with the tenant's ACEs")
    tenant = serializers.CharField(required=False, allow_blank=True,
                                   help_text="needed only by members of several tenants")
    scope = serializers.ChoiceField(choices=["tenant", "user"], default="tenant",
                                    help_text="tenant: for the tenant; user: your own override")


@extend_schema_view(create=extend_schema(request=DefaultStreamSetSerializer,
                                         responses={201: DefaultStreamSerializer}),
                    destroy=extend_schema(responses={204: OpenApiResponse(description="done")}))
class DefaultStreamViewSet(ListModelMixin, TenantScopedViewSet):
    """Default streams for plain Kafka topic names: the tenant's, and your own overrides."""

    queryset = DefaultStream.objects.select_related("tenant", "cluster", "user")
    serializer_class = DefaultStreamSerializer
    lookup_value_converter = "int"

    def get_queryset(self) -> QuerySet:
        queryset = super().get_queryset()
        if self.request.user.is_staff:
            return queryset
        return queryset.filter(user__isnull=True) | queryset.filter(user=self.request.user)

    def create(self, request: Request) -> Response:
        data = self.validated(DefaultStreamSetSerializer)
        setting = default_stream_set(actor=request.user, cluster=data["cluster"],
                                     path=data["path"], tenant=data.get("tenant") or None,
                                     personal=data["scope"] == "user")
        return self.respond(setting, status.HTTP_201_CREATED)

    def destroy(self, request: Request, pk: int) -> Response:
        setting = self.get_object()
        default_stream_remove(actor=request.user, cluster=setting.cluster.name,
                              tenant=setting.tenant.name, personal=setting.user_id is not None)
        return Response(status=status.HTTP_204_NO_CONTENT)
