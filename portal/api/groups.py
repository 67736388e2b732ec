"""`streams/<uuid>/topics/<name>/offset-resets/`: reset a consumer group's committed offsets
on a topic (kafka-consumer-groups' --reset-offsets), through the service the portal's
Consumer groups tab uses. `dry_run` (the default, as the Kafka tool's) answers what the reset
would do and changes nothing; `dry_run: false` applies it. Refused while the group has live
members (409)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from portal.api.viewsets import StreamChildViewSet
from replication.models import Topic
from replication.services.groups import RESET_TO, group_offsets_reset


class OffsetResetSerializer(serializers.Serializer):
    group = serializers.CharField(max_length=255)
    to = serializers.ChoiceField(choices=RESET_TO)
    timestamp = serializers.IntegerField(
        min_value=0, required=False, help_text="milliseconds since the epoch, for to=timestamp")
    offset = serializers.IntegerField(min_value=0, required=False, help_text="for to=offset")
    partitions = serializers.ListField(child=serializers.IntegerField(min_value=0),
                                       required=False, help_text="default: every partition")
    dry_run = serializers.BooleanField(default=True)


class ResetRowSerializer(serializers.Serializer):
    partition = serializers.IntegerField()
    current = serializers.IntegerField(allow_null=True, help_text="committed now; null: none")
    new = serializers.IntegerField()
    high = serializers.IntegerField(help_text="the partition's end")
    lag = serializers.IntegerField(help_text="messages behind after the reset")


class OffsetResetResponseSerializer(serializers.Serializer):
    group = serializers.CharField()
    topic = serializers.CharField()
    dry_run = serializers.BooleanField()
    partitions = ResetRowSerializer(many=True)


class OffsetResetViewSet(StreamChildViewSet):
    """Reset a consumer group's offsets on a topic (consumeperm; a produce-scoped token)."""

    queryset = Topic.objects.all()
    serializer_class = OffsetResetSerializer

    @extend_schema(responses={200: OffsetResetResponseSerializer,
                              201: OffsetResetResponseSerializer})
    def create(self, request: Request, **kwargs: Any) -> Response:
        data = self.validated(OffsetResetSerializer)
        rows = group_offsets_reset(
            actor=request.user, stream=self.parent, group=data["group"], topic=kwargs["name"],
            to=data["to"], timestamp_ms=data.get("timestamp"), offset=data.get("offset"),
            partitions=data.get("partitions"), dry_run=data["dry_run"])
        body = {"group": data["group"], "topic": kwargs["name"], "dry_run": data["dry_run"],
                "partitions": ResetRowSerializer(rows, many=True).data}
        return Response(body, status=200 if data["dry_run"] else 201)
