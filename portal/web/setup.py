"""The set-up wizard.

Manual primary-secondary: the seed's seven steps (docs 004), one screen each, every screen
saying what the step does and the CLI command it stands for, and calling the same service as
that command. The screens after the first are addressed by the two streams' ids, each fetched
through `restrict(user)`, so another tenant's streams are a 404 and the state lives in the
database, not in the session: a user can leave and come back to any step.

Autosetup: `replica_autosetup` (primary-secondary or multi-master, synchronous or not), then a
screen that follows the link and its copy job live.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from portal.web.forms import field_errors
from portal.web.hints import refusal
from portal.web.jobs import visible_jobs
from portal.web.streams import visible_stream
from portal.web.tenancy import current_tenant, page_and_fragment, render_page, tenant_stream_paths
from replication.errors import AlreadyExists, NotFound, StreamgateError
from replication.figures import link_statuses, replica_links
from replication.models import Cluster, Job, ReplicaLink, Stream, Upstream
from replication.paths import parse_stream_path
from replication.services import (
    replica_add,
    replica_autosetup,
    replica_resume,
    stream_create,
    upstream_add,
)
from replication.services.jobs import copystream_start


@dataclass(frozen=True)
class Step:
    number: int
    title: str
    does: str
    cli: str


STEPS = (
    Step(1, "Create the replica",
         "Creates the replica stream with the source's metadata and ACEs (-copymetafrom), so "
         "both ends have the same partitions defaults, time-to-live and permissions.",
         "streamgate stream create -path {replica} -copymetafrom {source}"),
    Step(2, "Register the replica, paused",
         "Registers the replica at the source: the source owner's half of the two-way "
         "agreement. -paused true keeps data from moving until the copy is done and you resume.",
         "streamgate stream replica add -path {source} -replica {replica} -paused true"),
    Step(3, "Check the replica list",
         "Lists the source's replicas, so you can verify you registered the right stream. "
         "Until the next step it waits for its upstream.",
         "streamgate stream replica list -path {source}"),
    Step(4, "Declare the upstream",
         "Authorizes replication at the replica: the replica owner's half of the agreement. "
         "Without it no stream can push data into the replica.",
         "streamgate stream upstream add -path {replica} -upstream {source}"),
    Step(5, "Check the upstream list",
         "Lists the sources the replica accepts, so you can verify the upstream.",
         "streamgate stream upstream list -path {replica}"),
    Step(6, "Copy the messages",
         "Loads the replica with the source's existing messages as a Spark copystream job. "
         "Optional here: once resumed, replication carries the whole backlog itself, only "
         "message by message rather than in bulk.",
         "streamgate copystream -src {source} -dst {replica}"),
    Step(7, "Resume replication",
         "Starts replication: from now on every message produced to the source arrives at "
         "the replica, keeping its topic, partition and offset.",
         "streamgate stream replica resume -path {source} -replica {replica}"),
)
DONE = len(STEPS) + 1
WIZARD_FIELDS = ("source", "replica")
# stream create's -path is the replica the wizard creates; -copymetafrom is the source.
CREATE_ALIASES = {"path": "replica", "copymetafrom": "source"}
# The services' options as the forms label them, so that no refusal quotes a CLI flag.
LABELS = {"source": "the source stream", "copymetafrom": "the source stream",
          "replica": "the replica stream", "path": "the replica stream",
          "useexistingreplica": "the existing replica", "tenant": "the tenant"}


@login_required
def setup_index(request: HttpRequest) -> HttpResponse:
    return render_page(request, "web/setup.html", {"steps": STEPS})


def _tenant_name(request: HttpRequest) -> str | None:
    tenant = current_tenant(request)
    return tenant.name if tenant is not None else None


def _refused(request: HttpRequest, err: StreamgateError) -> dict[str, str]:
    """The refusal in the page's message list (the summary at the top) and beside its field."""
    messages.error(request, refusal(err, LABELS))
    return field_errors(err, WIZARD_FIELDS, CREATE_ALIASES, LABELS)


