"""Approvals: a replica registered at its source waits until the replica's owner declares the
upstream (DESIGN.md invariant 5). Approve is `upstream_add`; Reject is `replica_remove`, which
needs adminperm on the source too, so it is offered only to users who hold both (otherwise the
request simply stays pending: a replica owner cannot undo the source owner's registration)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from portal.web.hints import refusal
from portal.web.tenancy import render_page
from replication.errors import Conflict, StreamgateError
from replication.models import ReplicaLink
from replication.services import replica_remove, upstream_add
from replication.services.common import check_origins


def _pending(request: HttpRequest) -> QuerySet[ReplicaLink]:
    return (
        ReplicaLink.objects.restrict(request.user)
        .with_agreement()
        .filter(is_agreed=False)
        .select_related("source__tenant", "replica__tenant", "created_by")
        .order_by("created")
    )


def _conflict(link: ReplicaLink) -> str:
    """The topic-origin conflict adding the upstream would hit, if any. check_origins only
    reads, so asking costs no lock and changes nothing."""
    try:
        check_origins([link.replica_id], extra_edges=[(link.source_id, link.replica_id)])
    except Conflict as err:
        return refusal(err)
    return ""


def _card(request: HttpRequest, link: ReplicaLink) -> dict[str, Any]:
    return {
        "link": link,
        "topics": list(link.source.topics.values_list("name", flat=True)),
        "conflict": _conflict(link),
        "can_reject": link.source.allows(request.user, "adminperm"),
    }


def _cards(request: HttpRequest) -> list[dict[str, Any]]:
    # ACEs are evaluated in Python, so the adminperm filter runs on the (short) pending list.
    return [_card(request, link) for link in _pending(request)
            if link.replica.allows(request.user, "adminperm")]


@login_required
def approvals(request: HttpRequest) -> HttpResponse:
    return render_page(request, "web/approvals.html", {"cards": _cards(request)})


@login_required
def approvals_list(request: HttpRequest) -> HttpResponse:
    """The pending list alone, re-fetched by static/js/live.js on events."""
    return render(request, "web/_approvals_list.html", {"cards": _cards(request)})


def _link(request: HttpRequest, pk: int) -> ReplicaLink:
    return get_object_or_404(
        ReplicaLink.objects.restrict(request.user).select_related("source", "replica"), pk=pk
    )


@login_required
def approval_detail(request: HttpRequest, pk: int) -> HttpResponse:
    link = _link(request, pk)
    return render_page(request, "web/approval_detail.html", _card(request, link))


@login_required
@require_POST
def approval_decide(request: HttpRequest, pk: int, decision: str) -> HttpResponse:
    if decision not in ("approve", "reject"):
        raise Http404("no such decision")
    link = _link(request, pk)
    try:
        if decision == "approve":
            upstream_add(actor=request.user, replica=link.replica, source=link.source)
        else:
            replica_remove(actor=request.user, source=link.source, replica=link.replica)
    except StreamgateError as err:
        messages.error(request, refusal(err))
    else:
        messages.success(request, f"{link.replica.path} <- {link.source.path}: {decision}d")
    return redirect("approvals")
