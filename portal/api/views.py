"""The /api/v1 resources. Each view checks types, calls one service and shows the result; the
services check permissions and the domain rules, and every queryset goes through
`TenantScopedViewSet.scope` (portal/api/viewsets.py)."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from knox import views as knox_views
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.mixins import ListModelMixin, RetrieveModelMixin
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.models import Membership, Tenant
from accounts.tokens import PasswordBasicAuthentication, TokenAuthentication, issue_token
from portal.api import filters
from portal.api import serializers as s
from portal.api.errors import field_alias
from portal.api.jobs import JobSerializer
from portal.api.viewsets import ReadOnlyViewSet, StreamChildViewSet, TenantScopedViewSet
from replication import services
from replication.models import Cluster, Gateway, ReplicaLink, Stream, Topic, Upstream
from replication.services import rebalance, storegroups
from replication.services.transactions import topic_transactions

NO_CONTENT = {204: OpenApiResponse(description="done")}


# --- tenants, clusters, gateways ---------------------------------------------------------


class TenantViewSet(ReadOnlyViewSet):
    """The tenants you belong to, with your role in each."""

    queryset = Tenant.objects.all()
    serializer_class = s.TenantSerializer

    def get_queryset(self) -> QuerySet:
        role = Membership.objects.filter(tenant=OuterRef("pk"), user=self.request.user.pk)
        return super().get_queryset().select_related("plan").annotate(
            role=Subquery(role.values("role")[:1]))

    @extend_schema(request=s.TenantQuotaSerializer, responses=s.TenantSerializer)
    @action(detail=True, methods=["put"], serializer_class=s.TenantSerializer)
    def quota(self, request: Request, pk: str) -> Response:
        """Set the tenant's quotas (operators only): rates a second, 0 for no limit."""
        data = self.validated(s.TenantQuotaSerializer)
        tenant = services.tenant_quota_set(
            actor=request.user, tenant=self.get_object().name,
            produce=data.get("produce_bytes_rate"), fetch=data.get("fetch_bytes_rate"),
            requests=data.get("request_rate"))
        return self.respond(tenant)


@extend_schema_view(create=extend_schema(request=s.ClusterCreateSerializer,
                                         responses={201: s.ClusterSerializer}))
