"""A Protobuf schema sent as a base64 FileDescriptorProto (what confluent-kafka's
ProtobufSerializer registers, and its deserializer asks back with ?format=serialized), read
into the shape protoformat.py compares: each message's fields by number, as (name, type,
cardinality, oneof)."""

from __future__ import annotations

import base64
import binascii
import functools
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from google.protobuf.message import DecodeError

from replication.schemas import protocompile

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


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("a truncated varint")
        byte = data[pos]
        result |= (byte & 0x7F) << shift
        pos, shift = pos + 1, shift + 7
        if not byte & 0x80:
            return result, pos


def _zigzag(data: bytes, pos: int) -> tuple[int, int]:
    value, pos = _varint(data, pos)
    return (value >> 1) ^ -(value & 1), pos


def message_indexes(data: bytes) -> tuple[list[int], int]:
    """Confluent's message indexes after the schema id (which message of the file, nested):
    a zigzag count then zigzag indexes, a lone 0 meaning the first message; and where the
    message's bytes start."""
    count, pos = _zigzag(data, 0)
    if count == 0:
        return [0], pos
    indexes = []
    for _ in range(count):
        index, pos = _zigzag(data, pos)
        indexes.append(index)
    return indexes, pos


def described_of(text: str) -> descriptor_pb2.FileDescriptorProto | None:
    """The schema's descriptor: the base64 FileDescriptorProto it is, or its .proto text
    compiled (protocompile.py); None when neither works."""
    try:
        return descriptor_pb2.FileDescriptorProto.FromString(
            base64.b64decode(text.strip(), validate=True))
    except (binascii.Error, ValueError, DecodeError):
        return protocompile.compile_proto(text)


@functools.lru_cache(maxsize=64)
def _pool_of(text: str) -> tuple[descriptor_pb2.FileDescriptorProto, Any] | None:
    """Compiled once per schema text, not once per message shown."""
    described = described_of(text)
    if described is None:
        return None
    pool = descriptor_pool.DescriptorPool()
    try:
        for dependency in described.dependency:
            found = descriptor_pool.Default().FindFileByName(dependency)
            pool.AddSerializedFile(found.serialized_pb)
        pool.Add(described)
    except (KeyError, TypeError, ValueError):
        return None
    return described, pool


def decode(text: str, framed: bytes) -> dict | None:
    """The message in `framed` (the value after magic byte and id) as a dict, by the schema
    `text` (a base64 FileDescriptorProto or .proto text); None when it cannot be (imports
    outside the well-known types, bytes that do not parse)."""
    compiled = _pool_of(text)
    if compiled is None:
        return None
    described, pool = compiled
    try:
        indexes, start = message_indexes(framed)
        names, level = [], described.message_type
        for index in indexes:
            names.append(level[index].name)
            level = level[index].nested_type
        full = ".".join([described.package, *names] if described.package else names)
        kind = message_factory.GetMessageClass(pool.FindMessageTypeByName(full))
        return json_format.MessageToDict(kind.FromString(framed[start:]),
                                         preserving_proto_field_name=True)
    except (ValueError, IndexError, KeyError, TypeError, DecodeError):
        return None
