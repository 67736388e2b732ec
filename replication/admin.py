"""Admin for cluster operators: clusters and their gateways are edited here; streams, topics,
replica links and upstreams are shown read-only, because only the services apply the rules
that guard them (ACEs, two-way agreement, one origin per topic)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import Exists, OuterRef, QuerySet
from django.http import HttpRequest
from django.utils import timezone

from accounts.admin import (
    CountingAdmin,
    OperatorAccess,
    ReadOnlyAccess,
    count_column,
    save_each,
)
from replication.errors import StreamgateError
from replication.models import (
    GATEWAY_HEARTBEAT_TIMEOUT,
    Cluster,
    DefaultStream,
    Gateway,
    Job,
    ModeSwitch,
    Rebalance,
    ReplicaLink,
    StoreGroup,
    Stream,
    Topic,
    Upstream,
)
from replication.paths import validate_cluster_name
from replication.services import replica_pause, replica_resume
from replication.services.clusters import validate_gateway_address
from replication.services.storegroups import store_group_add, store_group_remove


class ClusterForm(forms.ModelForm):
    class Meta:
        model = Cluster
        fields = ("name", "store_url", "state")

    def clean_name(self) -> str:
        # The same rule as cluster_create: the name is a segment of every stream path.
        try:
            return validate_cluster_name(self.cleaned_data["name"])
        except StreamgateError as err:
            raise forms.ValidationError(err.desc) from err

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            # Stream paths embed the cluster name, so renaming would orphan them.
            self.fields["name"].disabled = True


class GatewayForm(forms.ModelForm):
    class Meta:
        model = Gateway
        fields = ("cluster", "name", "address", "enabled")

    def clean_address(self) -> str:
        address = self.cleaned_data["address"]
        try:
            return address and validate_gateway_address(address, field="address")
        except StreamgateError as err:
            raise forms.ValidationError(err.desc) from err


class GatewayInline(OperatorAccess, admin.TabularInline):
    model = Gateway
    form = GatewayForm
    extra = 0
    fields = ("name", "address", "enabled", "status", "last_heartbeat")
    readonly_fields = ("status", "last_heartbeat")


class StoreGroupInline(admin.TabularInline):
    """A cluster's store groups, read here; added and removed on the store groups' own admin
    page (StoreGroupAdmin), as by `cluster store add|remove`."""

    model = StoreGroup
    extra = 0
    can_delete = False
    fields = readonly_fields = ("name", "url", "state", "partitions", "created")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="partitions placed")
    def partitions(self, group: StoreGroup) -> int:
        return group.placements.count()


class StoreGroupForm(forms.ModelForm):
    """Adds a group through the service (`cluster store add`): the store is made and checked,
    fenced, and the group recorded, or nothing changes and the service's error shows here."""

    request: HttpRequest

    class Meta:
        model = StoreGroup
        fields = ("cluster", "name", "url")

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if not self.errors:
            try:
                self.instance = store_group_add(
                    actor=self.request.user, cluster=data["cluster"].name, name=data["name"],
                    url=data["url"])
            except StreamgateError as err:
                raise forms.ValidationError(err.desc) from err
        return data

    def validate_unique(self) -> None:
        """The service refused a taken name already; the row is the one it made."""


@admin.register(StoreGroup)
class StoreGroupAdmin(OperatorAccess, admin.ModelAdmin):
    """Store groups: added with the form (through the service) and removed with the action
    (refused while the group holds partitions, or for a cluster's last group); never edited."""

    form = StoreGroupForm
    list_display = ("cluster", "name", "url", "state", "partitions", "created")
    list_filter = ("cluster", "state")
    list_select_related = ("cluster",)
    actions = ("remove_groups",)

    def get_form(self, request: HttpRequest, obj: Any = None, **kwargs: Any) -> Any:
        form = super().get_form(request, obj, **kwargs)
        return type(form.__name__, (form,), {"request": request})

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # the action below removes, through the service's checks

    def save_model(self, request: HttpRequest, obj: StoreGroup, form: Any, change: bool) -> None:
        """Saved by the service in the form's clean."""

    @admin.display(description="partitions placed")
    def partitions(self, group: StoreGroup) -> int:
        return group.placements.count()

    @admin.action(description="Remove selected store groups")
    def remove_groups(self, request: HttpRequest, queryset: QuerySet[StoreGroup]) -> None:
        for group in queryset.select_related("cluster"):
            try:
                store_group_remove(actor=request.user, cluster=group.cluster.name,
                                   name=group.name)
            except StreamgateError as err:
                self.message_user(request, err.desc, messages.ERROR)
            else:
                self.message_user(request, f"Removed store group {group.name} of cluster "
                                  f"{group.cluster.name}.", messages.SUCCESS)


