"""Confluent Schema Registry's endpoints. Each view finds the request's tenant (the URL's, or
the user's first) and calls the domain; the answers keep Confluent's field names."""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.tokens import BasicTokenAuthentication
from portal.registry.rendering import (
    MEDIA_TYPE,
    PARSERS,
    AlwaysRegistryJSON,
    RegistryRenderer,
    exception_handler,
)
from replication.models import RegisteredSchema, SubjectVersion
from replication.schemas.errors import SubjectNotFound
from replication.schemas.formats import TYPES
from replication.services import registry, registryreads
from replication.services.registryreads import Access


def _flag(request: Request, name: str) -> bool:
    return request.query_params.get(name, "").lower() == "true"


def _page(request: Request, items: list[Any]) -> list[Any]:
    """?offset= and ?limit= (-1 or none: all), as Confluent pages its lists."""
    def number(name: str, default: int) -> int:
        text = request.query_params.get(name, "")
        return int(text) if text.lstrip("-").isdigit() else default

    offset, limit = max(0, number("offset", 0)), number("limit", -1)
    return items[offset:] if limit < 0 else items[offset:offset + limit]


def _live_filter(request: Request, versions: Any) -> Any:
    """?deleted=true: soft-deleted versions too; ?deleted_only=true: only those."""
    if _flag(request, "deleted_only"):
        return versions.filter(deleted=True)
    return versions if _flag(request, "deleted") else versions.filter(deleted=False)


def schema_fields(schema: RegisteredSchema) -> dict[str, Any]:
    """The schema as Confluent shows it: schemaType left out for Avro, references when any."""
    shown: dict[str, Any] = {"schema": schema.text, "guid": str(schema.guid)}
    if schema.schema_type != "AVRO":
        shown["schemaType"] = schema.schema_type
    if schema.references:
        shown["references"] = schema.references
    return shown


def version_fields(found: SubjectVersion) -> dict[str, Any]:
    return {"subject": found.subject, "version": found.version, "id": found.schema_id,
            **schema_fields(found.schema)}


def raw(schema: RegisteredSchema) -> HttpResponse:
    """The schema text itself (.../schema endpoints), not wrapped in an object."""
    return HttpResponse(schema.text, content_type=MEDIA_TYPE)


class RegistryView(APIView):
    authentication_classes = [BasicTokenAuthentication]
    permission_classes = [IsAuthenticated]
    renderer_classes = [RegistryRenderer]
    parser_classes = PARSERS
    content_negotiation_class = AlwaysRegistryJSON

    def get_exception_handler(self) -> Any:
        return exception_handler

    def access(self) -> Access:
        return registryreads.registry_access(actor=self.request.user,
                                             tenant_name=self.kwargs.get("tenant"))

    def readable(self) -> Access:
        access = self.access()
        access.require("read", "reading the schema registry")
        return access


class Root(RegistryView):
    def get(self, request: Request, **kwargs: Any) -> Response:
        return Response({})


class Subjects(RegistryView):
    def get(self, request: Request, **kwargs: Any) -> Response:
        access = self.readable()
        found = _live_filter(request, SubjectVersion.objects.filter(tenant=access.tenant))
        prefix = request.query_params.get("subjectPrefix", "")
        if prefix and prefix != ":*:":
            found = found.filter(subject__startswith=prefix)
        return Response(_page(request, sorted(set(found.values_list("subject", flat=True)))))


class Subject(RegistryView):
    def post(self, request: Request, subject: str, **kwargs: Any) -> Response:
        found = registry.schema_lookup(access=self.access(), subject=subject,
                                       candidate=registry.Candidate.of(request.data),
                                       deleted=_flag(request, "deleted"))
        return Response(version_fields(found))

    def delete(self, request: Request, subject: str, **kwargs: Any) -> Response:
        return Response(registry.subject_delete(access=self.access(), subject=subject,
                                                permanent=_flag(request, "permanent")))


class Versions(RegistryView):
    def get(self, request: Request, subject: str, **kwargs: Any) -> Response:
        access = self.readable()
        versions = _live_filter(request, registryreads.subject_versions(
            access.tenant, subject, deleted=True))
        numbers = sorted(versions.values_list("version", flat=True))
        if not numbers:
            raise SubjectNotFound(f"subject {subject!r} not found")
        return Response(_page(request, numbers))

    def post(self, request: Request, subject: str, **kwargs: Any) -> Response:
        made = registry.schema_register(access=self.access(), subject=subject,
                                        candidate=registry.Candidate.of(request.data))
        return Response({"id": made.schema_id, "version": made.version,
                         "guid": str(made.schema.guid)})


