"""The message browser of a stream (consumeperm): filters by partition, offset range, time
range, key and a text in the value; values decoded as UTF-8, pretty JSON or hex (those a schema
registry serializer framed, by their schema); headers and
the origin stream of each message; newest first, with a live tail (the results re-fetched
every few seconds by htmx); pages older and newer (a position per partition in the URL,
the filters kept), started at an offset or a time; a permalink per message (its partition
and offset); the shown page downloaded as JSON lines; and a form producing a test message
(produceperm).
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from django.contrib import messages as flash
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from portal.web.forms import field_errors
from portal.web.streams import visible_stream
from portal.web.tenancy import render_page
from replication.engine.store import Message, Record
from replication.errors import InvalidInput, StreamgateError
from replication.models import Stream
from replication.services.browse import BrowseQuery, BrowseResult, messages_browse
from replication.services.messages import messages_produce
from replication.services.registrydecode import SchemaDecoder

PAGE_SIZES = (10, 50, 100, 500)
DECODINGS = (("utf8", "UTF-8 text"), ("json", "JSON, pretty"), ("hex", "Hex bytes"))
FILTERS = ("topic", "partition", "from_offset", "to_offset", "since", "until", "key", "text",
           "decode", "limit", "order", "tail", "at_offset", "at_time", "before", "after")
# Where a page starts: dropped from the links to other pages, which carry their own position.
POSITION = ("at_offset", "at_time", "before", "after", "fragment")
PRODUCE_FIELDS = ("topic", "partition", "key", "value", "headers")


def _number(data: QueryDict, name: str) -> int | None:
    text = data.get(name, "").strip()
    if not text:
        return None
    if not text.isdigit():
        raise InvalidInput(f"{text!r} is not a whole number: write 0 or more", field=name)
    return int(text)


def _time(data: QueryDict, name: str) -> int | None:
    text = data.get(name, "").strip()
    if not text:
        return None
    try:
        return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)
    except ValueError as err:
        raise InvalidInput(f"{text!r} is not a time: write it as 2026-11-25 14:30 (UTC)",
                           field=name) from err


def _position(data: QueryDict, name: str) -> dict[int, int] | None:
    """A page's position in the URL, "partition:offset" pairs, e.g. before=0:120,1:98."""
    text = data.get(name, "").strip()
    if not text:
        return None
    position = {}
    for pair in text.split(","):
        partition, _, offset = pair.partition(":")
        if not (partition.isdigit() and offset.isdigit()):
            raise InvalidInput(f"{name}={text!r} is not a page position (partition:offset, "
                               "...): use the Older and Newer links", field="form")
        position[int(partition)] = int(offset)
    return position


def _position_text(position: dict[int, int]) -> str:
    return ",".join(f"{p}:{o}" for p, o in sorted(position.items()))


def _query(data: QueryDict, topic: str) -> BrowseQuery:
    limit = _number(data, "limit") or PAGE_SIZES[1]
    return BrowseQuery(
        topic=topic, partition=_number(data, "partition"),
        from_offset=_number(data, "from_offset"), to_offset=_number(data, "to_offset"),
        since_ms=_time(data, "since"), until_ms=_time(data, "until"),
        key=data.get("key", ""), text=data.get("text", ""),
        newest_first=data.get("order", "newest") != "oldest",
        limit=limit if limit in PAGE_SIZES else PAGE_SIZES[1],
        **_start(data))


def _start(data: QueryDict) -> dict[str, Any]:
    """Where the page starts: a jump (an offset or a time, typed in the form) wins over a
    position from a paging link; none: the top (or, oldest first, the start)."""
    at_offset, at_ms = _number(data, "at_offset"), _time(data, "at_time")
    if at_offset is not None:
        return {"at_offset": at_offset}
    if at_ms is not None:
        return {"at_ms": at_ms}
    before = _position(data, "before")
    return {"before": before} if before is not None else {"after": _position(data, "after")}


def decode(data: bytes | None, how: str) -> dict[str, str] | None:
    """{"text", "kind"}: as asked when the bytes allow it, else hex (binary keeps its bytes);
    no bytes at all: kind "empty" (not None, which is a null)."""
    if data is None:
        return None
    if not data:
        return {"text": "", "kind": "empty"}
    if how != "hex":
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return {"text": data.hex(" "), "kind": "hex (not UTF-8)"}
        if how == "json":
            try:
                return {"text": json.dumps(json.loads(text), indent=2, ensure_ascii=False),
                        "kind": "json"}
            except ValueError:
                return {"text": text, "kind": "text (not JSON)"}
        return {"text": text, "kind": "text"}
    return {"text": data.hex(" "), "kind": "hex"}


