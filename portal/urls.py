from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include("portal.api.urls")),
    path("rest/", include("portal.rest.urls")),
    path("", include("portal.web.urls")),
]
