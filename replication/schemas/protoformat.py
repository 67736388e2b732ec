"""Protobuf schemas: .proto text, valid when proto-schema-parser parses it (syntax only:
imported types are not resolved), or a base64 FileDescriptorProto, the form confluent-kafka's
ProtobufSerializer registers (protodescriptor.py). Either is stored as given. Compatibility,
per message of the writer's, by field number:

- a message of the writer's missing from the reader (MESSAGE_REMOVED);
- a field whose type changed, unless both are in one wire-compatible group (int32, uint32,
  int64, uint64, bool; sint32, sint64; fixed32, sfixed32; fixed64, sfixed64; string, bytes);
- a field turned repeated or single, or moved into or out of a oneof;
- a proto2 `required` field added or removed;
- the package changed.

Removing or adding an optional field is compatible (its number should then be reserved)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from antlr4.error.ErrorListener import ErrorListener
from proto_schema_parser import ast
from proto_schema_parser.parser import Parser

from replication.schemas import protodescriptor
from replication.schemas.errors import InvalidSchema

GROUPS = ({"int32", "uint32", "int64", "uint64", "bool"}, {"sint32", "sint64"},
          {"fixed32", "sfixed32"}, {"fixed64", "sfixed64"}, {"string", "bytes"})


class _Raise(ErrorListener):
    def syntaxError(self, recognizer: Any, offending: Any, line: int, column: int,
                    msg: str, e: Any) -> None:
        raise InvalidSchema(f"invalid Protobuf schema at line {line}, column {column}: {msg}")


def _strict(recognizer: Any) -> None:
    recognizer.removeErrorListeners()
    recognizer.addErrorListener(_Raise())


@dataclass(frozen=True)
class FieldShape:
    name: str
    type: str
    cardinality: str  # "", "OPTIONAL", "REQUIRED", "REPEATED", "MAP"
    oneof: str


@dataclass(frozen=True)
class ProtoFile:
    package: str
    messages: dict[str, dict[int, FieldShape]]


def parse(text: str, references: Sequence[str]) -> tuple[str, ProtoFile]:
    described = protodescriptor.from_base64(text)
    if described is not None:
        package, messages = described
        return text.strip(), ProtoFile(package, {
            name: {n: FieldShape(*shape) for n, shape in fields.items()}
            for name, fields in messages.items()})
    parsed = Parser(setup_lexer=_strict, setup_parser=_strict).parse(text)
    package = next((e.name for e in parsed.file_elements if isinstance(e, ast.Package)), "")
    messages: dict[str, dict[int, FieldShape]] = {}
    for element in parsed.file_elements:
        if isinstance(element, ast.Message):
            _collect(element, element.name, messages)
    return text.strip() + "\n", ProtoFile(package, messages)


def _fields(elements: Sequence[Any], oneof: str = "") -> Iterator[FieldShape | tuple]:
    for element in elements:
        if isinstance(element, ast.Field):
            cardinality = element.cardinality.value if element.cardinality else ""
            kind = element.type.rsplit(".", 1)[-1]  # a named type as the descriptor form has it
            yield element.number, FieldShape(element.name, kind, cardinality, oneof)
        elif isinstance(element, ast.MapField):
            kind = f"map<{element.key_type},{element.value_type}>"
            yield element.number, FieldShape(element.name, kind, "MAP", oneof)
        elif isinstance(element, ast.OneOf):
            yield from _fields(element.elements, element.name)


def _collect(message: ast.Message, name: str, into: dict[str, dict[int, FieldShape]]) -> None:
    into[name] = dict(_fields(message.elements))  # type: ignore[arg-type]
    for element in message.elements:
        if isinstance(element, ast.Message):
            _collect(element, f"{name}.{element.name}", into)


def _same_kind(a: str, b: str) -> bool:
    return a == b or any(a in group and b in group for group in GROUPS)


def _field_problems(message: str, number: int, read: FieldShape | None,
                    written: FieldShape | None) -> list[str]:
    where = f"{message} field {number}"
    if read is None or written is None:
        present = read or written
        if present is not None and present.cardinality == "REQUIRED":
            return [f"{where} ({present.name}): a required field added or removed"]
        return []
    found = []
    if not _same_kind(read.type, written.type):
        found.append(f"{where}: type {written.type} written, reader has {read.type}")
    if (read.cardinality in ("REPEATED", "MAP")) != (written.cardinality in ("REPEATED", "MAP")):
        found.append(f"{where}: changed between repeated and single")
    if read.oneof != written.oneof:
        found.append(f"{where}: moved into or out of a oneof")
    return found


def incompatibilities(reader: ProtoFile, writer: ProtoFile) -> list[str]:
    found = []
    if reader.package != writer.package:
        found.append(f"package changed from {writer.package!r} to {reader.package!r}")
    for message, written in writer.messages.items():
        read = reader.messages.get(message)
        if read is None:
            found.append(f"message {message} removed")
            continue
        for number in sorted(set(read) | set(written)):
            found += _field_problems(message, number, read.get(number), written.get(number))
    return found
