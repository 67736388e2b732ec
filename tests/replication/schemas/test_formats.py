"""The schema formats' validity and compatibility rules, without the database: Avro by its
resolution rules, JSON Schema's common cases, Protobuf's field rules in both of its forms."""

from __future__ import annotations

import base64
import json

import pytest
from google.protobuf import descriptor_pb2

from replication.schemas import formats
from replication.schemas.errors import InvalidSchema

PROTO = 'syntax = "proto2";\npackage acme;\nmessage Order {\n  required string id = 1;\n' \
        '  optional int32 qty = 2;\n  repeated string tags = 3;\n  oneof pay { string card = 4;' \
        ' string iban = 5; }\n  message Line { optional int64 n = 1; }\n}\n'


def problems(level: str, new: str, old: str, kind: str = "PROTOBUF") -> list[str]:
    return formats.incompatibilities(level, formats.parse(kind, new), [formats.parse(kind, old)])


@pytest.mark.parametrize(("change", "found"), [
    (("optional int32 qty", "optional uint64 qty"), ""),  # one wire group: compatible
    (("optional int32 qty", "optional string qty"), "type int32 written"),
    (("repeated string tags", "optional string tags"), "repeated and single"),
    (("oneof pay { string card = 4;", "optional string card = 4; oneof pay {"), "oneof"),
    (("  required string id = 1;\n", ""), "required field added or removed"),
    (("package acme;", "package other;"), "package changed"),
    (("  message Line { optional int64 n = 1; }\n", ""), "message Order.Line removed"),
    (("  optional int32 qty = 2;\n", ""), ""),  # an optional field removed
])
def test_protobuf_rules(change: tuple[str, str], found: str) -> None:
    changed = PROTO.replace(*change)
    assert changed != PROTO
    got = problems("FULL", changed, PROTO)
    assert (found in " ".join(got)) if found else got == [], got


def test_protobuf_descriptor_form_compares_like_the_text_form() -> None:
    def described(qty: int) -> str:
        fd = descriptor_pb2.FileDescriptorProto(name="o.proto", package="acme", syntax="proto3")
        message = fd.message_type.add(name="Order")
        message.field.add(name="qty", number=2, type=qty,
                          label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
        return base64.b64encode(fd.SerializeToString()).decode()

    as_int, as_text = (described(descriptor_pb2.FieldDescriptorProto.TYPE_INT32),
                       described(descriptor_pb2.FieldDescriptorProto.TYPE_STRING))
    assert formats.parse("PROTOBUF", as_int).text == as_int  # stored as given
    assert problems("BACKWARD", as_text, as_int) == \
        ["BACKWARD: Order field 2: type int32 written, reader has string"]
    text = 'syntax = "proto3"; package acme; message Order { int32 qty = 2; }'
    assert problems("FULL", text, as_int) == []


def test_avro_levels_directions() -> None:
    old = json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]})
    widened = json.dumps({"type": "record", "name": "R", "fields": [
        {"name": "a", "type": "long"}]})
    # int promotes to long: the new schema reads old data, the old cannot read new data.
    assert problems("BACKWARD", widened, old, "AVRO") == []
    assert problems("FORWARD", widened, old, "AVRO")[0].startswith("FORWARD: ")
    assert problems("NONE", widened, old, "AVRO") == []
    enum_old = json.dumps({"type": "enum", "name": "E", "symbols": ["A", "B"]})
    enum_new = json.dumps({"type": "enum", "name": "E", "symbols": ["A"]})
    assert "missing_enum_symbols" in problems("BACKWARD", enum_new, enum_old, "AVRO")[0]


def test_avro_canonical_text_ignores_spacing_and_bare_names() -> None:
    spaced = formats.parse("AVRO", '{ "type" : "string" }')
    assert spaced.text == formats.parse("AVRO", '"string"').text == '"string"'
    assert spaced.fingerprint == formats.parse("AVRO", "string").fingerprint


@pytest.mark.parametrize(("new", "found"), [
    ({"type": "object", "properties": {"s": {"type": "string", "enum": ["x"]}}},
     "enum values ['y'] removed"),
    ({"type": "object", "properties": {}, "additionalProperties": False},
     "allows no other properties"),
    ({"type": "object", "properties": {"s": {"type": ["string", "null"]}}}, ""),
    ({"type": "object", "properties": {"s": {"type": "array", "items": {"type": "string"}}}},
     "type ['string'] written"),
])
def test_json_rules(new: dict, found: str) -> None:
    old = {"type": "object", "properties": {"s": {"type": "string", "enum": ["x", "y"]}}}
    got = problems("BACKWARD", json.dumps(new), json.dumps(old), "JSON")
    assert (found in " ".join(got)) if found else got == [], got


def test_array_items_are_compared() -> None:
    old = {"type": "array", "items": {"type": "integer"}}
    assert problems("BACKWARD", json.dumps({"type": "array", "items": {"type": "number"}}),
                    json.dumps(old), "JSON") == []
    assert problems("FORWARD", json.dumps({"type": "array", "items": {"type": "number"}}),
                    json.dumps(old), "JSON") == \
        ["FORWARD: #/items: type ['number'] written, reader takes ['integer']"]


@pytest.mark.parametrize(("kind", "text"), [
    ("AVRO", '{"type": "record", "name": "R"}'), ("AVRO", "{"), ("JSON", "[1]"),
    ("JSON", '{"type": "nope"}'), ("PROTOBUF", "message M { string a = ; }"),
    ("XML", "<a/>"), ("AVRO", ""),
])
def test_invalid_schemas_are_refused(kind: str, text: str) -> None:
    with pytest.raises(InvalidSchema):
        formats.parse(kind, text)