class ClusterViewSet(ReadOnlyViewSet):
    """Clusters are infrastructure: every user reads them; operators (staff) change them."""

    shared = True
    queryset = Cluster.objects.prefetch_related("gateways")
    serializer_class = s.ClusterSerializer
    lookup_field = "name"
    lookup_value_converter = "str"

    def create(self, request: Request) -> Response:
        data = self.validated(s.ClusterCreateSerializer)
        cluster = services.cluster_create(actor=request.user, **data)
        return self.respond(cluster, status.HTTP_201_CREATED)

    @extend_schema(responses=s.GatewayBriefSerializer(many=True), filters=False)
    @action(detail=True, methods=["get"], serializer_class=s.GatewayBriefSerializer,
            filter_backends=[])
    def gateways(self, request: Request, name: str) -> Response:
        cluster = self.get_object()
        page = self.paginate_queryset(self.scope(cluster.gateways.all()))
        return self.get_paginated_response(self.get_serializer(page, many=True).data)

    @extend_schema(request=s.GatewaySetSerializer, responses=s.ClusterSerializer)
    @gateways.mapping.put
    def set_gateways(self, request: Request, name: str) -> Response:
        cluster = self.get_object()
        data = self.validated(s.GatewaySetSerializer)
        services.cluster_gateway_set(actor=request.user, dstcluster=cluster.name, **data)
        return Response(s.ClusterSerializer(self.get_queryset().get(pk=cluster.pk)).data)

    @extend_schema(request=None, responses=NO_CONTENT)
    @gateways.mapping.delete
    def delete_gateways(self, request: Request, name: str) -> Response:
        cluster = self.get_object()
        services.cluster_gateway_delete(actor=request.user, dstcluster=cluster.name)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(responses=s.StoreGroupSerializer(many=True), filters=False)
    @action(detail=True, methods=["get"], filter_backends=[], pagination_class=None,
            serializer_class=s.StoreGroupSerializer)
    def stores(self, request: Request, name: str) -> Response:
        """The cluster's store groups (operators only)."""
        rows = storegroups.store_group_list(actor=request.user, cluster=self.get_object().name)
        return Response(s.StoreGroupSerializer(rows, many=True).data)

    @extend_schema(request=s.StoreGroupAddSerializer, responses=s.StoreGroupSerializer)
    @stores.mapping.post
    def add_store(self, request: Request, name: str) -> Response:
        cluster = self.get_object()
        data = self.validated(s.StoreGroupAddSerializer)
        group = storegroups.store_group_add(actor=request.user, cluster=cluster.name, **data)
        row = next(r for r in storegroups.store_group_rows(cluster) if r["name"] == group.name)
        return Response(s.StoreGroupSerializer(row).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=NO_CONTENT, filters=False)
    @action(detail=True, methods=["delete"], url_path="stores/<str:group>",
            filter_backends=[])
    def remove_store(self, request: Request, name: str, group: str) -> Response:
        storegroups.store_group_remove(actor=request.user, cluster=self.get_object().name,
                                       name=group)
        return Response(status=status.HTTP_204_NO_CONTENT)


    @extend_schema(responses=s.RebalanceSerializer(many=True), filters=False)
    @action(detail=True, methods=["get"], filter_backends=[], pagination_class=None,
            serializer_class=s.RebalanceSerializer)
    def rebalances(self, request: Request, name: str) -> Response:
        """The cluster's rebalances and drains, newest first (operators only)."""
        rows = rebalance.rebalance_status(actor=request.user, cluster=self.get_object().name)
        return Response(s.RebalanceSerializer(rows, many=True).data)

    @extend_schema(responses=s.RebalanceSerializer, filters=False)
    @action(detail=True, methods=["get"], url_path="rebalances/<int:run>", filter_backends=[],
            serializer_class=s.RebalanceSerializer)
    def rebalance(self, request: Request, name: str, run: int) -> Response:
        """One rebalance, drain or partition move: its state and percent (operators only)."""
        [row] = rebalance.rebalance_status(actor=request.user, cluster=self.get_object().name,
                                           id=run)
        return Response(s.RebalanceSerializer(row).data)

    @extend_schema(request=s.RebalanceStartSerializer, responses=s.RebalanceSerializer)
    @rebalances.mapping.post
    def start_rebalance(self, request: Request, name: str) -> Response:
        """Plan (dryrun) or start a rebalance, or a drain of one group."""
        cluster = self.get_object()
        data = self.validated(s.RebalanceStartSerializer)
        common = {"actor": request.user, "cluster": cluster.name, "dryrun": data["dryrun"],
                  "throttle": data.get("throttle")}
        row = (rebalance.store_group_drain(name=data["group"], **common)
               if data["kind"] == "drain" else rebalance.rebalance_start(**common))
        code = status.HTTP_200_OK if data["dryrun"] else status.HTTP_202_ACCEPTED
        return Response(s.RebalanceSerializer(row).data, status=code)


class GatewayViewSet(ReadOnlyViewSet):
    """Gateways of every cluster, with their status from heartbeats."""

    shared = True
    queryset = Gateway.objects.select_related("cluster")
    serializer_class = s.GatewaySerializer
    filterset_class = filters.GatewayFilter


# --- streams and topics -------------------------------------------------------------------


def count_topics() -> Coalesce:
    topics = Topic.objects.filter(stream=OuterRef("pk")).order_by().values("stream")
    counted = topics.annotate(n=Count("pk")).values("n")
    return Coalesce(Subquery(counted, output_field=IntegerField()), 0)


@extend_schema_view(
    create=extend_schema(request=s.StreamCreateSerializer, responses={201: s.StreamSerializer}),
    partial_update=extend_schema(request=s.StreamMetadataSerializer,
                                 responses=s.StreamSerializer),
    destroy=extend_schema(responses=NO_CONTENT),
)
class StreamViewSet(ReadOnlyViewSet):
    """Streams of your tenants. ACEs are shown to the stream's administrators only."""

    queryset = Stream.objects.select_related("cluster", "tenant")
    serializer_class = s.StreamSerializer
    filterset_class = filters.StreamFilter
    lookup_field = "uuid"
    lookup_value_converter = "uuid"

    def get_queryset(self) -> QuerySet:
        return super().get_queryset().annotate(numtopics=count_topics())

    def create(self, request: Request) -> Response:
        data = self.validated(s.StreamCreateSerializer)
        stream = services.stream_create(actor=request.user, **data)
        return self.respond(stream, status.HTTP_201_CREATED)

    def partial_update(self, request: Request, uuid: str) -> Response:
        stream = self.get_object()
        data = self.validated(s.StreamMetadataSerializer)
        services.stream_edit(actor=request.user, stream=stream, **data)
        return self.respond(stream)

    def destroy(self, request: Request, uuid: str) -> Response:
        services.stream_delete(actor=request.user, stream=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)


