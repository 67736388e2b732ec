"""/api/v1/streams/<uuid>/failovers/: a replica taking over from its source (issue 16). POST
fails over (`stream replica failover`); GET lists the stream's past failovers."""

from __future__ import annotations

from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import serializers, status
from rest_framework.decorators import action
from rest_framework.mixins import ListModelMixin
from rest_framework.request import Request
from rest_framework.response import Response

from portal.api.viewsets import StreamChildViewSet
from replication import services
from replication.models import Failover


class FailoverRequestSerializer(serializers.Serializer):
    source = serializers.CharField(
        required=False, help_text="the source to take over from, a MapR path; needed only when "
        "the replica has several")
    force = serializers.BooleanField(
        default=False, help_text="switch at once, even with the source unreachable, without "
        "draining; what the replica lacks is recorded and raised as an alarm")


class FailbackRequestSerializer(serializers.Serializer):
    source = serializers.CharField(help_text="the old source: the stream the failover left")
    dryrun = serializers.BooleanField(default=False, help_text="report, change nothing")
    reverse = serializers.BooleanField(
        default=False, help_text="leave the old source a replica of this stream")


class FailoverSerializer(serializers.ModelSerializer):
    replica = serializers.CharField(source="replica.path", read_only=True)

    class Meta:
        model = Failover
        fields = ["id", "replica", "source_path", "at", "forced", "source_reachable", "topics",
                  "missing_messages", "missing_ms", "missing_from", "partitions", "ended_links",
                  "failed_back_at", "failback"]
        read_only_fields = fields


@extend_schema_view(create=extend_schema(request=FailoverRequestSerializer,
                                         responses={201: FailoverSerializer}),
                    failback=extend_schema(request=FailbackRequestSerializer,
                                           responses={200: OpenApiTypes.OBJECT}))
class FailoverViewSet(ListModelMixin, StreamChildViewSet):
    """The failovers of a stream, newest first (the list is their record: no detail route);
    POST makes the stream (a replica) the origin
    of the topics it carried."""

    queryset = Failover.objects.select_related("replica")
    serializer_class = FailoverSerializer
    parent_field = "replica"

    def get_queryset(self) -> QuerySet:
        return super().get_queryset().order_by("-at", "-pk")

    def create(self, request: Request, stream_uuid: str) -> Response:
        data = self.validated(FailoverRequestSerializer)
        source = (self.scoped_stream(data["source"], field="source") if data.get("source")
                  else None)
        failover = services.replica_failover(replica=self.parent, source=source,
                                             force=data["force"], actor=request.user)
        return self.respond(failover, status.HTTP_201_CREATED)

    @action(detail=False, methods=["post"])
    def failback(self, request: Request, stream_uuid: str) -> Response:
        """Bring back the old source this stream took over from (`stream replica failback`):
        the report per partition; with dryrun, nothing changes."""
        data = self.validated(FailbackRequestSerializer)
        source = self.scoped_stream(data["source"], field="source")
        report = services.replica_failback(source=source, replica=self.parent,
                                           dryrun=data["dryrun"], reverse=data["reverse"],
                                           actor=request.user)
        return Response(report)
