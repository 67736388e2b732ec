"""Produce, consume and consumer cursors: `streams/<uuid>/topics/<name>/messages/` and
`.../cursors/`. Records travel as JSON; keys, values and header values are UTF-8 text or
base64 (`"encoding": "base64"`), so any bytes round-trip exactly, and JSON null for Kafka's
null (a null value is a tombstone; "" is an empty value, a different thing).

Parsing stays a plain loop over dicts rather than a DRF serializer: a produce carries up to
10,000 records, and a serializer per record would cost more than storing them.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from typing import Any

import orjson
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser
from rest_framework.renderers import BrowsableAPIRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from portal.api.throttling import FailOpenScopedRateThrottle
from portal.api.viewsets import StreamChildViewSet
from portal.quotas import TenantRequestThrottle
from replication.engine.store import Message, Record
from replication.models import Topic
from replication.services import cursors
from replication.services import messages as service
from replication.services.browse import transaction_marks

ENCODINGS = ("utf-8", "base64")
RECORD_FIELDS = {"value", "key", "headers", "partition", "timestamp"}


def _decoder(encoding: str) -> Callable[[str], bytes]:
    if encoding == "base64":
        return lambda text: base64.b64decode(text, validate=True)
    return str.encode


def _encoder(encoding: str) -> Callable[[bytes | None], str | None]:
    """Bytes as text in `encoding`; None (Kafka's null) as JSON null."""
    if encoding == "base64":
        return lambda raw: None if raw is None else base64.b64encode(raw).decode()
    return lambda raw: None if raw is None else raw.decode("utf-8", errors="backslashreplace")


def _choice(value: Any, name: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise serializers.ValidationError({name: [f"use one of {', '.join(allowed)}"]})
    return value


def _record(item: Any, decode: Callable[[str], bytes]) -> Record:
    if not isinstance(item, dict) or "value" not in item or not set(item) <= RECORD_FIELDS:
        raise ValueError(f"a record is an object with 'value' and optionally "
                         f"{', '.join(sorted(RECORD_FIELDS - {'value'}))}")
    key, headers = item.get("key"), item.get("headers") or {}
    if not isinstance(headers, dict):
        raise ValueError("headers is an object of name: value")
    partition, timestamp = item.get("partition"), item.get("timestamp")
    for number in (partition, timestamp):
        if number is not None and (type(number) is not int or number < 0):
            raise ValueError("partition and timestamp are whole numbers, 0 or more")
    value = item["value"]
    return Record(
        value=None if value is None else decode(value),
        key=None if key is None else decode(key),
        headers=tuple((str(k), None if v is None else decode(v)) for k, v in headers.items()),
        partition=partition,
        timestamp_ms=timestamp,
    )


def _values_only(items: list[Any], decode: Callable[[str], bytes]) -> list[Record] | None:
    """The common batch, values and nothing else, without the per-field checks of `_record`."""
    try:
        if all(type(item) is dict and len(item) == 1 and type(item["value"]) is str
               for item in items):
            return [Record(decode(item["value"])) for item in items]
    except (KeyError, binascii.Error, ValueError):
        pass  # let the careful path say which record is wrong
    return None


def parse_records(body: Any) -> tuple[list[Record], str | None]:
    if not isinstance(body, dict) or not isinstance(body.get("records"), list):
        raise serializers.ValidationError({"records": ["send {\"records\": [{\"value\": ...}]}"]})
    decode = _decoder(_choice(body.get("encoding", "utf-8"), "encoding", ENCODINGS))
    producer = body.get("producer")
    if producer is not None and not isinstance(producer, str):
        raise serializers.ValidationError({"producer": ["a producer id is text"]})
    fast = _values_only(body["records"], decode)
    if fast is not None:
        return fast, producer
    records = []
    for index, item in enumerate(body["records"]):
        try:
            records.append(_record(item, decode))
        except (ValueError, TypeError, AttributeError, binascii.Error) as err:
            raise serializers.ValidationError({f"records[{index}]": [str(err)]}) from err
    return records, producer


def render(message: Message, encode: Callable[[bytes | None], str | None],
           mark: str | None = None) -> dict[str, Any]:
    """A message as the API shows it; `transaction`: its transaction's mark, when it is a
    commit or abort marker or a record of an aborted or open transaction (issue 31)."""
    return {
        "partition": message.partition,
        "offset": message.offset,
        "timestamp": message.timestamp_ms,
        "key": None if message.key is None else encode(message.key),
        "value": encode(message.value),  # null for a null value, "" for an empty one
        "headers": {name: encode(value) for name, value in message.headers},
        "origin": str(message.origin),
        "producer": message.producer,
        "transaction": mark,
    }


def _int_param(request: Request, name: str, default: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if not raw.isdigit():
        raise serializers.ValidationError({name: ["a whole number, 0 or more"]})
    return int(raw)


INT_PARAMS = [
    OpenApiParameter(name, OpenApiTypes.INT, description=text)
    for name, text in (
        ("partition", "partition to read (default 0)"),
        ("offset", "first offset to read (default 0)"),
        ("limit", "at most this many messages (default 1000)"),
        ("max_bytes", "about this many bytes at most (default 1 MiB; at least one message)"),
        ("wait_ms", "wait up to this long for data when there is none yet (long poll)"),
    )
]


class ORJSONParser(JSONParser):
    """Batches of thousands of records: orjson parses them about four times faster."""

    def parse(self, stream: Any, media_type: str | None = None,
              parser_context: Any = None) -> Any:
        try:
            return orjson.loads(stream.read())
        except orjson.JSONDecodeError as err:
            raise ParseError(f"JSON parse error - {err}") from err


class ORJSONRenderer(JSONRenderer):
    def render(self, data: Any, accepted_media_type: str | None = None,
               renderer_context: Any = None) -> bytes:
        return b"" if data is None else orjson.dumps(data)


class RecordSerializer(serializers.Serializer):
    value = serializers.CharField(allow_null=True, allow_blank=True,
                                  help_text="UTF-8 text, or base64 with encoding base64; null "
                                  "for a null value (a tombstone), apart from \"\" (empty)")
    key = serializers.CharField(required=False, allow_null=True, allow_blank=True)
    headers = serializers.DictField(child=serializers.CharField(allow_null=True),
                                    required=False)
    partition = serializers.IntegerField(min_value=0, required=False)
    timestamp = serializers.IntegerField(min_value=0, required=False,
                                         help_text="epoch milliseconds")


class ProduceSerializer(serializers.Serializer):
    """The produce body, for the browsable API's form only: `parse_records` reads requests
    (see the module's docstring)."""

    encoding = serializers.ChoiceField(choices=ENCODINGS, default="utf-8")
    producer = serializers.CharField(required=False, help_text="idempotent producer id")
    records = RecordSerializer(many=True)


class MessageViewSet(StreamChildViewSet):
    """Produce to and consume from one topic of the stream."""

    queryset = Topic.objects.all()
    serializer_class = ProduceSerializer  # the browsable API's form; requests: parse_records
    parser_classes = [ORJSONParser]
    throttle_scope = "produce"
    renderer_classes = [ORJSONRenderer, BrowsableAPIRenderer]

    def get_throttles(self) -> list:
        # Only producing is rate-limited per user; consumers long-poll and would trip it for
        # nothing. Both count against the tenants' request quotas.
        produce = [FailOpenScopedRateThrottle()] if self.action == "create" else []
        return [TenantRequestThrottle(), *produce]

    @extend_schema(request=OpenApiTypes.OBJECT, responses=OpenApiTypes.OBJECT)
    def create(self, request: Request, **kwargs: Any) -> Response:
        records, producer = parse_records(request.data)
        placed = service.messages_produce(actor=request.user, stream=self.parent,
                                          topic=kwargs["name"], records=records,
                                          producer=producer)
        offsets = [{"partition": p, "offset": o} for p, o in placed]
        return Response({"offsets": offsets}, status=201)

    @extend_schema(parameters=[*INT_PARAMS, OpenApiParameter("encoding", str, enum=ENCODINGS)],
                   responses=OpenApiTypes.OBJECT)
    def list(self, request: Request, **kwargs: Any) -> Response:
        encoding = _choice(request.query_params.get("encoding", "base64"), "encoding", ENCODINGS)
        messages = service.messages_consume(
            actor=request.user, stream=self.parent, topic=kwargs["name"],
            partition=_int_param(request, "partition", 0),
            offset=_int_param(request, "offset", 0), limit=_int_param(request, "limit", 1000),
            max_bytes=_int_param(request, "max_bytes", 1 << 20),
            wait_ms=_int_param(request, "wait_ms", 0),
        )
        encode = _encoder(encoding)
        marks = transaction_marks(stream=self.parent, topic=kwargs["name"], messages=messages)
        return Response({"messages": [render(m, encode, marks.get((m.partition, m.offset)))
                                      for m in messages]})


class CursorSerializer(serializers.Serializer):
    group = serializers.CharField(max_length=255)
    partition = serializers.IntegerField(min_value=0, default=0)
    offset = serializers.IntegerField(min_value=0)


class CursorViewSet(StreamChildViewSet):
    """Committed offsets of consumer groups, kept in the stream's cluster store."""

    queryset = Topic.objects.all()
    serializer_class = CursorSerializer

    def create(self, request: Request, **kwargs: Any) -> Response:
        data = self.validated(CursorSerializer)
        cursors.cursor_commit(actor=request.user, stream=self.parent, topic=kwargs["name"],
                              **data)
        return Response(data, status=201)

    @extend_schema(parameters=[OpenApiParameter("group", str)])
    def list(self, request: Request, **kwargs: Any) -> Response:
        found = cursors.cursor_list(actor=request.user, stream=self.parent,
                                    topic=kwargs["name"], group=request.query_params.get("group"))
        return Response({"cursors": found})