def decode_value(data: bytes | None, how: str, schemas: SchemaDecoder) -> dict[str, str] | None:
    """A value written by a schema registry serializer (magic byte 0, schema id) decoded by
    its schema, unless hex was asked for; anything else as `decode` gives it."""
    found = schemas.decode(data) if how != "hex" else None
    if found is None:
        return decode(data, how)
    kind = f"{found.schema_type.lower()}, schema id {found.schema_id}"
    if found.text is None:
        return {"text": data.hex(" ") if data else "", "kind": f"{kind} (not decoded)"}
    return {"text": found.text, "kind": kind}


def _rows(found: list[Message], how: str, stream: Stream,
          marks: dict[tuple[int, int], str] | None = None) -> list[dict[str, Any]]:
    """The rows shown; `marks`: a transaction's marker, or a record of an aborted or open
    transaction, by (partition, offset) (BrowseResult.marks)."""
    origins: set[UUID] = {m.origin for m in found}
    paths = dict(Stream.objects.filter(uuid__in=origins).values_list("uuid", "path"))
    schemas = SchemaDecoder(stream.tenant)
    return [{"m": m, "key": decode(m.key, how if how != "json" else "utf8"),
             "value": decode_value(m.value, how, schemas),
             "headers": [(k, decode(v, "utf8")) for k, v in m.headers],
             "at": datetime.fromtimestamp(m.timestamp_ms / 1000, tz=UTC),
             "origin": paths.get(m.origin, str(m.origin)),
             "is_here": m.origin == stream.uuid,
             "mark": (marks or {}).get((m.partition, m.offset))} for m in found]


def _browse_context(request: HttpRequest, stream: Stream) -> dict[str, Any]:
    topics = list(stream.topics.values_list("name", flat=True))
    data = request.GET
    topic = data.get("topic") or (topics[0] if topics else "")
    if topic and "topic" not in data:
        data = data.copy()
        data["topic"] = topic  # in every link made from here on
    context: dict[str, Any] = {
        "stream": stream, "topics": topics, "topic": topic, "f": data, "rows": [],
        "errors": {}, "error": "", "page_sizes": PAGE_SIZES, "decodings": DECODINGS,
        "decode": data.get("decode", "utf8"), "tail": data.get("tail") == "on",
        "fragment_url": f"{request.path}?{_with(data, fragment='1')}",
    }
    if not topic:
        return context
    try:
        q = _query(data, topic)
        result = messages_browse(actor=request.user, stream=stream, q=q)
    except StreamgateError as err:
        errors = field_errors(err, FILTERS)
        context.update(errors=errors, error=errors.get("form", ""))
        return context
    context.update(rows=_rows(result.messages, context["decode"], stream, result.marks),
                   result=result,
                   limit=q.limit, **_links(request, stream, data, result))
    return context


def _links(request: HttpRequest, stream: Stream, data: QueryDict,
           result: BrowseResult) -> dict[str, str]:
    """The older and newer pages, with the filters kept, and this page's download."""
    page = reverse("stream-messages", args=[stream.pk])
    links = {"download_url": f"{reverse('stream-messages-download', args=[stream.pk])}?"
                             f"{_with(data, drop=('fragment', 'tail'))}"}
    paging = (*POSITION, "tail")  # another page: its own position, and no longer live
    if result.has_older:
        links["older_url"] = f"{page}?{_with(data, paging, before=_position_text(result.older))}"
    if result.has_newer:
        links["newer_url"] = f"{page}?{_with(data, paging, after=_position_text(result.newer))}"
    return links


def _with(data: QueryDict, drop: tuple[str, ...] = (), **values: str) -> str:
    query = data.copy()
    for name in drop:
        query.pop(name, None)
    for name, value in values.items():
        query[name] = value
    return query.urlencode()


@login_required
def stream_messages(request: HttpRequest, pk: int) -> HttpResponse:
    stream = visible_stream(request, pk)
    context = _browse_context(request, stream)
    if request.GET.get("fragment"):
        return render(request, "web/_messages_results.html", context)
    context.update(produce={"topic": context["topic"]}, produce_errors={},
                   can_produce=stream.allows(request.user, "produceperm"))
    return render_page(request, "web/messages.html", context,
                       status=400 if context["errors"] else 200)


def _encoded(data: bytes | None) -> tuple[str | None, str | None]:
    """(text, encoding) for JSON: UTF-8 text as itself, other bytes in base64, a null as
    (None, None); an empty value is ("", "utf-8"), not a null."""
    if data is None:
        return None, None
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(data).decode("ascii"), "base64"


