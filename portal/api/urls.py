"""/api/v1/: the REST API, its OpenAPI schema, Swagger UI (served from local static files)
and token login."""

from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.routers import SimpleRouter

from portal.api import (
    defaultstreams,
    failover,
    groups,
    jobs,
    messages,
    operations,
    tokens,
    views,
)

app_name = "api"

# Path converters rather than regexes: topic and cluster names contain dots, and the OpenAPI
# schema learns each parameter's type (uuid, int) from its converter.
router = SimpleRouter(use_regex_path=False)
router.register("tenants", views.TenantViewSet, basename="tenant")
router.register("clusters", views.ClusterViewSet, basename="cluster")
router.register("gateways", views.GatewayViewSet, basename="gateway")
router.register("streams", views.StreamViewSet, basename="stream")
router.register("streams/<uuid:stream_uuid>/topics", views.TopicViewSet, basename="stream-topic")
router.register("streams/<uuid:stream_uuid>/replicas", views.ReplicaViewSet,
                basename="stream-replica")
router.register("streams/<uuid:stream_uuid>/upstreams", views.UpstreamViewSet,
                basename="stream-upstream")
router.register("replicas", views.ReplicaLinkViewSet, basename="replica")
router.register("streams/<uuid:stream_uuid>/failovers", failover.FailoverViewSet,
                basename="stream-failover")
router.register("streams/<uuid:stream_uuid>/topics/<str:name>/messages", messages.MessageViewSet,
                basename="stream-topic-messages")
router.register("streams/<uuid:stream_uuid>/topics/<str:name>/cursors", messages.CursorViewSet,
                basename="stream-topic-cursors")
router.register("streams/<uuid:stream_uuid>/topics/<str:name>/offset-resets",
                groups.OffsetResetViewSet, basename="stream-topic-offset-resets")
router.register("alarms", operations.AlarmViewSet, basename="alarm")
router.register("audit", operations.AuditEventViewSet, basename="audit")
router.register("jobs", jobs.JobViewSet, basename="job")
router.register("tokens", tokens.TokenViewSet, basename="token")
router.register("defaultstreams", defaultstreams.DefaultStreamViewSet, basename="defaultstream")

urlpatterns = [
    *router.urls,
    path("auth/login/", views.TokenLoginView.as_view(), name="login"),
    path("auth/logout/", views.TokenLogoutView.as_view(), name="logout"),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    # Its script is served from a URL of its own, not inline (Content-Security-Policy).
    path("docs/", SpectacularSwaggerSplitView.as_view(url_name="api:schema"), name="docs"),
]
