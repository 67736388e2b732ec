"""A stream's consumer groups: committed offsets and lag per partition and in all, the live
members of Kafka groups (from a listener's coordinator, through replication.groups.members)
with the partitions each is assigned and the group's state, the replicas' copies of the cursors
(can the group fail over?), and a form that resets a group's offsets (consumeperm, audited
through replication.services.groups): previewed first, as kafka-consumer-groups' --dry-run,
then applied; refused while the group has live members."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect

from portal.web.forms import FORM, field_errors
from portal.web.hints import refusal
from portal.web.streams import visible_stream
from portal.web.tenancy import current_tenant, render_page
from replication.errors import InvalidInput, StreamgateError
from replication.groups.members import LiveGroup, LiveMember, live_groups
from replication.models import Stream
from replication.services.groups import (
    RESET_TO,
    GroupOffsets,
    PartitionOffsets,
    ResetRow,
    group_offsets,
    group_offsets_reset,
    tenant_groups,
)

RESET_FIELDS = ("group", "topic", "partition", "to", "timestamp", "offset")
RESET_LABELS = {"earliest": "the earliest message kept", "latest": "the end (skip everything)",
                "timestamp": "the first message at or after a time", "offset": "an offset"}


def _reset_options(typed: dict[str, str]) -> dict[str, Any]:
    """The service's arguments from the form; InvalidInput names the field a value is wrong
    in."""
    timestamp_ms = offset = None
    if typed["to"] == "timestamp" and typed["timestamp"]:
        try:
            at = datetime.fromisoformat(typed["timestamp"]).replace(tzinfo=UTC)
        except ValueError as err:
            raise InvalidInput("write the time as 2026-11-25 14:30 (UTC)",
                               field="timestamp") from err
        timestamp_ms = int(at.timestamp() * 1000)
    if typed["to"] == "offset" and typed["offset"]:
        if not typed["offset"].isdigit():
            raise InvalidInput("an offset is a whole number, 0 or more", field="offset")
        offset = int(typed["offset"])
    partition = typed["partition"].strip()
    if partition and not partition.isdigit():
        raise InvalidInput("a partition is a whole number, 0 or more; leave it blank for "
                           "every partition", field="partition")
    return {"group": typed["group"].strip(), "topic": typed["topic"], "to": typed["to"],
            "timestamp_ms": timestamp_ms, "offset": offset,
            "partitions": [int(partition)] if partition else None}


@dataclass
class GroupCard:
    """One group on the tab: its committed offsets (a Kafka group that has committed nothing
    yet has none) beside its live members (a group consuming through REST or the CLI has
    none: only Kafka groups have a coordinator)."""

    group: str
    offsets: GroupOffsets
    live: LiveGroup | None
    failover: list[tuple[bool, int]]

    def rows(self) -> list[tuple[PartitionOffsets, LiveMember | None]]:
        """Each partition's offsets with the live member assigned it, if any."""
        return [(p, self.live.owner_of(p.topic, p.partition) if self.live else None)
                for p in self.offsets.partitions]


def _cards(offsets: list[GroupOffsets], live: list[LiveGroup],
           replicas: list[str]) -> list[GroupCard]:
    by_name = {g.group: g for g in live}
    committed = {g.group: g for g in offsets}
    cards = []
    for name in sorted(by_name.keys() | committed.keys()):
        group = committed.get(name) or GroupOffsets(name, [])
        cards.append(GroupCard(name, group, by_name.get(name),
                               [group.failover(path) for path in replicas]))
    return cards


def _context(request: HttpRequest, stream: Stream) -> dict[str, Any]:
    try:
        offsets, replicas = group_offsets(actor=request.user, stream=stream)
        live = live_groups(actor=request.user, stream=stream)
    except StreamgateError as err:
        return {"denied": refusal(err), "groups": [], "replicas": []}
    return {"groups": _cards(offsets, live, replicas), "replicas": replicas}


def _post(request: HttpRequest, stream: Stream,
          typed: dict[str, str]) -> tuple[HttpResponse | None, list[ResetRow], dict[str, str]]:
    """A reset form posted: previewed (the default, as kafka-consumer-groups' --dry-run) or,
    with action=apply, applied and redirected; refused, the errors by field."""
    try:
        options = _reset_options(typed)
        apply = request.POST.get("action") == "apply"
        rows = group_offsets_reset(actor=request.user, stream=stream, dry_run=not apply,
                                   **options)
    except StreamgateError as err:
        return None, [], field_errors(err, RESET_FIELDS, {"partitions": "partition"})
    if not apply:
        return None, rows, {}
    shown = ", ".join(f"partition {r.partition} to {r.new}" for r in rows)
    messages.success(request, f"offsets of group {options['group']} on {typed['topic']} "
                              f"reset: {shown}")
    return redirect("stream-groups", stream.pk), [], {}


@login_required
def stream_groups(request: HttpRequest, pk: int) -> HttpResponse:
    stream = visible_stream(request, pk)
    # A group named in the address (the tenant's groups page's "Reset offsets…") fills the form.
    typed = {name: request.POST.get(name, request.GET.get(name, "") if name == "group" else "")
             for name in RESET_FIELDS}
    preview: list[ResetRow] = []
    errors: dict[str, str] = {}
    if request.method == "POST":
        done, preview, errors = _post(request, stream, typed)
        if done is not None:
            return done
    context = {**_context(request, stream), "stream": stream, "typed": typed, "errors": errors,
               "preview": preview, "topics": list(stream.topics.values_list("name", flat=True)),
               "reset_to": [(to, RESET_LABELS[to]) for to in RESET_TO], "FORM": FORM,
               "can_reset": stream.allows(request.user, "consumeperm")}
    return render_page(request, "web/stream_groups.html", context,
                       status=400 if errors else 200)


@login_required
def groups_page(request: HttpRequest) -> HttpResponse:
    """Every consumer group of the current tenant: state, members, where it has committed and
    how far behind it is, the most behind first; each stream links to its groups tab, where
    offsets are reset."""
    tenant = current_tenant(request)
    found = tenant_groups(actor=request.user, tenant=tenant) if tenant is not None else []
    return render_page(request, "web/groups.html", {"groups": found})
