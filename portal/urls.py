from django.contrib import admin
from django.urls import include, path

from portal import health
from portal.metrics import MetricsView

urlpatterns = [
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", MetricsView.as_view(), name="metrics"),
    path("admin/", admin.site.urls),
    path("api/v1/", include("portal.api.urls")),
    path("rest/", include("portal.rest.urls")),
    path("schemas/registry/", include("portal.registry.urls")),
    path("", include("portal.web.urls")),
]
handler404 = "portal.web.views.not_found"
