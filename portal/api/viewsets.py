"""The API's tenant-scoping choke point.

Every API viewset derives from `TenantScopedViewSet`, whose `scope()` is the only place an API
view turns a queryset into rows: tenant-owned rows go through `RestrictedQuerySet.restrict`, so
another tenant's objects are absent and answer 404. Infrastructure every signed-in user may read
(clusters, gateways) is opted in with `shared = True`; anything else without `restrict()` is a
configuration error, so a new view cannot leak rows by forgetting to scope them.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any, ClassVar

from django.core.exceptions import ImproperlyConfigured
from django.db.models import Model, QuerySet
from django.shortcuts import get_object_or_404
from rest_framework.mixins import ListModelMixin, RetrieveModelMixin
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import Serializer
from rest_framework.viewsets import GenericViewSet

from accounts.scoping import RestrictedQuerySet
from portal.api.serializers import StreamAccess
from replication.models import Stream


class TenantScopedViewSet(GenericViewSet):
    # True only for models with no tenant (clusters, gateways): readable by every user.
    shared: ClassVar[bool] = False

    def scope(self, queryset: QuerySet) -> QuerySet:
        # Clone first: restrict() hands staff the queryset itself, and a class-level queryset
        # that gets evaluated would cache its rows across requests.
        queryset = queryset.all()
        if getattr(self, "swagger_fake_view", False):
            return queryset.none()
        if isinstance(queryset, RestrictedQuerySet):
            return queryset.restrict(self.request.user)
        if self.shared:
            return queryset
        raise ImproperlyConfigured(
            f"{type(self).__name__}: {queryset.model.__name__} rows have no restrict(); "
            "scope them by tenant or mark the viewset shared"
        )

    def get_queryset(self) -> QuerySet:
        return self.scope(self.queryset)

    def get_serializer_context(self) -> dict[str, Any]:
        context = super().get_serializer_context()
        context["access"] = StreamAccess(self.request.user)
        return context

    def validated(self, serializer_class: type[Serializer]) -> dict[str, Any]:
        """The request body, type-checked by `serializer_class` (DRF field errors on failure)."""
        serializer = serializer_class(data=self.request.data,
                                      context=self.get_serializer_context())
        serializer.is_valid(raise_exception=True)
        return dict(serializer.validated_data)

    def respond(self, instance: Model, status: int = 200) -> Response:
        """The instance as its list shows it: reloaded through the scoped, annotated queryset."""
        fresh = self.get_queryset().get(pk=instance.pk)
        return Response(self.get_serializer(fresh).data, status=status)

    def scoped_stream(self, path: str, *, field: str) -> Stream:
        """A stream named by path in a request body; other tenants' streams are not found."""
        return self.scope(Stream.objects.select_related("cluster", "tenant")).by_path(
            path, field=field
        )


class StreamChildViewSet(TenantScopedViewSet):
    """Rows nested under `streams/<uuid:stream_uuid>/`, visible only with their stream."""

    # The lookup from the child model to its stream.
    parent_field: ClassVar[str] = "stream"

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        # Resolve the parent before any validation, so an outsider learns nothing from a 400.
        if not getattr(self, "swagger_fake_view", False):
            _ = self.parent

    @cached_property
    def parent(self) -> Stream:
        streams = self.scope(Stream.objects.select_related("cluster", "tenant"))
        return get_object_or_404(streams, uuid=self.kwargs["stream_uuid"])

    def get_queryset(self) -> QuerySet:
        queryset = super().get_queryset()
        if getattr(self, "swagger_fake_view", False):
            return queryset
        return queryset.filter(**{self.parent_field: self.parent})


class ReadOnlyViewSet(ListModelMixin, RetrieveModelMixin, TenantScopedViewSet):
    """List and retrieve, tenant-scoped; objects are addressed by integer id unless the
    viewset names another converter."""

    lookup_value_converter = "int"