@admin.register(Rebalance)
class RebalanceAdmin(ReadOnlyAccess, admin.ModelAdmin):
    """Rebalances, drains and single partition moves with their progress: started with
    `cluster store rebalance|drain` or `stream topic partition move` (or the API); shown
    here."""

    list_display = ("__str__", "cluster", "kind", "group", "state", "progress", "bytes_done",
                    "bytes_total", "requested_by", "created", "finished")
    list_filter = ("cluster", "kind", "state")
    list_select_related = ("cluster", "group", "requested_by")
    readonly_fields = ("progress",)

    @admin.display(description="progress")
    def progress(self, run: Rebalance) -> str:
        if run.kind == Rebalance.Kind.MOVE:  # one move: its copy's share
            return f"{run.percent}% ({run.bytes_done:,} of {run.bytes_total:,} bytes)"
        return f"{run.percent}% ({run.moves_done} of {len(run.plan)} moves)"


@admin.register(Cluster)
class ClusterAdmin(OperatorAccess, CountingAdmin):
    form = ClusterForm
    list_display = ("name", "state", "store_url", "gateway_count", "stream_count", "created")
    list_filter = ("state",)
    search_fields = ("name",)
    inlines = (GatewayInline, StoreGroupInline)
    gateway_count = count_column("gateways", "gateways")
    stream_count = count_column("streams", "streams")


class GatewayStatusFilter(admin.SimpleListFilter):
    title = "status"
    parameter_name = "status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(value, label) for value, label in Gateway.Status.choices]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Gateway]) -> QuerySet[Gateway]:
        # Mirrors Gateway.status, which is computed and so cannot be filtered on directly.
        cutoff = timezone.now() - GATEWAY_HEARTBEAT_TIMEOUT
        enabled = queryset.filter(enabled=True)
        return {
            Gateway.Status.DISABLED: queryset.filter(enabled=False),
            Gateway.Status.UNKNOWN: enabled.filter(last_heartbeat__isnull=True),
            Gateway.Status.DOWN: enabled.filter(last_heartbeat__lt=cutoff),
            Gateway.Status.UP: enabled.filter(last_heartbeat__gte=cutoff),
        }.get(self.value(), queryset)


@admin.register(Gateway)
class GatewayAdmin(OperatorAccess, admin.ModelAdmin):
    form = GatewayForm
    list_display = ("cluster", "name", "address", "enabled", "status", "last_heartbeat",
                    "batches_applied", "messages_applied", "bytes_applied", "errors")
    list_filter = ("cluster", "enabled", GatewayStatusFilter)
    list_select_related = ("cluster",)
    search_fields = ("name", "address", "cluster__name")
    readonly_fields = ("status", "last_heartbeat", "batches_applied", "messages_applied",
                       "bytes_applied", "errors", "created")
    actions = ("enable_gateways", "disable_gateways")

    @admin.action(description="Enable selected gateways")
    def enable_gateways(self, request: HttpRequest, queryset: QuerySet[Gateway]) -> None:
        count = save_each(queryset, enabled=True)  # audited, unlike update()
        self.message_user(request, f"Enabled {count} gateway(s).", messages.SUCCESS)

    @admin.action(description="Disable selected gateways")
    def disable_gateways(self, request: HttpRequest, queryset: QuerySet[Gateway]) -> None:
        # A disabled gateway leaves the round-robin at once (GatewayQuerySet.live).
        count = save_each(queryset, enabled=False)  # audited, unlike update()
        self.message_user(request, f"Disabled {count} gateway(s).", messages.SUCCESS)


@admin.register(Stream)
class StreamAdmin(ReadOnlyAccess, CountingAdmin):
    list_display = ("path", "cluster", "tenant", "topic_count", "replica_count", "created")
    list_filter = ("cluster", "tenant", "compression")
    list_select_related = ("cluster", "tenant")
    search_fields = ("path", "uuid")
    topic_count = count_column("topics", "topics")
    replica_count = count_column("replica_links", "replicas")


@admin.register(Topic)
class TopicAdmin(ReadOnlyAccess, admin.ModelAdmin):
    list_display = ("name", "stream", "partitions", "is_origin", "created")
    list_filter = ("stream__cluster", "stream__tenant")
    list_select_related = ("stream",)
    search_fields = ("name", "stream__path")

    @admin.display(description="origin", boolean=True)
    def is_origin(self, topic: Topic) -> bool:
        return topic.is_origin


