"""The audit trail: one mechanism for every control-plane change, whichever path made it.

Who and through which interface live in a context variable, set per request by
`AuditContextMiddleware` (the interface from the URL prefix) and per Celery task by the task
signals (system). Model signals on the control-plane models write the records: pre_save keeps
the row as stored, post_save and post_delete write what changed. Services, admin and pages
therefore need no audit calls; a change made with QuerySet.update() or bulk_create() bypasses
signals, which is why the engine's runtime fields (heartbeats, progress, errors) are not
audited and why control-plane writes use save() and delete().
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import structlog
from django.contrib.auth import get_user_model
from django.db import models
from django.db.models.signals import post_delete, post_save, pre_save
from django.http import HttpRequest, HttpResponse

from accounts.models import Invitation, Membership, Plan, Tenant
from operations.models import AuditAction, AuditEvent, Interface
from replication import ace
from replication.models import (
    PERMISSIONS,
    Cluster,
    Failover,
    Gateway,
    Rebalance,
    RegistryConfig,
    ReplicaLink,
    Stream,
    SubjectVersion,
    Topic,
    Upstream,
)
from replication.signals import (
    group_offsets_reset_done,
    partition_moved,
    replica_repair_started,
    stream_purged,
)


@dataclass(frozen=True)
class AuditContext:
    interface: str
    # The request whose user is the actor. Read at write time, not at the start of the
    # request: DRF authenticates tokens inside the view, after the middleware ran.
    request: HttpRequest | None = None


SYSTEM = AuditContext(Interface.SYSTEM)
_current: contextvars.ContextVar[AuditContext] = contextvars.ContextVar("audit", default=SYSTEM)

PREFIXES = (("/api/", Interface.API), ("/rest/", Interface.REST), ("/admin/", Interface.ADMIN),
            ("/schemas/registry/", Interface.API))

# Fields the engine keeps up to date as it runs: state, not configuration.
RUNTIME_FIELDS: dict[type[models.Model], frozenset[str]] = {
    Stream: frozenset({"created", "modified"}),
    ReplicaLink: frozenset({"created", "state", "copy_percentage", "last_error",
                            "last_error_gateway", "last_progress", "mode", "mode_since",
                            "mode_reason", "last_verified", "verified_upto",
                            "verify_duration_ms", "verify_error"}),
    Gateway: frozenset({"created", "last_heartbeat", "announced_status", "batches_applied",
                        "messages_applied", "bytes_applied", "errors"}),
    # A rebalance's progress, kept by its run with update(): the request is what is audited.
    Rebalance: frozenset({"created", "state", "moves_done", "bytes_done", "error", "started",
                          "finished"}),
    # An invitation's token hash is the link's credential in another form: never copied out.
    Invitation: frozenset({"created", "token_hash"}),
}
AUDITED: tuple[type[models.Model], ...] = (Tenant, Membership, Invitation, Cluster, Gateway,
                                           Stream, Topic, ReplicaLink, Upstream, Failover, Plan,
                                           SubjectVersion, RegistryConfig, Rebalance)


def interface_of(path: str) -> str:
    return next((kind for prefix, kind in PREFIXES if path.startswith(prefix)), Interface.WEB)


@contextmanager
def audit_context(interface: str, request: HttpRequest | None = None) -> Iterator[None]:
    token = _current.set(AuditContext(interface, request))
    try:
        yield
    finally:
        _current.reset(token)


def enter_system() -> contextvars.Token[AuditContext]:
    """Changes from here on are the system's (a Celery task), until `leave`."""
    return _current.set(SYSTEM)


def leave(token: contextvars.Token[AuditContext]) -> None:
    _current.reset(token)


class AuditContextMiddleware:
    """Record who changes what through this request, and through which interface."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        with audit_context(interface_of(request.path_info), request):
            return self.get_response(request)


# --- what a record says -----------------------------------------------------------------------


def audited_fields(model: type[models.Model]) -> list[models.Field]:
    skip = RUNTIME_FIELDS.get(model, frozenset({"created"}))
    return [f for f in model._meta.concrete_fields if f.name not in skip and not f.primary_key]


def values_of(instance: models.Model) -> dict[str, Any]:
    return readable(type(instance), {f.attname: f.value_from_object(instance)
                                     for f in audited_fields(type(instance))})


def readable(model: type[models.Model], values: dict[str, Any] | None) -> dict[str, Any] | None:
    """A tenant's plan by its name (`plan`), not its row id: what the record says outlives
    the plan's row, and a reader knows plans by name."""
    if values is None or model is not Tenant or "plan_id" not in values:
        return values
    values = dict(values)
    plan = values.pop("plan_id")
    values["plan"] = (Plan.objects.filter(pk=plan).values_list("name", flat=True).first()
                      if plan is not None else None)
    return values


