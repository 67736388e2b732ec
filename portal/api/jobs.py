"""/api/v1/jobs/: the bulk jobs (copystream, diffstreams, catch-up) of your tenants, and
POST /api/v1/jobs/copystream/ and /diffstreams/ to start one (202 with the job; follow its
progress at /api/v1/jobs/<id>/ or on the browser's jobs page)."""

from __future__ import annotations

from django_filters import rest_framework as filters
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from portal.api.viewsets import ReadOnlyViewSet
from replication.models import Job
from replication.services.jobs import MAX_THREADS, copystream_start, diffstreams_start


class JobSerializer(serializers.ModelSerializer):
    percent = serializers.IntegerField(read_only=True, help_text="0-100; 100 once succeeded")
    requested_by = serializers.SerializerMethodField(help_text="username; 'engine' for a "
                                                               "catch-up the engine started")

    class Meta:
        model = Job
        fields = ("id", "kind", "state", "source_path", "destination_path", "link", "percent",
                  "messages_done", "messages_total", "bytes_done", "bytes_total",
                  "requested_by", "options", "result", "error", "created", "started",
                  "finished")
        read_only_fields = fields

    def get_requested_by(self, job: Job) -> str:
        return job.requested_by.get_username() if job.requested_by else "engine"


class CopyStreamSerializer(serializers.Serializer):
    src = serializers.CharField(help_text="the source stream's path")
    dst = serializers.CharField(help_text="the destination stream's path (created with the "
                                          "source's metadata when missing)")
    numthreads = serializers.IntegerField(required=False, min_value=1, max_value=MAX_THREADS,
                                          help_text="Spark tasks running at once")


class DiffStreamsSerializer(serializers.Serializer):
    src = serializers.CharField()
    dst = serializers.CharField()
    repair = serializers.BooleanField(default=False, help_text="recopy each differing "
                                      "partition from its first difference")


class JobFilter(filters.FilterSet):
    class Meta:
        model = Job
        fields = ("kind", "state")


class JobViewSet(ReadOnlyViewSet):
    queryset = Job.objects.select_related("requested_by")
    serializer_class = JobSerializer
    filterset_class = JobFilter
    lookup_url_kwarg = "job_id"

    @extend_schema(request=CopyStreamSerializer, responses={202: JobSerializer})
    @action(detail=False, methods=["post"])
    def copystream(self, request: Request) -> Response:
        data = self.validated(CopyStreamSerializer)
        job = copystream_start(actor=request.user, source_path=data["src"],
                               destination_path=data["dst"], numthreads=data.get("numthreads"))
        return self.respond(job, status=202)

    @extend_schema(request=DiffStreamsSerializer, responses={202: JobSerializer})
    @action(detail=False, methods=["post"])
    def diffstreams(self, request: Request) -> Response:
        data = self.validated(DiffStreamsSerializer)
        job = diffstreams_start(actor=request.user, source_path=data["src"],
                                destination_path=data["dst"], repair=data["repair"])
        return self.respond(job, status=202)