def _apply(
    service: Callable[..., ReplicaLink], past: str
) -> Callable[[Any, HttpRequest, QuerySet[ReplicaLink]], None]:
    """An admin action calling `service` per link as the operator, so the service's own
    permission and state checks apply; a refusal is reported, not raised."""

    def action(model_admin: Any, request: HttpRequest, queryset: QuerySet[ReplicaLink]) -> None:
        done = 0
        for link in queryset.select_related("source", "replica"):
            try:
                service(actor=request.user, source=link.source, replica=link.replica)
            except StreamgateError as error:
                model_admin.message_user(request, f"{link}: {error.desc}", messages.ERROR)
            else:
                done += 1
        if done:
            model_admin.message_user(request, f"{past} {done} replica link(s).", messages.SUCCESS)

    return action


class ModeSwitchInline(ReadOnlyAccess, admin.TabularInline):
    """The link's switches between synchronous and asynchronous mode, latest first."""

    model = ModeSwitch
    fields = ("at", "from_mode", "to_mode", "reason")
    readonly_fields = fields
    extra = 0
    max_num = 0
    ordering = ("-at", "-pk")


@admin.register(ModeSwitch)
class ModeSwitchAdmin(ReadOnlyAccess, admin.ModelAdmin):
    list_display = ("at", "link", "from_mode", "to_mode", "reason")
    list_filter = ("to_mode", "link__replica__cluster", "link__source__tenant")
    list_select_related = ("link__source", "link__replica")
    search_fields = ("link__source__path", "link__replica__path", "reason")
    date_hierarchy = "at"


@admin.register(ReplicaLink)
class ReplicaLinkAdmin(ReadOnlyAccess, admin.ModelAdmin):
    list_display = ("source", "replica", "idx", "replica_state", "paused", "copy_percentage",
                    "synchronous", "mode", "mode_since", "last_error")
    list_filter = ("paused", "state", "synchronous", "mode", "source__cluster",
                   "replica__cluster", "source__tenant")
    list_select_related = ("source", "replica")
    search_fields = ("source__path", "replica__path")
    actions = ("pause_replication", "resume_replication")
    inlines = (ModeSwitchInline,)

    def get_queryset(self, request: HttpRequest) -> QuerySet[ReplicaLink]:
        # One query for the agreement of every row, instead of one per row.
        return super().get_queryset(request).with_agreement()

    @admin.display(description="replicaState")
    def replica_state(self, link: ReplicaLink) -> str:
        return link.replica_state()

    pause_replication = admin.action(description="Pause replication")(
        _apply(replica_pause, "Paused")
    )
    resume_replication = admin.action(description="Resume replication")(
        _apply(replica_resume, "Resumed")
    )


@admin.register(Upstream)
class UpstreamAdmin(ReadOnlyAccess, admin.ModelAdmin):
    list_display = ("replica", "source", "idx", "agreed", "created")
    list_filter = ("replica__cluster", "source__cluster", "replica__tenant")
    list_select_related = ("replica", "source")
    search_fields = ("replica__path", "source__path")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Upstream]:
        return super().get_queryset(request).annotate(
            has_link=Exists(
                ReplicaLink.objects.filter(replica=OuterRef("replica"), source=OuterRef("source"))
            )
        )

    @admin.display(description="agreed (replica registered at source)", boolean=True)
    def agreed(self, upstream: Upstream) -> bool:
        return upstream.has_link  # type: ignore[attr-defined]


# Bulk jobs: operators see every run, read-only (jobs start from the command line, the API or the
# portal, where permissions are checked).
@admin.register(Job)
class JobAdmin(ReadOnlyAccess, admin.ModelAdmin):
    list_display = ("id", "kind", "state", "source_path", "destination_path", "percent",
                    "requested_by", "created", "finished")
    list_filter = ("kind", "state", "tenant")
    list_select_related = ("requested_by",)
    search_fields = ("source_path", "destination_path")
@admin.register(DefaultStream)
class DefaultStreamAdmin(ReadOnlyAccess, admin.ModelAdmin):
    """Where plain Kafka names live; tenants set them (CLI, API, the Kafka page)."""

    list_display = ("tenant", "cluster", "user", "path", "set_by", "modified")
    list_filter = ("cluster", "tenant")
    list_select_related = ("tenant", "cluster", "user", "set_by")
    search_fields = ("path", "tenant__name", "user__username")
