"""Stream pages: list and create, detail, replica actions, ACE edit (the message browser:
portal/web/messages.py; consumer groups: portal/web/groups.py).

Every stream is fetched through `Stream.objects.restrict(user)` (another tenant's: 404) and
every change goes through the same service as the API, with `actor=request.user`, so the
permission rules (ACEs) are the API's own; a refusal shows the service's `desc`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import orjson
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import Count, Q
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from operations.throughput import stream_throughput
from operations.usage import stored_bytes
from portal.web.access import access_check
from portal.web.forms import field_errors
from portal.web.health import LINK_VALUES, links_health, rows_health, streams_health
from portal.web.hints import refusal
from portal.web.paging import paged
from portal.web.stream_health import TAB_URLS, stream_attention
from portal.web.templatetags.human import compaction_line, row_key
from portal.web.tenancy import current_tenant, render_page
from replication import ace
from replication.errors import InvalidInput, StreamgateError
from replication.figures import storage_figures
from replication.lag_history import (
    KEEP_SECONDS,
    SAMPLE_SECONDS,
    for_chart,
    gc_paused,
    lag_history,
)
from replication.models import (
    PERMISSIONS,
    CleanupPolicy,
    Compression,
    ReplicaLink,
    Stream,
    TimestampType,
)
from replication.services import (
    replica_add,
    replica_pause,
    replica_remove,
    replica_resume,
    stream_create,
    stream_edit,
)
from replication.services.compaction import compaction_summary
from replication.services.replicas import LINK_OPTIONS
from replication.stores import store_for


def visible_stream(request: HttpRequest, pk: int) -> Stream:
    return get_object_or_404(
        Stream.objects.restrict(request.user).select_related("cluster", "tenant"), pk=pk
    )


def _aces(data: Any) -> dict[str, str]:
    # A blank ACE field keeps the default (the creator alone, or the current value).
    return {perm: data[perm].strip() for perm in PERMISSIONS if data.get(perm, "").strip()}


def _list_figures(streams: Iterable[Stream]) -> None:
    """Each listed stream's health (the worst of the replica links it is a source or a replica
    of, from the lag recorder's last samples), bytes stored (one store query per cluster) and
    produce rate (messages a second over the throughput recorder's last interval; None before
    its second sample), set on it."""
    streams = list(streams)
    ids = [stream.pk for stream in streams]
    rows = list(ReplicaLink.objects.with_agreement().filter(
        Q(source_id__in=ids) | Q(replica_id__in=ids)).values(*LINK_VALUES))
    rows_health(rows)
    health, stored, rates = streams_health(rows), stored_bytes(streams), stream_throughput(ids)
    for stream in streams:
        stream.health = health.get(stream.pk)
        stream.stored = stored[stream.uuid]
        stream.rate = rates[stream.pk][-1][1] if rates[stream.pk] else None


@login_required
def stream_list(request: HttpRequest) -> HttpResponse:
    tenant = current_tenant(request)
    form: dict[str, str] = {}
    errors: dict[str, str] = {}
    if request.method == "POST":
        form = {key: request.POST.get(key, "") for key in ("path", "compact", *PERMISSIONS)}
        compaction = {"compact": True} if form["compact"] else {}  # -compact (issue 31)
        try:
            stream = stream_create(actor=request.user, path=form["path"].strip(),
                                   tenant=tenant.name if tenant else None, **_aces(form),
                                   **compaction)
        except StreamgateError as err:
            errors = field_errors(err, form)
        else:
            return redirect("stream-detail", stream.pk)
    streams = Stream.objects.restrict(request.user).select_related("cluster")
    if tenant is not None:
        streams = streams.filter(tenant=tenant)
    query = request.GET.get("q", "").strip()
    if query:  # a part of the path, as the topology's filter takes it
        streams = streams.filter(path__icontains=query)
    shown = paged(request, streams.annotate(num_topics=Count("topics")).order_by("path"))
    _list_figures(shown["page"])
    context = {"streams": shown["page"], "pager": shown["pager"],
               "query": query, "form": form, "errors": errors,
               "ace_fields": [(perm, form.get(perm, "")) for perm in PERMISSIONS]}
    return render_page(request, "web/streams.html", context, status=400 if form else 200)


@login_required
@require_GET
def ace_check(request: HttpRequest) -> HttpResponse:
    """Live ACE validation for htmx: the parser's own position and reason, or the canonical
    form the stream will store."""
    field = next((p for p in PERMISSIONS if p in request.GET), PERMISSIONS[0])
    text = request.GET.get(field, "")
    context: dict[str, Any] = {"text": text}
    if text.strip():
        try:
            context["canonical"] = str(ace.parse(text))
        except ace.AceError as err:
            context.update(error=err.reason, position=err.position,
                           before=text[: err.position], at=text[err.position:])
    return render(request, "web/_ace_check.html", context)


def _replica_context(request: HttpRequest, stream: Stream) -> dict[str, Any]:
    outgoing = list(ReplicaLink.objects.filter(source=stream).select_related("replica",
                    "created_by").with_agreement().order_by("idx"))
    incoming = list(ReplicaLink.objects.filter(replica=stream).select_related("source")
                    .with_agreement())
    health = links_health([*outgoing, *incoming])
    # Each row's pause/resume/remove URL, built from one reverse() rather than three per row
    # (64 rows); the layout is urls.py's streams/<pk>/replicas/<link_pk>/<action>/.
    prefix = reverse("stream-replicas", args=[stream.pk])
    for link in outgoing:
        link.actions_url = f"{prefix}{link.pk}/"  # type: ignore[attr-defined]
    return {
        "stream": stream,
        "is_admin": stream.allows(request.user, "adminperm"),
        "replicas": [(link, link.replica_state(), *health[link.pk]) for link in outgoing],
        "sources": [(link, link.replica_state(), *health[link.pk]) for link in incoming],
        "upstreams": stream.upstreams.select_related("source").order_by("idx"),
    }


@login_required
@require_GET
def stream_lag(request: HttpRequest, pk: int) -> HttpResponse:
    """The lag chart's history: per replica of this stream, the recorder's samples
    `[t_ms, messages_pending, bytes_pending, time_lag_ms, stalled]`, oldest first."""
    stream = visible_stream(request, pk)
    links = list(ReplicaLink.objects.filter(source=stream).select_related("replica")
                 .order_by("idx"))
    # An hour of samples of 64 replicas is some 46,000 points (1.4 MB): each link's are cut to
    # the chart's resolution (lag_history.for_chart; "merged": samples per point), with no
    # garbage collection walking the process meanwhile (the p95's 100 ms, issue 34).
    with gc_paused():
        history = lag_history(link.pk for link in links)
        charted = {pk: for_chart(points) for pk, points in history.items()}
    return HttpResponse(orjson.dumps({
        "stream": stream.pk, "sample_seconds": SAMPLE_SECONDS, "keep_seconds": KEEP_SECONDS,
        "fields": ["t", "messages_pending", "bytes_pending", "time_lag_ms", "stalled"],
        "links": [{"link": link.pk, "replica": link.replica.path,
                   "points": charted[link.pk][0], "merged": charted[link.pk][1]}
                  for link in links],
    }), content_type="application/json")


def _info(stream: Stream, show_aces: bool) -> dict[str, Any]:
    """The stream's facts for the page's table, each under the name maprcli's `stream info`
    gives it (the page shows that name beside its own label); ACEs to adminperm holders."""
    sizes = store_for(stream.cluster).sizes(stream.uuid)
    aces = {perm: getattr(stream, perm) for perm in PERMISSIONS} if show_aces else {}
    return {"path": stream.path, "physicalsize": sizes["physicalsize"],
            "logicalsize": sizes["logicalsize"], "numtopics": stream.topics.count(),
            "defaultpartitions": stream.defaultpartitions, "ttl": stream.ttl,
            "compression": stream.compression, "autocreate": stream.autocreate, **aces,
            "ischangelog": False, "defaulttimestamptype": stream.defaulttimestamptype,
            "compact": stream.compact, "mincompactionlag": stream.mincompactionlag,
            "deleteretention": stream.deleteretention,
            "compaction": compaction_line(compaction_summary(stream)),
            "cluster": stream.cluster.name, "tenant": stream.tenant.name,
            "uuid": str(stream.uuid)}


TABS = ("overview", "topics", "replication", "settings", "access")  # this module's tabs


def stream_page(request: HttpRequest, stream: Stream, typed: dict[str, str] | None = None,
                errors: dict[str, str] | None = None, tab: str = "overview") -> HttpResponse:
    """A tab of the stream page; after a refused form, with what was typed and the errors by
    field. Each tab loads only what it shows: the replicas' health for Overview and
    Replication, the topics' figures for Topics, the stream's facts for Settings."""
    context = _replica_context(request, stream)
    typed = typed or {}
    context.update(tab=tab, typed=typed, errors=errors or {})
    if tab == "overview":
        context["attention"] = stream_attention(stream, context["replicas"] + context["sources"])
    elif tab == "topics":
        context.update(topics_context(request, stream))
    elif tab == "settings":
        context["info"] = _info(stream, show_aces=context["is_admin"])
        context["choices"] = {"compression": Compression.values,
                              "defaulttimestamptype": TimestampType.values}
    elif tab == "access":
        context["ace_fields"] = [(perm, typed.get(perm, getattr(stream, perm)))
                                 for perm in PERMISSIONS]
        context.update(access_check(request, stream, context["is_admin"]))
    return render_page(request, "web/stream_detail.html", context, status=400 if errors else 200)


def topics_context(request: HttpRequest, stream: Stream) -> dict[str, Any]:
    topics = list(stream.topics.order_by("name"))
    figures = storage_figures(topics)
    return {"topics": [(topic, figures[topic.pk]) for topic in topics],
            "can_edit_topics": stream.allows(request.user, "topicperm"),
            "timestamp_types": TimestampType.values, "cleanup_policies": CleanupPolicy.values}


@login_required
def stream_detail(request: HttpRequest, pk: int, tab: str = "overview") -> HttpResponse:
    return stream_page(request, visible_stream(request, pk), tab=tab)


@login_required
def stream_replicas(request: HttpRequest, pk: int) -> HttpResponse:
    """The replicas/upstreams fragment, re-fetched by static/js/live.js on events."""
    stream = visible_stream(request, pk)
    return render(request, "web/_stream_replicas.html", _replica_context(request, stream))


ADMIN_ROWS = {"verify"}  # the parts of the stream page shown to its admins only
PART_TABS = {"verify": "replication"}  # where a row's table is, when not on the overview


def row_refusal(request: HttpRequest, stream: Stream, part: str, link: ReplicaLink,
                err: StreamgateError) -> HttpResponse:
    """A button's refusal in the words of the service: in the summary at the top of the
    stream page, as before, and beside its row of the `part` table ("replica", "verify");
    a user the page shows no such table (their adminperm was taken since) gets the summary."""
    messages.error(request, refusal(err))
    if part in ADMIN_ROWS and not stream.allows(request.user, "adminperm"):
        return redirect("stream-detail", stream.pk)
    return stream_page(request, stream, errors={row_key(part, link.pk): refusal(err)},
                       tab=PART_TABS.get(part, "overview"))


def _act(request: HttpRequest, stream: Stream, link: ReplicaLink, call: Callable[[], object],
         done: str) -> HttpResponse:
    try:
        call()
    except StreamgateError as err:
        return row_refusal(request, stream, "replica", link, err)
    messages.success(request, done)
    back = request.GET.get("next", "")  # the page the action was taken on (the overview's)
    if back and url_has_allowed_host_and_scheme(back, {request.get_host()}):
        return redirect(back)
    return redirect("stream-detail", stream.pk)


def _form(request: HttpRequest, stream: Stream, call: Callable[[], object], done: str,
          fields: tuple[str, ...], tab: str, back: str | None = None) -> HttpResponse:
    """A stream page form: on success to the `back` tab (the form's own by default) with a
    message; refused, the form's tab again with the error beside its field and what was
    typed."""
    try:
        call()
    except StreamgateError as err:
        typed = {name: request.POST.get(name, "") for name in fields}
        return stream_page(request, stream, typed, field_errors(err, fields), tab)
    messages.success(request, done)
    return redirect(TAB_URLS[back or tab], stream.pk)


@login_required
@require_POST
def stream_edit_aces(request: HttpRequest, pk: int) -> HttpResponse:
    stream = visible_stream(request, pk)
    return _form(request, stream, lambda: stream_edit(actor=request.user, stream=stream,
                                                      **_aces(request.POST)), "ACEs saved",
                 PERMISSIONS, "access")


SETTINGS = ("ttl", "defaultpartitions", "compression", "autocreate", "defaulttimestamptype")


def _whole(text: str, field: str, words: str) -> int:
    if not text.strip().isdigit():
        raise InvalidInput(f"{words} is a whole number", field=field)
    return int(text)


@login_required
@require_POST
def stream_edit_settings(request: HttpRequest, pk: int) -> HttpResponse:
    """The Settings tab's form: every setting as the form shows it, through stream_edit
    (adminperm, audited), as `stream edit` does."""
    stream = visible_stream(request, pk)
    data = request.POST

    def save() -> None:
        stream_edit(actor=request.user, stream=stream,
                    ttl=_whole(data.get("ttl", ""), "ttl", "the time messages are kept"),
                    defaultpartitions=_whole(data.get("defaultpartitions", ""),
                                             "defaultpartitions", "the default partitions"),
                    compression=data.get("compression", ""),
                    autocreate=data.get("autocreate") == "on",
                    defaulttimestamptype=data.get("defaulttimestamptype", ""))

    return _form(request, stream, save, "settings saved", SETTINGS, "settings")


@login_required
@require_POST
def replica_create(request: HttpRequest, pk: int) -> HttpResponse:
    source = visible_stream(request, pk)

    def add() -> None:
        path = request.POST.get("replica", "").strip()
        replica = Stream.objects.restrict(request.user).by_path(path, field="replica")
        replica_add(actor=request.user, source=source, replica=replica,
                    paused=request.POST.get("paused") == "on")

    # Registered, the replica's health is on the overview, where it appears at once.
    return _form(request, source, add, "replica registered", ("replica", "paused"),
                 "replication", back="overview")


REPLICA_ACTIONS = {"pause": replica_pause, "resume": replica_resume, "remove": replica_remove}
UNDO_KEY = "replica_undo"  # the session's note of the last replica removed, to add it back


@login_required
def replica_action(request: HttpRequest, pk: int, link_pk: int, action: str) -> HttpResponse:
    """Pause and resume at once; remove asks first (GET: what removing does), and the page
    it returns to offers to add the replica back with the settings it had."""
    if action not in REPLICA_ACTIONS:
        raise Http404("no such action")
    if request.method != "POST" and action != "remove":
        return HttpResponseNotAllowed(["POST"])
    source = visible_stream(request, pk)
    link = get_object_or_404(ReplicaLink.objects.restrict(request.user).select_related("replica"),
                             pk=link_pk, source=source)
    if request.method != "POST":
        return render_page(request, "web/replica_remove.html", {"stream": source, "link": link})
    service = REPLICA_ACTIONS[action]
    done = _act(request, source, link, lambda: service(actor=request.user, source=source,
                                                       replica=link.replica),
                f"{link.replica.path}: replica {action}d")
    if action == "remove" and done.status_code == 302:
        request.session[UNDO_KEY] = {
            "source": source.pk, "replica": link.replica.pk, "path": link.replica.path,
            "paused": link.paused, **{name: getattr(link, name) for name in LINK_OPTIONS}}
    return done


@login_required
@require_POST
def replica_undo(request: HttpRequest, pk: int) -> HttpResponse:
    """Add back the replica this session removed last, with the settings it had."""
    source = visible_stream(request, pk)
    removed = request.session.get(UNDO_KEY) or {}
    if removed.get("source") != source.pk:
        raise Http404("no replica of this stream was removed in this session")
    replica = get_object_or_404(Stream.objects.restrict(request.user), pk=removed["replica"])

    def add_back() -> None:
        replica_add(actor=request.user, source=source, replica=replica,
                    paused=removed["paused"], **{name: removed[name] for name in LINK_OPTIONS})
        request.session.pop(UNDO_KEY, None)

    return _form(request, source, add_back, f"{replica.path} is a replica again", ("replica",),
                 "overview")
