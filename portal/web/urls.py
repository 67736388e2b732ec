from django.contrib.auth import views as auth_views
from django.urls import path

from operations.views import alarms_fragment, audit_log
from portal.web import approvals, failover, jobs, setup, streams, views

urlpatterns = [
    path("", views.overview, name="overview"),
    path("overview/replication/", views.overview_links, name="overview-links"),
    path("overview/live/", views.overview_live, name="overview-live"),
    path("tenant/", views.switch_tenant, name="switch-tenant"),
    path("login/", views.SignInView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("streams/", streams.stream_list, name="streams"),
    path("streams/ace-check/", streams.ace_check, name="ace-check"),
    path("streams/<int:pk>/", streams.stream_detail, name="stream-detail"),
    path("streams/<int:pk>/replicas/", streams.stream_replicas, name="stream-replicas"),
    path("streams/<int:pk>/lag/", streams.stream_lag, name="stream-lag"),
    path("streams/<int:pk>/replicas/add/", streams.replica_create, name="replica-add"),
    path("streams/<int:pk>/replicas/<int:link_pk>/<str:action>/", streams.replica_action,
         name="replica-action"),
    path("streams/<int:pk>/aces/", streams.stream_edit_aces, name="stream-aces"),
    path("streams/<int:pk>/failover/", failover.stream_failover, name="stream-failover"),
    path("streams/<int:pk>/messages/", streams.stream_messages, name="stream-messages"),
    path("audit/", audit_log, name="audit"),
    path("overview/alarms/", alarms_fragment, name="overview-alarms"),
    path("approvals/", approvals.approvals, name="approvals"),
    path("approvals/pending/", approvals.approvals_list, name="approvals-list"),
    path("approvals/<int:pk>/", approvals.approval_detail, name="approval-detail"),
    path("approvals/<int:pk>/<str:decision>/", approvals.approval_decide,
         name="approval-decide"),
    path("setup/", setup.setup_index, name="setup"),
    path("setup/manual/", setup.manual_start, name="setup-manual"),
    path("setup/manual/<int:source_pk>/<int:replica_pk>/<int:number>/", setup.manual_step,
         name="setup-manual-step"),
    path("setup/auto/", setup.auto_start, name="setup-auto"),
    path("setup/auto/<int:pk>/", setup.auto_progress, name="setup-auto-progress"),
    path("setup/auto/<int:pk>/status/", setup.auto_status, name="setup-auto-status"),
    path("jobs/", jobs.job_list, name="jobs"),
    path("jobs/table/", jobs.job_table, name="job-table"),
    path("jobs/start/", jobs.job_start, name="job-start"),
    path("jobs/<int:pk>/", jobs.job_detail, name="job-detail"),
    path("jobs/<int:pk>/status/", jobs.job_status, name="job-status"),
]