def _tenants(instance: models.Model) -> tuple[int | None, int | None]:
    if isinstance(instance, Tenant):
        return instance.pk, None
    if isinstance(instance, Stream | Membership | Invitation | SubjectVersion | RegistryConfig):
        return instance.tenant_id, None
    if isinstance(instance, Topic):
        return _stream_tenant(instance.stream_id), None
    if isinstance(instance, ReplicaLink | Upstream):
        # The source side first: its owner registered the link.
        source, replica = _stream_tenant(instance.source_id), _stream_tenant(instance.replica_id)
        return source, replica if replica != source else None
    if isinstance(instance, Failover):
        # The replica's owner acted; the source's owner sees it too.
        replica = _stream_tenant(instance.replica_id)
        source = _stream_tenant(instance.source_id) if instance.source_id else None
        return replica, source if source != replica else None
    return None, None  # clusters and gateways: infrastructure, operators only


def _stream_tenant(stream_id: int) -> int | None:
    return Stream.objects.filter(pk=stream_id).values_list("tenant_id", flat=True).first()


def _describe(instance: models.Model) -> str:
    if isinstance(instance, ReplicaLink | Upstream):
        paths = dict(Stream.objects.filter(pk__in=[instance.source_id, instance.replica_id])
                     .values_list("pk", "path"))
        source = paths.get(instance.source_id, f"stream {instance.source_id}")
        replica = paths.get(instance.replica_id, f"stream {instance.replica_id}")
        return f"{source} -> {replica}"
    if isinstance(instance, Topic):
        path = Stream.objects.filter(pk=instance.stream_id).values_list("path", flat=True)
        return f"{path.first() or instance.stream_id}:{instance.name}"
    if isinstance(instance, Gateway):
        cluster = Cluster.objects.filter(pk=instance.cluster_id).values_list("name", flat=True)
        return f"{instance.name}@{cluster.first() or instance.cluster_id}"
    if isinstance(instance, Invitation):
        tenant = Tenant.objects.filter(pk=instance.tenant_id).first()
        whom = f" for {instance.email}" if instance.email else ""
        return f"invitation to {tenant or instance.tenant_id} as {instance.role}{whom}"
    if isinstance(instance, Membership):
        user = get_user_model().objects.filter(pk=instance.user_id).first()
        tenant = Tenant.objects.filter(pk=instance.tenant_id).first()
        return f"{user or instance.user_id} in {tenant or instance.tenant_id} ({instance.role})"
    return str(instance)


def _action(instance: models.Model, created: bool, changed: dict[str, Any]) -> str:
    if created and isinstance(instance, Failover):
        return AuditAction.FAILOVER
    if isinstance(instance, Tenant) and set(changed) == {"approved"} and instance.approved:
        return AuditAction.APPROVE  # an operator letting a signed-up tenant create streams
    if isinstance(instance, SubjectVersion) and set(changed) == {"deleted"}:
        return AuditAction.DELETE  # a soft delete: the version stays readable with ?deleted
    if isinstance(instance, ReplicaLink) and set(changed) == {"paused"}:
        return AuditAction.PAUSE if instance.paused else AuditAction.RESUME
    if created and isinstance(instance, Upstream) and ReplicaLink.objects.filter(
        source=instance.source_id, replica=instance.replica_id
    ).exists():
        return AuditAction.APPROVE  # completes a registered link's two-way agreement
    return AuditAction.CREATE if created else AuditAction.EDIT


def record(instance: models.Model, action: str, before: dict[str, Any] | None,
           after: dict[str, Any] | None) -> AuditEvent:
    context = _current.get()
    user = getattr(context.request, "user", None)
    actor = user if user is not None and user.is_authenticated else None
    tenant, peer = _tenants(instance)
    tenant_name = (instance.name if isinstance(instance, Tenant) else
                   Tenant.objects.filter(pk=tenant).values_list("name", flat=True).first())
    return AuditEvent.objects.create(
        actor=actor, actor_name=actor.get_username() if actor else "",
        interface=context.interface, request_id=_request_id(), tenant_id=tenant,
        peer_tenant_id=peer, tenant_name=tenant_name or "",
        object_type=instance._meta.model_name, object_id=str(instance.pk),
        object_repr=_describe(instance)[:2100], action=action, before=before, after=after,
    )