def _others(path: str) -> bool:
    """Whether a stream at the path is another tenant's (the user cannot see it)."""
    return Stream.objects.filter(path=path).exists()


def own_source(request: HttpRequest, text: str) -> Stream:
    """The source stream picked, through the tenant choke point. Another tenant's stream is
    said to be not the user's: "does not exist, create it" would send them to a create that
    refuses the path (stream create already tells a taken path from a free one)."""
    try:
        return Stream.objects.restrict(request.user).by_path(text, field="source")
    except NotFound:
        path = str(parse_stream_path(text, field="source"))
        if not _others(path):
            raise
        raise NotFound(f"stream {path} is not yours (another tenant's): pick one of your "
                       "streams as the source", field="source") from None


def free_replica(request: HttpRequest, text: str) -> str:
    """The replica's path, refused at once when another tenant's stream holds it."""
    path = str(parse_stream_path(text, field="replica"))
    visible = Stream.objects.restrict(request.user).filter(path=path).exists()
    if not visible and _others(path):
        raise AlreadyExists(f"{path} is another tenant's stream, not yours: choose another "
                            "path for the replica", field="replica")
    return path


def pickers(request: HttpRequest, form: dict[str, str]) -> dict[str, list[str]]:
    """The fields' choices: the current tenant's streams as sources; a path on each cluster
    for the replica, named as the source when one is typed."""
    name = form["source"].rstrip("/").rsplit("/", 1)[-1] if form["source"].count("/") >= 3 \
        else ""
    clusters = Cluster.objects.order_by("name").values_list("name", flat=True)
    return {"source_options": tenant_stream_paths(request),
            "replica_options": [f"/mapr/{cluster}/{name}" for cluster in clusters]}


@login_required
def manual_start(request: HttpRequest) -> HttpResponse:
    """Step 1: `stream create -copymetafrom`."""
    form = {k: request.POST.get(k, "").strip() for k in WIZARD_FIELDS}
    errors: dict[str, str] = {}
    if request.method == "POST":
        try:
            source = own_source(request, form["source"])
            replica = stream_create(actor=request.user, path=free_replica(request,
                                                                          form["replica"]),
                                    copymetafrom=source.path, tenant=_tenant_name(request))
        except StreamgateError as err:
            errors = _refused(request, err)
        else:
            messages.success(request, f"{replica.path} created with the metadata of "
                                      f"{source.path}")
            return redirect("setup-manual-step", source.pk, replica.pk, 2)
    context = {"step": STEPS[0], "steps": STEPS, "number": 1, "form": form, "errors": errors,
               **pickers(request, form),
               "cli": STEPS[0].cli.format(source=form["source"] or "<source>",
                                          replica=form["replica"] or "<replica>")}
    return render_page(request, "web/setup_manual.html", context,
                       status=400 if request.method == "POST" else 200)


def _link(source: Stream, replica: Stream) -> ReplicaLink | None:
    return (ReplicaLink.objects.filter(source=source, replica=replica).with_agreement()
            .select_related("source", "replica").first())


def _copy(request: HttpRequest, source: Stream, replica: Stream) -> Job:
    return copystream_start(actor=request.user, source_path=source.path,
                            destination_path=replica.path)


ACTIONS: dict[int, Callable[[HttpRequest, Stream, Stream], Any]] = {
    2: lambda r, s, d: replica_add(actor=r.user, source=s, replica=d, paused=True),
    4: lambda r, s, d: upstream_add(actor=r.user, replica=d, source=s),
    6: _copy,
    7: lambda r, s, d: replica_resume(actor=r.user, source=s, replica=d),
}


def _act(request: HttpRequest, number: int, source: Stream, replica: Stream) -> HttpResponse:
    here = redirect("setup-manual-step", source.pk, replica.pk, number)
    if number == 6 and request.POST.get("skip"):
        return redirect("setup-manual-step", source.pk, replica.pk, 7)
    try:
        done = ACTIONS[number](request, source, replica)
    except StreamgateError as err:
        messages.error(request, refusal(err))
        return here
    if isinstance(done, Job):  # the copy runs on: this screen shows its progress
        return redirect(f"{here.url}?job={done.pk}")
    messages.success(request, f"step {number} done: {STEPS[number - 1].title.lower()}")
    return redirect("setup-manual-step", source.pk, replica.pk, number + 1)


