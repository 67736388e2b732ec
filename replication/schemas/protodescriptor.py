"""A Protobuf schema sent as a base64 FileDescriptorProto (what confluent-kafka's
ProtobufSerializer registers, and its deserializer asks back with ?format=serialized), read
into the shape protoformat.py compares: each message's fields by number, as (name, type,
cardinality, oneof)."""

from __future__ import annotations

import base64
import binascii

from google.protobuf import descriptor_pb2
from google.protobuf.message import DecodeError

FieldTuple = tuple[str, str, str, str]
Field = descriptor_pb2.FieldDescriptorProto
NAMED = (Field.TYPE_MESSAGE, Field.TYPE_ENUM, Field.TYPE_GROUP)
LABELS = {Field.LABEL_REPEATED: "REPEATED", Field.LABEL_REQUIRED: "REQUIRED"}


def from_base64(text: str) -> tuple[str, dict[str, dict[int, FieldTuple]]] | None:
    """(package, messages) when `text` is a base64 FileDescriptorProto; None when it is not
    base64 (then it is .proto text)."""
    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    described = descriptor_pb2.FileDescriptorProto()
    try:
        described.ParseFromString(raw)
    except DecodeError:
        return None
    if not described.message_type and not described.enum_type:
        return None
    messages: dict[str, dict[int, FieldTuple]] = {}
    for message in described.message_type:
        _collect(message, message.name, messages)
    return described.package, messages


def _type(field: descriptor_pb2.FieldDescriptorProto) -> str:
    if field.type in NAMED:
        return field.type_name.rsplit(".", 1)[-1]
    return Field.Type.Name(field.type).removeprefix("TYPE_").lower()


def _collect(message: descriptor_pb2.DescriptorProto, name: str,
             into: dict[str, dict[int, FieldTuple]]) -> None:
    fields: dict[int, FieldTuple] = {}
    for field in message.field:
        # proto3 `optional` makes a synthetic oneof: not one a writer declared.
        oneof = "" if field.proto3_optional or not field.HasField("oneof_index") else \
            message.oneof_decl[field.oneof_index].name
        fields[field.number] = (field.name, _type(field), LABELS.get(field.label, ""), oneof)
    into[name] = fields
    for nested in message.nested_type:
        if not nested.options.map_entry:
            _collect(nested, f"{name}.{nested.name}", into)