def hide_aces(events: Iterable[AuditEvent], user: Any) -> list[AuditEvent]:
    """The events as `user` may read them: a stream's ACEs only for holders of its adminperm,
    as `stream info` shows them (deleted streams' to nobody); operators read them all, as in
    the admin site. The events' copies in memory lose the ACE fields; nothing is saved."""
    events = list(events)
    if user.is_staff:
        return events
    ids = {int(e.object_id) for e in events if e.object_type == "stream" and e.object_id.isdigit()}
    identities: dict[int, ace.Identity] = {}
    readable = set()
    for stream in Stream.objects.filter(pk__in=ids):
        who = identities.get(stream.tenant_id) or identities.setdefault(
            stream.tenant_id, stream.identity_of(user))
        if ace.allows(stream.adminperm, who):
            readable.add(str(stream.pk))
    for event in events:
        if event.object_type == "stream" and event.object_id not in readable:
            event.before, event.after = _without_aces(event.before), _without_aces(event.after)
    return events


def _without_aces(values: Any) -> Any:
    if not isinstance(values, dict):
        return values
    return {name: value for name, value in values.items() if name not in PERMISSIONS}


def _request_id() -> str:
    return str(structlog.contextvars.get_contextvars().get("request_id", ""))[:64]


# --- the signal handlers ----------------------------------------------------------------------


def _before_save(sender: type[models.Model], instance: models.Model, raw: bool = False,
                 **kwargs: Any) -> None:
    if raw or instance.pk is None or instance._state.adding:
        instance._audit_before = None  # type: ignore[attr-defined]
        return
    names = [f.attname for f in audited_fields(sender)]
    instance._audit_before = readable(  # type: ignore[attr-defined]
        sender, sender._default_manager.filter(pk=instance.pk).values(*names).first())


def _after_save(sender: type[models.Model], instance: models.Model, created: bool,
                raw: bool = False, **kwargs: Any) -> None:
    if raw:
        return
    after = values_of(instance)
    stored = getattr(instance, "_audit_before", None)
    if created or stored is None:
        record(instance, _action(instance, True, after), None, after)
        return
    changed = {name for name, value in after.items() if stored.get(name) != value}
    if changed:
        diff = {name: after[name] for name in sorted(changed)}
        record(instance, _action(instance, False, diff),
               {name: stored[name] for name in sorted(changed)}, diff)


def _after_delete(sender: type[models.Model], instance: models.Model, **kwargs: Any) -> None:
    record(instance, AuditAction.DELETE, values_of(instance), None)


def _stream_purged(sender: type[models.Model], stream: Stream, actor: Any,
                   details: dict[str, Any], **kwargs: Any) -> None:
    record(stream, AuditAction.PURGE, None, details)


def _group_offsets_reset(sender: type[models.Model], stream: Stream, actor: Any,
                         details: dict[str, Any], **kwargs: Any) -> None:
    # A group's cursors live in the message store, not in a model: recorded on the stream,
    # the offsets per partition before and after.
    common = {k: details[k] for k in ("group", "topic", "to", "timestamp_ms")}
    record(stream, AuditAction.RESET, {**common, "offsets": details["before"]},
           {**common, "offsets": details["after"]})


def _replica_repair_started(sender: type[models.Model], link: ReplicaLink, actor: Any,
                            details: dict[str, Any], **kwargs: Any) -> None:
    record(link, AuditAction.REPAIR, None, details)


def _partition_moved(sender: type[models.Model], stream: Stream, actor: Any,
                     details: dict[str, Any], **kwargs: Any) -> None:
    # Placement rows are not audited (a stream's drop deletes thousands): the move is recorded
    # on the stream, the partition's group before and after.
    where = {k: details[k] for k in ("topic", "partition")}
    record(stream, AuditAction.MOVE, {**where, "group": details["from"]},
           {**where, "group": details["to"], "messagesCopied": details["messagesCopied"]})


def connect_receivers() -> None:
    partition_moved.connect(_partition_moved, dispatch_uid="operations.audit.partition_moved")
    replica_repair_started.connect(_replica_repair_started,
                                   dispatch_uid="operations.audit.replica_repair_started")
    stream_purged.connect(_stream_purged, dispatch_uid="operations.audit.stream_purged")
    group_offsets_reset_done.connect(_group_offsets_reset,
                                     dispatch_uid="operations.audit.group_offsets_reset")
    for model in AUDITED:
        uid = f"operations.audit.{model._meta.label_lower}"
        pre_save.connect(_before_save, sender=model, dispatch_uid=f"{uid}.pre")
        post_save.connect(_after_save, sender=model, dispatch_uid=f"{uid}.post")
        post_delete.connect(_after_delete, sender=model, dispatch_uid=f"{uid}.delete")

