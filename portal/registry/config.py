"""/config and /mode: compatibility levels and modes, a tenant's default or a subject's."""

from __future__ import annotations

from typing import Any

from rest_framework.request import Request
from rest_framework.response import Response

from portal.registry.views import RegistryView
from replication.schemas.errors import SubjectConfigNotFound, SubjectModeNotFound
from replication.services import registry, registryreads

# The body's field on PUT, the answer's field on GET, and the refusal when a subject has none.
FIELDS = {"compatibility": ("compatibility", "compatibilityLevel", SubjectConfigNotFound),
          "mode": ("mode", "mode", SubjectModeNotFound)}


class Setting(RegistryView):
    field = "compatibility"

    def get(self, request: Request, subject: str | None = None, **kwargs: Any) -> Response:
        tenant = self.readable().tenant
        _put_name, shown, missing = FIELDS[self.field]
        own = registryreads.config_of(tenant, subject, self.field)
        if own is None and subject is not None and \
                request.query_params.get("defaultToGlobal", "").lower() != "true":
            raise missing(f"subject {subject!r} has no {self.field} of its own: "
                          "?defaultToGlobal=true shows the tenant's")
        return Response({shown: registryreads.effective(tenant, subject or "", self.field)})

    def put(self, request: Request, subject: str | None = None, **kwargs: Any) -> Response:
        put_name, _shown, _missing = FIELDS[self.field]
        value = request.data.get(put_name) if isinstance(request.data, dict) else None
        registry.registry_config_set(access=self.access(), subject=subject, field=self.field,
                                     value=value if value is not None else "")
        return Response({put_name: str(value).upper()})

    def delete(self, request: Request, subject: str | None = None, **kwargs: Any) -> Response:
        _put_name, shown, missing = FIELDS[self.field]
        before = registry.registry_config_set(access=self.access(), subject=subject,
                                              field=self.field, value=None)
        if before is None and subject is not None:
            raise missing(f"subject {subject!r} has no {self.field} of its own")
        default = registryreads.effective(self.access().tenant, "", self.field)
        return Response({shown: before or default})


class Mode(Setting):
    field = "mode"
