"""The Schemas page: the current tenant's schema registry subjects (versions, the latest's id
and type, the compatibility level), and a subject's versions with their schema text. Its
forms (register, compatibility, delete) are portal/web/schemaforms.py; serializers and tools
use the registry's REST API (/schemas/registry/, docs/schema-registry.md), whose URL the page
shows."""

from __future__ import annotations

import json

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from portal.web.schemaforms import may
from portal.web.tenancy import current_tenant, render_page
from replication.models import Compatibility, RegistryConfig
from replication.services.registryreads import (
    effective,
    registry_access,
    subject_summaries,
    subject_versions,
)


def _pretty(text: str, schema_type: str) -> str:
    if schema_type == "PROTOBUF":
        return text
    return json.dumps(json.loads(text), indent=2, ensure_ascii=False)


def _abilities(request: HttpRequest, tenant_name: str) -> dict[str, object]:
    access = registry_access(actor=request.user, tenant_name=tenant_name)
    return {"can_write": may(access, "write"), "can_admin": may(access, "admin"),
            "levels": Compatibility.values}


def _show_deleted(request: HttpRequest) -> bool:
    return request.GET.get("deleted") == "true"


def _registry_url(request: HttpRequest, tenant_name: str) -> str:
    return request.build_absolute_uri(f"/schemas/registry/tenants/{tenant_name}")


@login_required
@require_GET
def schema_subjects(request: HttpRequest) -> HttpResponse:
    """With ?deleted=true (the registry API's word), soft-deleted versions and subjects too,
    so an admin finds what is left to delete for good."""
    tenant = current_tenant(request)
    show_deleted = _show_deleted(request)
    return render_page(request, "web/schemas.html", {
        "subjects": subject_summaries(tenant, deleted=show_deleted) if tenant else [],
        "show_deleted": show_deleted,
        "registry_url": _registry_url(request, tenant.name) if tenant else "",
        "compatibility": effective(tenant, "", "compatibility") if tenant else "",
        **(_abilities(request, tenant.name) if tenant else {})})


@login_required
@require_GET
def schema_subject(request: HttpRequest, subject: str) -> HttpResponse:
    tenant = current_tenant(request)
    show_deleted = _show_deleted(request)
    versions = list(subject_versions(tenant, subject, deleted=show_deleted)
                    .select_related("schema").order_by("-version")) if tenant else []
    if not versions:
        raise Http404("no such subject in this tenant's schema registry")
    rows = [{"v": v, "text": _pretty(v.schema.text, v.schema.schema_type)} for v in versions]
    own = RegistryConfig.objects.filter(tenant=tenant, subject=subject).exclude(
        compatibility="").values_list("compatibility", flat=True).first() or ""
    return render_page(request, "web/schema_subject.html", {
        "subject": subject, "rows": rows, "own_level": own, "show_deleted": show_deleted,
        "compatibility": effective(tenant, subject, "compatibility"),
        "default_level": effective(tenant, "", "compatibility"),
        **_abilities(request, tenant.name)})