@extend_schema_view(
    create=extend_schema(request=s.TopicCreateSerializer, responses={201: s.TopicSerializer}),
    partial_update=extend_schema(request=s.TopicEditSerializer, responses=s.TopicSerializer),
    destroy=extend_schema(responses=NO_CONTENT),
)
class TopicViewSet(ListModelMixin, RetrieveModelMixin, StreamChildViewSet):
    """A stream's topics. Topics copied from an upstream are changed at their origin."""

    queryset = Topic.objects.select_related("stream")
    serializer_class = s.TopicSerializer
    lookup_field = "name"
    lookup_value_converter = "str"

    def get_queryset(self) -> QuerySet:
        # Scoped too: an origin in a tenant you cannot see shows as null, with its uuid.
        origins = self.scope(Stream.objects.all()).filter(uuid=OuterRef("origin_uuid"))
        return super().get_queryset().annotate(
            origin_path=Subquery(origins.values("path")[:1])
        )

    def create(self, request: Request, stream_uuid: str) -> Response:
        data = self.validated(s.TopicCreateSerializer)
        with field_alias(topic="name"):
            topic = services.topic_create(actor=request.user, stream=self.parent, **data)
        return self.respond(topic, status.HTTP_201_CREATED)

    def partial_update(self, request: Request, stream_uuid: str, name: str) -> Response:
        topic = self.get_object()
        data = self.validated(s.TopicEditSerializer)
        services.topic_edit(actor=request.user, stream=self.parent, name=topic.name, **data)
        return self.respond(topic)

    def destroy(self, request: Request, stream_uuid: str, name: str) -> Response:
        topic = self.get_object()
        services.topic_delete(actor=request.user, stream=self.parent, name=topic.name)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=s.PartitionMoveSerializer, responses={202: s.RebalanceSerializer})
    @action(detail=True, methods=["post"])
    def move(self, request: Request, stream_uuid: str, name: str) -> Response:
        """`stream topic partition move`: move a partition to another store group (operators
        only); 202 with the queued run, to follow at
        /api/v1/clusters/<name>/rebalances/<id>/."""
        topic = self.get_object()
        data = self.validated(s.PartitionMoveSerializer)
        row = rebalance.partition_move_start(actor=request.user, stream=self.parent,
                                             topic=topic.name, **data)
        return Response(s.RebalanceSerializer(row).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(responses=s.PartitionTxnsSerializer(many=True))
    @action(detail=True, methods=["get"])
    def transactions(self, request: Request, stream_uuid: str, name: str) -> Response:
        """Each partition's last stable offset (where read_committed consumers stop) and its
        open Kafka transactions."""
        found = topic_transactions(topic=self.get_object())
        return Response(s.PartitionTxnsSerializer(found, many=True).data)


# --- replicas and upstreams ---------------------------------------------------------------


@extend_schema_view(
    create=extend_schema(request=s.ReplicaAddSerializer, responses={201: s.ReplicaLinkSerializer}),
    partial_update=extend_schema(request=s.ReplicaEditSerializer,
                                 responses=s.ReplicaLinkSerializer),
    destroy=extend_schema(responses=NO_CONTENT),
    pause=extend_schema(request=None, responses=s.ReplicaLinkSerializer),
    resume=extend_schema(request=None, responses=s.ReplicaLinkSerializer),
    repair=extend_schema(request=None, responses={202: JobSerializer}),
    autosetup=extend_schema(request=s.ReplicaAutosetupSerializer,
                            responses={201: s.ReplicaLinkSerializer}),
)
class ReplicaViewSet(ListModelMixin, RetrieveModelMixin, StreamChildViewSet):
    """The replicas a stream sends to (`stream replica list`), looked up by replica uuid.
    Adding one is the source owner's half of the two-way agreement; it replicates once the
    replica's owner adds the source as an upstream."""

    queryset = ReplicaLink.objects.select_related("source", "replica__cluster")
    serializer_class = s.ReplicaLinkSerializer
    parent_field = "source"
    lookup_field = "replica__uuid"
    lookup_url_kwarg = "uuid"
    lookup_value_converter = "uuid"

    def get_queryset(self) -> QuerySet:
        return super().get_queryset().with_agreement()

    def create(self, request: Request, stream_uuid: str) -> Response:
        data = self.validated(s.ReplicaAddSerializer)
        replica = self.scoped_stream(data.pop("replica"), field="replica")
        link = services.replica_add(actor=request.user, source=self.parent, replica=replica,
                                    **data)
        return self.respond(link, status.HTTP_201_CREATED)

    def partial_update(self, request: Request, stream_uuid: str, uuid: str) -> Response:
        link = self.get_object()
        data = self.validated(s.ReplicaEditSerializer)
        services.replica_edit(actor=request.user, source=self.parent, replica=link.replica,
                              **data)
        return self.respond(link)

    def destroy(self, request: Request, stream_uuid: str, uuid: str) -> Response:
        link = self.get_object()
        services.replica_remove(actor=request.user, source=self.parent, replica=link.replica)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @action(detail=True, methods=["post"])
    def pause(self, request: Request, stream_uuid: str, uuid: str) -> Response:
        return self._apply(services.replica_pause)

    @action(detail=True, methods=["post"])
    def resume(self, request: Request, stream_uuid: str, uuid: str) -> Response:
        return self._apply(services.replica_resume)

    def _apply(self, service: Any) -> Response:
        link = self.get_object()
        service(actor=self.request.user, source=self.parent, replica=link.replica)
        return self.respond(link)

    @action(detail=True, methods=["post"])
    def repair(self, request: Request, stream_uuid: str, uuid: str) -> Response:
        """`stream replica repair`: the link's diffstreams -repair as a job, then a
        verification; 202 with the job, to follow at /api/v1/jobs/<id>/."""
        link = self.get_object()
        job = services.replica_repair(actor=request.user, source=self.parent,
                                      replica=link.replica)
        return Response(JobSerializer(job, context=self.get_serializer_context()).data,
                        status=status.HTTP_202_ACCEPTED)

    @action(detail=False, methods=["post"])
    def autosetup(self, request: Request, stream_uuid: str) -> Response:
        """MapR's `stream replica autosetup`: create the replica, link both ways, copy, start."""
        data = self.validated(s.ReplicaAutosetupSerializer)
        link = services.replica_autosetup(actor=request.user, source=self.parent, **data)
        return self.respond(link, status.HTTP_201_CREATED)


@extend_schema_view(
    create=extend_schema(request=s.UpstreamAddSerializer, responses={201: s.UpstreamSerializer}),
    destroy=extend_schema(responses=NO_CONTENT),
)
class UpstreamViewSet(ListModelMixin, RetrieveModelMixin, StreamChildViewSet):
    """The sources a replica accepts (`stream upstream list`), looked up by source uuid.
    Adding one is the replica owner's half of the two-way agreement."""

    queryset = Upstream.objects.select_related("source")
    serializer_class = s.UpstreamSerializer
    parent_field = "replica"
    lookup_field = "source__uuid"
    lookup_url_kwarg = "uuid"
    lookup_value_converter = "uuid"

    def create(self, request: Request, stream_uuid: str) -> Response:
        data = self.validated(s.UpstreamAddSerializer)
        source = self.scoped_stream(data["upstream"], field="upstream")
        upstream = services.upstream_add(actor=request.user, replica=self.parent, source=source)
        return self.respond(upstream, status.HTTP_201_CREATED)

    def destroy(self, request: Request, stream_uuid: str, uuid: str) -> Response:
        upstream = self.get_object()
        services.upstream_remove(actor=request.user, replica=self.parent,
                                 source=upstream.source)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ReplicaLinkViewSet(ListModelMixin, TenantScopedViewSet):
    """Every replica link you can see from either end. `?waiting_for_upstream=true` is the
    approvals inbox: links that wait for a replica owner to add the source as upstream."""

    queryset = ReplicaLink.objects.select_related("source", "replica__cluster")
    serializer_class = s.ReplicaLinkSerializer
    filterset_class = filters.ReplicaLinkFilter

    def get_queryset(self) -> QuerySet:
        return super().get_queryset().with_agreement()


# --- auth ---------------------------------------------------------------------------------


class TokenLoginView(knox_views.LoginView):
    """Exchange a username and password (HTTP Basic) for an API token."""

    authentication_classes = [PasswordBasicAuthentication]

    def create_token(self) -> tuple[Any, str]:
        # The same path as the Tokens page's: the token gets its TokenInfo (admin scope).
        return issue_token(self.request.user, name="api login")

    @extend_schema(request=None, responses=s.TokenSerializer, tags=["auth"])
    def post(self, request: Request, format: str | None = None) -> Response:
        return super().post(request, format=format)


class TokenLogoutView(knox_views.LogoutView):
    """Revoke the token this request authenticates with."""

    authentication_classes = [TokenAuthentication]

    @extend_schema(request=None, responses=NO_CONTENT, tags=["auth"])
    def post(self, request: Request, format: str | None = None) -> Response:
        return super().post(request, format=format)