def _replica_rows(source: Stream) -> list[dict[str, Any]]:
    """The source's replicas as the setup screens list them, with how each is doing."""
    links = replica_links(source)
    status = link_statuses(links)
    return [{"path": link.replica.path, "state": status[link.pk].state, "paused": link.paused,
             "waiting": not link.agreed, "pending": status[link.pk].pending.messages}
            for link in links]


def _screen(request: HttpRequest, number: int, source: Stream, replica: Stream) -> dict[str, Any]:
    link = _link(source, replica)
    context: dict[str, Any] = {"link": link, "state": link.replica_state() if link else None}
    if number in (3, DONE):
        context["replica_rows"] = _replica_rows(source)
    if number == 5:
        context["upstreams"] = replica.upstreams.select_related("source__cluster").order_by("idx")
    if number == 6:
        job_id = request.GET.get("job", "")
        context["job"] = (get_object_or_404(visible_jobs(request), pk=job_id)
                          if job_id.isdigit() else None)
    context["done"] = done = {1: True, 2: link is not None, 4: Upstream.objects.filter(
        source=source, replica=replica).exists(), 7: link is not None and not link.paused}
    context["step_done"] = done.get(number, False)
    return context


@login_required
def manual_step(request: HttpRequest, source_pk: int, replica_pk: int, number: int
                ) -> HttpResponse:
    if not 2 <= number <= DONE:
        raise Http404("no such step")
    source, replica = visible_stream(request, source_pk), visible_stream(request, replica_pk)
    if request.method == "POST":
        if number not in ACTIONS:
            raise Http404("this step only shows")
        return _act(request, number, source, replica)
    step = STEPS[number - 1] if number < DONE else None
    context = {"steps": STEPS, "number": number, "step": step, "source": source,
               "replica": replica, "is_done": number == DONE,
               "cli": step.cli.format(source=source.path, replica=replica.path) if step else "",
               **_screen(request, number, source, replica)}
    if number == 6 and request.GET.get("fragment") and context["job"]:
        return render(request, "web/_setup_copy_job.html", context)  # live.js re-fetches it
    return render_page(request, "web/setup_manual.html", context)


@login_required
def auto_start(request: HttpRequest) -> HttpResponse:
    form = {k: request.POST.get(k, "").strip() for k in WIZARD_FIELDS}
    flags = {k: request.POST.get(k) == "on" for k in ("multimaster", "synchronous")}
    errors: dict[str, str] = {}
    if request.method == "POST":
        try:
            source = own_source(request, form["source"])
            link = replica_autosetup(actor=request.user, source=source,
                                     replica=free_replica(request, form["replica"]),
                                     multimaster=flags["multimaster"],
                                     tenant=_tenant_name(request),
                                     synchronous=flags["synchronous"])
        except StreamgateError as err:
            errors = _refused(request, err)
        else:
            messages.success(request, f"autosetup of {link.replica.path} started")
            return redirect("setup-auto-progress", link.pk)
    return render_page(request, "web/setup_auto.html", {"form": form, "flags": flags,
                                                        "errors": errors,
                                                        **pickers(request, form)},
                       status=400 if request.method == "POST" else 200)


def _auto_context(request: HttpRequest, pk: int) -> dict[str, Any]:
    link = get_object_or_404(ReplicaLink.objects.restrict(request.user).with_agreement()
                             .select_related("source", "replica"), pk=pk)
    return {"link": link, "state": link.replica_state(),
            "job": visible_jobs(request).filter(link=link).order_by("-created", "-pk").first(),
            "reverse": ReplicaLink.objects.filter(source=link.replica, replica=link.source)
            .exists()}


# Autosetup's progress page, and its status part alone (re-fetched as the link and job move).
auto_progress, auto_status = page_and_fragment("web/setup_auto_progress.html",
                                               "web/_setup_auto_status.html", _auto_context)
