"""audit list: the trail of control-plane changes (operations/audit.py), newest first.

Tenant members see the changes to their tenants' objects; operators see every change,
clusters and gateways included.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Q, QuerySet

from operations.audit import AUDITED, hide_aces
from operations.models import AuditAction, AuditEvent, Interface
from portal.rest.commands.registry import Row, command, stream_at
from portal.rest.options import Choice, Int, Str, StreamPath
from replication.figures import epoch_ms

TYPES = tuple(model._meta.model_name for model in AUDITED)


@command(
    "audit/list",
    StreamPath("path", "only changes to this stream, its topics, replicas and upstreams"),
    Choice("type", "only changes to this kind of object", choices=TYPES),
    Choice("action", "only this action", choices=tuple(AuditAction.values)),
    Choice("interface", "only changes made through this interface",
           choices=tuple(Interface.values)),
    Str("user", "only changes made by this user"),
    Int("since", "only changes at or after this time (epoch milliseconds)", min=0),
    Int("start", "skip this many changes (default 0)", min=0, default=0),
    Int("limit", "list at most this many (default 100)", min=1, max=10_000, default=100),
    summary="List control-plane changes: who, tenant, what, before and after, when, how.",
    changes=False,
)
def audit_list(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    events = _filtered(AuditEvent.objects.restrict(user), user, opts)
    window = events.order_by("-at", "-pk")[opts["start"]:opts["start"] + opts["limit"]]
    return [audit_row(event) for event in hide_aces(window, user)]


def _filtered(events: QuerySet[AuditEvent], user: AbstractBaseUser,
              opts: dict[str, Any]) -> QuerySet[AuditEvent]:
    if opts["path"] is not None:
        stream = stream_at(user, opts)  # another tenant's stream reads as a missing one
        path = stream.path
        events = events.filter(
            Q(object_type="stream", object_id=str(stream.pk))
            | Q(object_repr__startswith=f"{path}:") | Q(object_repr__startswith=f"{path} -> ")
            | Q(object_repr__endswith=f" -> {path}")
        )
    for option, field in (("type", "object_type"), ("action", "action"),
                          ("interface", "interface"), ("user", "actor_name")):
        if opts[option] is not None:
            events = events.filter(**{field: opts[option]})
    if opts["since"] is not None:
        events = events.filter(at__gte=datetime.fromtimestamp(opts["since"] / 1000, tz=UTC))
    return events


def audit_row(event: AuditEvent) -> Row:
    return {
        "time": epoch_ms(event.at),
        "user": event.actor_name or "system",
        "interface": event.interface,
        "tenant": event.tenant_name,
        "type": event.object_type,
        "id": event.object_id,
        "object": event.object_repr,
        "action": event.action,
        "before": event.before,
        "after": event.after,
        "requestid": event.request_id,
    }
