"""The stream page's failover: a confirmation page, then the same service as the API and the
CLI (`replica_failover`), with the page's user as the actor."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect

from portal.web.streams import visible_stream
from portal.web.tenancy import render_page
from replication.errors import StreamgateError
from replication.models import ReplicaLink
from replication.reports import failover_row
from replication.services import replica_failover


@login_required
def stream_failover(request: HttpRequest, pk: int) -> HttpResponse:
    """GET: what a failover of this stream would do, and a form to confirm it; POST: do it."""
    stream = visible_stream(request, pk)
    sources = list(ReplicaLink.objects.restrict(request.user).filter(replica=stream)
                   .select_related("source"))
    if request.method == "POST":
        if request.POST.get("confirm") != "yes":
            messages.error(request, "tick the confirmation box to fail over")
            return redirect("stream-failover", pk)
        force = request.POST.get("force") == "on"
        try:
            failover = replica_failover(replica=stream, force=force, actor=request.user)
        except StreamgateError as err:
            messages.error(request, err.desc)
            return redirect("stream-failover", pk)
        row = failover_row(failover)
        messages.success(request, f"{stream.path} took over from {row['sourcePath']}; "
                                  f"messages possibly missing: {row['messagesMissing']}")
        return redirect("stream-detail", pk)
    return render_page(request, "web/failover_confirm.html",
                       {"stream": stream, "sources": sources})
