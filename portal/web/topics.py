"""The stream page's Topics tab: create a topic, add partitions or change its timestamp type
and its compaction settings (cleanup policy, min compaction lag, delete retention, dirty
ratio: issue 31), delete it after typing its name. Every change goes through
replication/services/topics.py, as /rest, the API and the Kafka listener's admin APIs do
(topicperm, the plan's partition limit, changes at the origin only), and is audited by the
Topic model's signals with the web as its interface. A refusal re-renders the tab with the
error beside its field and what was typed; nothing is changed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from portal.web.forms import field_errors
from portal.web.streams import stream_page, visible_stream
from portal.web.tenancy import render_page
from replication.errors import InvalidInput, StreamgateError
from replication.models import Stream
from replication.services import topic_create, topic_delete, topic_edit
from replication.services.topiccompaction import compaction_typed
from replication.services.topics import topic_of

COMPACTION_FIELDS = ("cleanuppolicy", "mincompactionlag", "deleteretention",
                     "mincleanabledirtyratio")
CREATE_FIELDS = ("topic", "partitions", "timestamptype", *COMPACTION_FIELDS)
EDIT_FIELDS = CREATE_FIELDS


def _partitions(text: str, *, required: bool) -> int | None:
    text = text.strip()
    if not text and not required:
        return None
    if not text.isdigit():
        raise InvalidInput("the number of partitions is a whole number, 1 or more",
                           field="partitions")
    return int(text)


def _compaction(typed: dict[str, str]) -> dict[str, Any]:
    """The compaction options typed (blank: not given), read and refused as the CLI reads
    them; topic_create and topic_edit then apply the rules every interface shares."""
    return compaction_typed({name: typed[name] for name in COMPACTION_FIELDS})


def _topics_form(request: HttpRequest, stream: Stream, form: str, fields: tuple[str, ...],
                 call: Callable[[dict[str, str]], str]) -> HttpResponse:
    """Run one of the tab's forms: done, back to the tab with a message; refused, the tab
    again with `form`'s errors beside its fields and what was typed."""
    typed = {name: request.POST.get(name, "").strip() for name in fields}
    try:
        done = call(typed)
    except StreamgateError as err:
        return stream_page(request, stream, {"form": form, **typed},
                           field_errors(err, fields), tab="topics")
    messages.success(request, done)
    return redirect("stream-topics", stream.pk)


@login_required
@require_POST
def topic_create_view(request: HttpRequest, pk: int) -> HttpResponse:
    stream = visible_stream(request, pk)

    def create(typed: dict[str, str]) -> str:
        topic = topic_create(actor=request.user, stream=stream, name=typed["topic"],
                             partitions=_partitions(typed["partitions"], required=False),
                             timestamptype=typed["timestamptype"] or None,
                             **_compaction(typed))
        return (f"topic {topic.name} created with {topic.partitions} partitions, "
                f"cleanup policy {topic.policy}")

    return _topics_form(request, stream, "create", CREATE_FIELDS, create)


@login_required
@require_POST
def topic_edit_view(request: HttpRequest, pk: int) -> HttpResponse:
    stream = visible_stream(request, pk)

    def edit(typed: dict[str, str]) -> str:
        topic = topic_edit(actor=request.user, stream=stream, name=typed["topic"],
                           partitions=_partitions(typed["partitions"], required=False),
                           timestamptype=typed["timestamptype"] or None,
                           **_compaction(typed))
        return (f"topic {topic.name} saved: {topic.partitions} partitions, "
                f"{topic.timestamptype} timestamps, cleanup policy {topic.policy}")

    return _topics_form(request, stream, "edit", EDIT_FIELDS, edit)


@login_required
def topic_delete_view(request: HttpRequest, pk: int, name: str) -> HttpResponse:
    """GET: what deleting does, and a field to type the topic's name in; POST: delete it if
    the name typed is the topic's, as a repository's deletion asks on GitHub."""
    stream = visible_stream(request, pk)
    try:
        topic = topic_of(stream, name)
    except StreamgateError as err:
        messages.error(request, err.desc)
        return redirect("stream-topics", stream.pk)
    error = ""
    if request.method == "POST":
        typed = request.POST.get("confirm", "").strip()
        try:
            if typed != topic.name:
                raise InvalidInput(f"type the topic's name, {topic.name}, to delete it",
                                   field="confirm")
            topic_delete(actor=request.user, stream=stream, name=topic.name)
        except StreamgateError as err:
            error = field_errors(err, ("confirm",)).popitem()[1]
        else:
            messages.success(request, f"topic {topic.name} deleted with its messages")
            return redirect("stream-topics", stream.pk)
    context = {"stream": stream, "topic": topic, "error": error,
               "typed": request.POST.get("confirm", "")}
    return render_page(request, "web/topic_delete.html", context, status=400 if error else 200)
