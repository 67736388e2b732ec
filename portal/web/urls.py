from collections.abc import Callable

from django.contrib.auth import views as auth_views
from django.urls import URLPattern, path

from portal.web import (
    approvals,
    audit,
    failover,
    groups,
    jobs,
    kafka,
    messages,
    setup,
    streams,
    throughput,
    topology,
    views,
)


def stream_page(suffix: str, view: Callable, name: str) -> URLPattern:
    """A page of one stream: streams/<pk>/<suffix> (the view takes `pk`)."""
    return path(f"streams/<int:pk>/{suffix}", view, name=name)


urlpatterns = [
    path("", views.overview, name="overview"),
    path("overview/replication/", views.overview_links, name="overview-links"),
    path("overview/live/", views.overview_live, name="overview-live"),
    path("topology/", topology.topology, name="topology"),
    path("topology/data/", topology.topology_json, name="topology-data"),
    path("topology/links/<int:pk>/lag/", topology.link_lag, name="topology-link-lag"),
    path("tenant/", views.switch_tenant, name="switch-tenant"),
    path("login/", views.SignInView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("streams/", streams.stream_list, name="streams"),
    path("streams/ace-check/", streams.ace_check, name="ace-check"),
    stream_page("", streams.stream_detail, "stream-detail"),
    stream_page("replicas/", streams.stream_replicas, "stream-replicas"),
    stream_page("lag/", streams.stream_lag, "stream-lag"),
    stream_page("replicas/add/", streams.replica_create, "replica-add"),
    stream_page("replicas/<int:link_pk>/<str:action>/", streams.replica_action, "replica-action"),
    stream_page("aces/", streams.stream_edit_aces, "stream-aces"),
    stream_page("failover/", failover.stream_failover, "stream-failover"),
    stream_page("failback/", failover.stream_failback, "stream-failback"),
    stream_page("verify/<int:link_pk>/", failover.link_verify_now, "link-verify"),
    stream_page("messages/", messages.stream_messages, "stream-messages"),
    stream_page("messages/produce/", messages.stream_produce, "stream-produce"),
    stream_page("groups/", groups.stream_groups, "stream-groups"),
    stream_page("throughput/", throughput.stream_rates, "stream-throughput"),
    path("overview/throughput/", throughput.cluster_rates, name="cluster-throughput"),
    path("audit/", audit.audit_log, name="audit"),
    path("overview/alarms/", audit.alarms_fragment, name="overview-alarms"),
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
    path("kafka/", kafka.kafka_settings, name="kafka"),
    path("kafka/default-stream/", kafka.default_stream_save, name="kafka-default-stream"),
    path("jobs/table/", jobs.job_table, name="job-table"),
    path("jobs/start/", jobs.job_start, name="job-start"),
    path("jobs/<int:pk>/", jobs.job_detail, name="job-detail"),
    path("jobs/<int:pk>/status/", jobs.job_status, name="job-status"),
]
