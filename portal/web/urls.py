from django.contrib.auth import views as auth_views
from django.urls import path

from portal.web import approvals, streams, views

urlpatterns = [
    path("", views.overview, name="overview"),
    path("overview/replication/", views.overview_links, name="overview-links"),
    path("tenant/", views.switch_tenant, name="switch-tenant"),
    path("login/", views.SignInView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("streams/", streams.stream_list, name="streams"),
    path("streams/ace-check/", streams.ace_check, name="ace-check"),
    path("streams/<int:pk>/", streams.stream_detail, name="stream-detail"),
    path("streams/<int:pk>/replicas/", streams.stream_replicas, name="stream-replicas"),
    path("streams/<int:pk>/replicas/add/", streams.replica_create, name="replica-add"),
    path("streams/<int:pk>/replicas/<int:link_pk>/<str:action>/", streams.replica_action,
         name="replica-action"),
    path("streams/<int:pk>/aces/", streams.stream_edit_aces, name="stream-aces"),
    path("streams/<int:pk>/messages/", streams.stream_messages, name="stream-messages"),
    path("approvals/", approvals.approvals, name="approvals"),
    path("approvals/pending/", approvals.approvals_list, name="approvals-list"),
    path("approvals/<int:pk>/", approvals.approval_detail, name="approval-detail"),
    path("approvals/<int:pk>/<str:decision>/", approvals.approval_decide,
         name="approval-decide"),
]