def message_json(m: Message, topic: str, origin: str, mark: str | None = None,
                 ) -> dict[str, Any]:
    """One message as a line of the download."""
    key, key_encoding = _encoded(m.key)
    value, value_encoding = _encoded(m.value)
    headers = []
    for name, data in m.headers:
        text, encoding = _encoded(data)
        headers.append({"name": name, "value": text, "encoding": encoding})
    return {"topic": topic, "partition": m.partition, "offset": m.offset,
            "timestamp": m.timestamp_ms,
            "time": datetime.fromtimestamp(m.timestamp_ms / 1000, tz=UTC).isoformat(),
            "key": key, "key_encoding": key_encoding,
            "value": value, "value_encoding": value_encoding,
            "headers": headers, "origin": origin, "transaction": mark}


@login_required
def stream_messages_download(request: HttpRequest, pk: int) -> HttpResponse:
    """The page the same query shows, as JSON lines (one message a line, in its order)."""
    stream = visible_stream(request, pk)
    context = _browse_context(request, stream)
    if context["errors"] or not context["topic"]:
        return render_page(request, "web/messages.html", {
            **context, "produce": {}, "produce_errors": {}, "can_produce": False}, status=400)
    lines = [json.dumps(message_json(row["m"], context["topic"], row["origin"], row["mark"]),
                        ensure_ascii=False) + "\n" for row in context["rows"]]
    response = HttpResponse("".join(lines), content_type="application/x-ndjson; charset=utf-8")
    name = f"{stream.name}-{context['topic']}.jsonl"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


@login_required
def stream_message(request: HttpRequest, pk: int, topic: str, partition: int,
                   offset: int) -> HttpResponse:
    """One message's permalink: it in full (no value cut short), and the way to the browser
    started at it."""
    stream = visible_stream(request, pk)
    how = request.GET.get("decode", "utf8")
    q = BrowseQuery(topic=topic, partition=partition, from_offset=offset, to_offset=offset,
                    limit=1)
    query = QueryDict(mutable=True)
    query.update({"topic": topic, "partition": str(partition), "at_offset": str(offset),
                  "order": "oldest", "decode": how})
    page = {"stream": stream, "topic": topic, "partition": partition, "offset": offset,
            "decodings": DECODINGS, "decode": how,
            "context_url": f"{reverse('stream-messages', args=[pk])}?{query.urlencode()}"}
    try:
        browsed = messages_browse(actor=request.user, stream=stream, q=q)
    except StreamgateError as err:
        return render_page(request, "web/message.html", {**page, "missing": err.desc},
                           status=err.http_status if err.http_status == 403 else 404)
    if not browsed.messages:
        return render_page(request, "web/message.html", {**page, "missing": (
            f"{topic} partition {partition} has no message at offset {offset}: it may have "
            "expired (the stream's ttl), or not be written yet")}, status=404)
    return render_page(request, "web/message.html",
                       {**page, "row": _rows(browsed.messages, how, stream, browsed.marks)[0]})


def _headers(text: str) -> tuple[tuple[str, bytes], ...]:
    headers = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        name, sep, value = line.partition("=")
        if not sep or not name.strip():
            raise InvalidInput(f"header line {number} is not name=value", field="headers")
        headers.append((name.strip(), value.encode()))
    return tuple(headers)


@login_required
@require_POST
def stream_produce(request: HttpRequest, pk: int) -> HttpResponse:
    """Produce one test message; refused, the browser again with the error beside its field
    and what was typed."""
    stream = visible_stream(request, pk)
    typed = {name: request.POST.get(name, "") for name in PRODUCE_FIELDS}
    try:
        record = Record(typed["value"].encode(), key=typed["key"].encode() or None,
                        headers=_headers(typed["headers"]),
                        partition=_number(request.POST, "partition"))
        ((partition, offset),) = messages_produce(actor=request.user, stream=stream,
                                                  topic=typed["topic"], records=[record])
    except StreamgateError as err:
        request.GET = QueryDict(f"topic={typed['topic']}")
        context = _browse_context(request, stream)
        context.update(produce=typed, produce_errors=field_errors(err, PRODUCE_FIELDS),
                       can_produce=True)
        return render_page(request, "web/messages.html", context, status=400)
    flash.success(request, f"produced to {typed['topic']} partition {partition} at offset "
                           f"{offset}")
    url = reverse("stream-messages", args=[stream.pk])
    return redirect(f"{url}?topic={typed['topic']}")
