"""Confluent's paths, under /schemas/registry/ (the user's first tenant) and
/schemas/registry/tenants/<tenant>/ (one of theirs by name). Subjects may contain '/', so
the paths with a suffix after the subject come before the subject's own."""

from __future__ import annotations

from django.http import Http404
from django.urls import include, path, re_path

from portal.registry import config, views
from portal.registry.views import RegistryView

SUBJECT = "subjects/<path:subject>"


class NotFoundView(RegistryView):
    """Any other path: a 404 in the registry's shape, not the portal's page."""

    def get(self, *args: object, **kwargs: object) -> None:
        raise Http404

    post = put = delete = get


endpoints = [
    path("", views.Root.as_view()),
    path("subjects", views.Subjects.as_view()),
    path(f"{SUBJECT}/versions/<str:version>/schema", views.VersionSchema.as_view()),
    path(f"{SUBJECT}/versions/<str:version>/referencedby", views.ReferencedBy.as_view()),
    path(f"{SUBJECT}/versions/<str:version>", views.Version.as_view()),
    path(f"{SUBJECT}/versions", views.Versions.as_view()),
    path(SUBJECT, views.Subject.as_view()),
    path("schemas", views.Schemas.as_view()),
    path("schemas/types", views.Types.as_view()),
    path("schemas/ids/<str:schema_id>/schema", views.SchemaText.as_view()),
    path("schemas/ids/<str:schema_id>/subjects", views.SchemaSubjects.as_view()),
    path("schemas/ids/<str:schema_id>/versions", views.SchemaVersions.as_view()),
    path("schemas/ids/<str:schema_id>", views.SchemaById.as_view()),
    path("schemas/guids/<str:schema_id>", views.SchemaById.as_view()),
    path("compatibility/subjects/<path:subject>/versions/<str:version>",
         views.Compatibility.as_view()),
    path("compatibility/subjects/<path:subject>/versions", views.Compatibility.as_view()),
    path("config", config.Setting.as_view()),
    path("config/<path:subject>", config.Setting.as_view()),
    path("mode", config.Mode.as_view()),
    path("mode/<path:subject>", config.Mode.as_view()),
    path("contexts", views.Contexts.as_view()),
]

urlpatterns = [
    path("tenants/<str:tenant>/", include(endpoints)),
    *endpoints,
    re_path(r"^.*$", NotFoundView.as_view()),
]
