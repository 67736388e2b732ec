"""The stream page's failover: a confirmation page, then the same service as the API and the
CLI (`replica_failover`), with the page's user as the actor."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.http import require_POST

from portal.web.forms import field_errors
from portal.web.hints import refusal
from portal.web.streams import row_refusal, visible_stream
from portal.web.tenancy import render_page
from replication.errors import StreamgateError
from replication.models import Failover, ReplicaLink, Stream
from replication.services import (
    replica_failback,
    replica_failover,
    replica_repair,
    replica_verify,
)

FAILOVER_FIELDS = ("source", "force", "confirm")
FAILBACK_FIELDS = ("reverse", "confirm")


def _unticked(doing: str) -> dict[str, str]:
    return {"confirm": f"Nothing has changed yet: tick the confirmation box to {doing}."}


@login_required
def stream_failover(request: HttpRequest, pk: int) -> HttpResponse:
    """GET: what a failover of this stream would do, and a form to confirm it; POST: do it.
    Refused, the page again with the error beside its input and what was ticked kept."""
    stream = visible_stream(request, pk)
    sources = list(ReplicaLink.objects.restrict(request.user).filter(replica=stream)
                   .select_related("source").order_by("source__path"))
    typed = {name: request.POST.get(name, "") for name in FAILOVER_FIELDS}
    errors: dict[str, str] = {}
    if request.method == "POST":
        if typed["confirm"] != "yes":
            errors = _unticked("fail over")
        else:
            try:
                failover = _failover(request, stream, typed)
            except StreamgateError as err:
                errors = field_errors(err, FAILOVER_FIELDS)
            else:
                messages.success(request, f"{stream.path} took over from "
                                          f"{failover.source_path}; messages possibly missing: "
                                          f"{failover.missing_messages}")
                return redirect("stream-detail", pk)
    return render_page(request, "web/failover_confirm.html", {
        "stream": stream, "sources": sources, "typed": typed, "errors": errors},
        status=400 if errors else 200)


def _failover(request: HttpRequest, stream: Stream, typed: dict[str, str]) -> Failover:
    """The failover the form asks for; a source path the page did not offer is refused."""
    source = (Stream.objects.restrict(request.user).by_path(typed["source"], field="source")
              if typed["source"] else None)
    return replica_failover(replica=stream, source=source, force=typed["force"] == "on",
                            actor=request.user)


@login_required
def stream_failback(request: HttpRequest, pk: int) -> HttpResponse:
    """The failback wizard on the promoted stream's page, for its latest failover not yet
    failed back: GET runs the dry run and shows it per partition; POST (confirmed) fails back."""
    replica = visible_stream(request, pk)
    failover = (Failover.objects.restrict(request.user)
                .filter(replica=replica, failed_back_at=None).exclude(source=None)
                .select_related("source").order_by("-at").first())
    if failover is None:
        return render_page(request, "web/failback_wizard.html", {
            "stream": replica, "error": f"{replica.path} took over from no stream that is "
                                        "not back yet: there is nothing to fail back"})
    typed = {name: request.POST.get(name, "") for name in FAILBACK_FIELDS}
    errors: dict[str, str] = {}
    if request.method == "POST":
        errors = _unticked("fail back") if typed["confirm"] != "yes" else {}
        if not errors:
            try:
                return _failback(request, replica, failover, reverse=typed["reverse"] == "on")
            except StreamgateError as err:
                errors = field_errors(err, FAILBACK_FIELDS)
    return _wizard(request, replica, failover, typed, errors)


def _wizard(request: HttpRequest, replica: Stream, failover: Failover, typed: dict[str, str],
            errors: dict[str, str]) -> HttpResponse:
    """The wizard's page: the dry run per partition, and the form with what was ticked."""
    try:
        report, error = replica_failback(source=failover.source, replica=replica, dryrun=True,
                                         actor=request.user), ""
    except StreamgateError as err:
        report, error = None, refusal(err)
    return render_page(request, "web/failback_wizard.html", {
        "stream": replica, "source": failover.source, "failover": failover, "report": report,
        "error": error, "typed": typed, "errors": errors}, status=400 if errors else 200)


def _failback(request: HttpRequest, replica: Stream, failover: Failover, *,
              reverse: bool) -> HttpResponse:
    report = replica_failback(source=failover.source, replica=replica, actor=request.user,
                              reverse=reverse)
    messages.success(request, f"{failover.source.path} is back: {report['keptAside']} messages "
                              f"kept in its .diverged topics, {report['toCopy']} copied")
    return redirect("stream-detail", replica.pk)


def _page_link(request: HttpRequest, pk: int, link_pk: int) -> tuple[Stream, ReplicaLink]:
    source = visible_stream(request, pk)
    link = get_object_or_404(ReplicaLink.objects.restrict(request.user).select_related("replica"),
                             pk=link_pk, source=source)
    return source, link


@login_required
@require_POST
def link_repair(request: HttpRequest, pk: int, link_pk: int) -> HttpResponse:
    """The stream page's "Repair" of a replica verification found diverged: the job's page
    follows it; the stream page shows the verification that ends it."""
    source, link = _page_link(request, pk, link_pk)
    try:
        job = replica_repair(actor=request.user, source=source, replica=link.replica)
    except StreamgateError as err:
        return row_refusal(request, source, "verify", link, err)
    messages.success(request, f"repair of {link.replica.path} started")
    return redirect("job-detail", job.pk)


@login_required
@require_POST
def link_verify_now(request: HttpRequest, pk: int, link_pk: int) -> HttpResponse:
    """The stream page's "Verify now" on one of its replicas: a refusal shows in its row; a
    difference found shows there too, as the row's result."""
    source, link = _page_link(request, pk, link_pk)
    try:
        result = replica_verify(actor=request.user, source=source, replica=link.replica)
    except StreamgateError as err:
        return row_refusal(request, source, "verify", link, err)
    if result["error"]:
        messages.error(request, result["error"])
    else:
        messages.success(request, f"{link.replica.path} verified: "
                                  f"{result['messagesChecked']} new messages equal")
    return redirect("stream-replication", pk)  # where the verification table is