class Version(RegistryView):
    def get(self, request: Request, subject: str, version: str, **kwargs: Any) -> Response:
        access = self.readable()
        return Response(version_fields(registryreads.subject_version(
            access.tenant, subject, version, deleted=_flag(request, "deleted"))))

    def delete(self, request: Request, subject: str, version: str, **kwargs: Any) -> Response:
        return Response(registry.version_delete(access=self.access(), subject=subject,
                                                version=version,
                                                permanent=_flag(request, "permanent")))


class VersionSchema(RegistryView):
    def get(self, request: Request, subject: str, version: str, **kwargs: Any) -> HttpResponse:
        access = self.readable()
        return raw(registryreads.subject_version(access.tenant, subject, version,
                                                 deleted=_flag(request, "deleted")).schema)


class ReferencedBy(RegistryView):
    def get(self, request: Request, subject: str, version: str, **kwargs: Any) -> Response:
        access = self.readable()
        found = registryreads.subject_version(access.tenant, subject, version)
        return Response(registryreads.referenced_by(access.tenant, found))


class Schemas(RegistryView):
    """GET /schemas: the tenant's subject versions with their schemas (?subjectPrefix=,
    ?deleted=true, ?latestOnly=true, ?offset=, ?limit=)."""

    def get(self, request: Request, **kwargs: Any) -> Response:
        access = self.readable()
        found = _live_filter(request, SubjectVersion.objects.filter(tenant=access.tenant))
        prefix = request.query_params.get("subjectPrefix", "")
        if prefix:
            found = found.filter(subject__startswith=prefix)
        rows = list(found.select_related("schema").order_by("subject", "version"))
        if _flag(request, "latestOnly"):
            rows = list({row.subject: row for row in rows}.values())
        return Response([version_fields(row) for row in _page(request, rows)])


class SchemaById(RegistryView):
    def get(self, request: Request, schema_id: str, **kwargs: Any) -> Response:
        access = self.readable()
        return Response(schema_fields(registryreads.schema_by_id(access.tenant, schema_id,
                                                                 upstream=True)))


class SchemaText(RegistryView):
    def get(self, request: Request, schema_id: str, **kwargs: Any) -> HttpResponse:
        return raw(registryreads.schema_by_id(self.readable().tenant, schema_id, upstream=True))


def _versions_of(request: Request, access: Access, schema_id: str) -> Any:
    """The versions of the tenant's own subjects holding the schema (none for an upstream
    tenant's schema: its subjects are that tenant's)."""
    schema = registryreads.schema_by_id(access.tenant, schema_id, upstream=True)
    return _live_filter(request, schema.versions.filter(tenant=access.tenant))


class SchemaSubjects(RegistryView):
    def get(self, request: Request, schema_id: str, **kwargs: Any) -> Response:
        versions = _versions_of(request, self.readable(), schema_id)
        return Response(sorted(set(versions.values_list("subject", flat=True))))


class SchemaVersions(RegistryView):
    def get(self, request: Request, schema_id: str, **kwargs: Any) -> Response:
        versions = _versions_of(request, self.readable(), schema_id)
        return Response([{"subject": s, "version": v} for s, v in
                         versions.order_by("subject", "version").values_list("subject",
                                                                             "version")])


class Types(RegistryView):
    def get(self, request: Request, **kwargs: Any) -> Response:
        return Response(list(TYPES))


class Contexts(RegistryView):
    def get(self, request: Request, **kwargs: Any) -> Response:
        return Response(["."])


class Compatibility(RegistryView):
    def post(self, request: Request, subject: str, version: str | None = None,
             **kwargs: Any) -> Response:
        problems = registry.compatibility_test(
            access=self.access(), subject=subject, version=version,
            candidate=registry.Candidate.of(request.data))
        answer: dict[str, Any] = {"is_compatible": not problems}
        if _flag(request, "verbose"):
            answer["messages"] = problems
        return Response(answer)
