""".proto text compiled to a FileDescriptorProto without protoc, so the message browser decodes
Protobuf values whose schema was registered as text (what Confluent's own tools and most
non-Python serializers register) as it does those registered as descriptors.

Chosen: the registry already parses .proto text with proto-schema-parser (an ANTLR grammar of
the language, in protoformat.py); its syntax tree carries everything a descriptor needs for
decoding (messages, nested types, fields with number, type and label, oneofs, maps, enums),
so this module only resolves type names by protobuf's scoping rules and writes the
descriptor, which the `protobuf` package (already installed for confluent-kafka's serializer)
then validates and decodes with. protoc itself (grpcio-tools) would be a 30 MB dependency for
the same result. Imports resolve to the well-known types (google/protobuf/*.proto) only; a
schema importing anything else, or using groups or extensions, is not compiled (None)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from antlr4.error.ErrorListener import ErrorListener
from google.protobuf import (  # noqa: F401  (imported to load the well-known types)
    any_pb2,
    descriptor_pb2,
    descriptor_pool,
    duration_pb2,
    empty_pb2,
    field_mask_pb2,
    struct_pb2,
    timestamp_pb2,
    wrappers_pb2,
)
from proto_schema_parser import ast
from proto_schema_parser.parser import Parser

Field = descriptor_pb2.FieldDescriptorProto
SCALARS = {name: getattr(Field, f"TYPE_{name.upper()}") for name in (
    "double", "float", "int64", "uint64", "int32", "fixed64", "fixed32", "bool", "string",
    "bytes", "uint32", "sfixed32", "sfixed64", "sint32", "sint64")}
LABELS = {ast.FieldCardinality.REPEATED: Field.LABEL_REPEATED,
          ast.FieldCardinality.REQUIRED: Field.LABEL_REQUIRED}


class NotCompiled(Exception):
    """What the compiler does not handle; the caller shows the value undecoded."""


class _Refuse(ErrorListener):
    """The parser otherwise recovers from syntax errors, compiling what it guessed."""

    def syntaxError(self, recognizer: Any, offending: Any, line: int, column: int,
                    msg: str, e: Any) -> None:
        raise NotCompiled(f"line {line}, column {column}: {msg}")


def _strict(recognizer: Any) -> None:
    recognizer.removeErrorListeners()
    recognizer.addErrorListener(_Refuse())


def compile_proto(text: str) -> descriptor_pb2.FileDescriptorProto | None:
    """The file's descriptor, or None when the text cannot be compiled here."""
    try:
        parsed = Parser(setup_lexer=_strict, setup_parser=_strict).parse(text)
        described = _File(parsed).descriptor()
    except (NotCompiled, ValueError, TypeError, AttributeError, KeyError):
        return None
    return described if described.message_type else None


def _entry_name(field_name: str) -> str:
    """protoc's name for a map field's entry message: my_map -> MyMapEntry."""
    return "".join(part[:1].upper() + part[1:] for part in field_name.split("_")) + "Entry"


class _File:
    def __init__(self, parsed: ast.File) -> None:
        self.parsed = parsed
        self.package = next((e.name for e in parsed.file_elements
                             if isinstance(e, ast.Package)), "")
        self.imports = [e.name for e in parsed.file_elements if isinstance(e, ast.Import)]
        self.kinds: dict[str, int] = {}  # full name (".pkg.Msg") -> TYPE_MESSAGE / TYPE_ENUM
        prefix = f".{self.package}" if self.package else ""
        self._declare(parsed.file_elements, prefix)

    def _declare(self, elements: Iterable[Any], scope: str) -> None:
        for element in elements:
            if isinstance(element, ast.Message):
                self.kinds[f"{scope}.{element.name}"] = Field.TYPE_MESSAGE
                self._declare(element.elements, f"{scope}.{element.name}")
            elif isinstance(element, ast.Enum):
                self.kinds[f"{scope}.{element.name}"] = Field.TYPE_ENUM
            elif isinstance(element, ast.Group | ast.Extension):
                raise NotCompiled("groups and extensions")

    def descriptor(self) -> descriptor_pb2.FileDescriptorProto:
        syntax = self.parsed.syntax or "proto2"
        if self.parsed.edition or syntax not in ("proto2", "proto3"):
            raise NotCompiled("editions")
        described = descriptor_pb2.FileDescriptorProto(
            name="schema.proto", package=self.package, syntax=syntax)
        for name in self.imports:
            if not name.startswith("google/protobuf/"):
                raise NotCompiled(f"import {name}")
            described.dependency.append(name)
        scope = f".{self.package}" if self.package else ""
        for element in self.parsed.file_elements:
            if isinstance(element, ast.Message):
                self._message(element, described.message_type.add(), scope)
            elif isinstance(element, ast.Enum):
                _enum(element, described.enum_type.add())
        return described

    def _message(self, message: ast.Message, out: descriptor_pb2.DescriptorProto,
                 scope: str) -> None:
        out.name = message.name
        inner = f"{scope}.{message.name}"
        synthetic: list[descriptor_pb2.FieldDescriptorProto] = []
        for element in message.elements:
            if isinstance(element, ast.Field):
                field = self._field(element, out.field.add(), inner)
                if element.cardinality == ast.FieldCardinality.OPTIONAL and \
                        self.parsed.syntax == "proto3":
                    synthetic.append(field)
            elif isinstance(element, ast.MapField):
                self._map(element, out, inner)
            elif isinstance(element, ast.OneOf):
                out.oneof_decl.add(name=element.name)
                for member in element.elements:
                    if isinstance(member, ast.Field):
                        field = self._field(member, out.field.add(), inner)
                        field.oneof_index = len(out.oneof_decl) - 1
            elif isinstance(element, ast.Message):
                self._message(element, out.nested_type.add(), inner)
            elif isinstance(element, ast.Enum):
                _enum(element, out.enum_type.add())
        # proto3 `optional`: a synthetic oneof each, after the declared ones (protoc's order).
        for field in synthetic:
            field.proto3_optional = True
            out.oneof_decl.add(name=f"_{field.name}")
            field.oneof_index = len(out.oneof_decl) - 1

    def _field(self, given: ast.Field, out: descriptor_pb2.FieldDescriptorProto,
               scope: str) -> descriptor_pb2.FieldDescriptorProto:
        out.name, out.number = given.name, given.number
        out.label = LABELS.get(given.cardinality, Field.LABEL_OPTIONAL)  # type: ignore[arg-type]
        self._typed(given.type, out, scope)
        return out

    def _typed(self, name: str, out: descriptor_pb2.FieldDescriptorProto, scope: str) -> None:
        if name in SCALARS:
            out.type = SCALARS[name]
            return
        full = self._resolve(name, scope)
        out.type, out.type_name = self.kinds.get(full) or _well_known(full), full

    def _resolve(self, name: str, scope: str) -> str:
        """protobuf's scoping: a leading dot is absolute; otherwise the innermost enclosing
        scope declaring the name's first part wins."""
        if name.startswith("."):
            return name
        first = name.split(".", 1)[0]
        parts = scope.split(".")
        for end in range(len(parts), 0, -1):
            base = ".".join(parts[:end])
            if f"{base}.{first}" in self.kinds:
                return f"{base}.{name}"
        return f".{name}"  # the well-known types, by their full name

    def _map(self, given: ast.MapField, out: descriptor_pb2.DescriptorProto,
             scope: str) -> None:
        entry = out.nested_type.add(name=_entry_name(given.name))
        entry.options.map_entry = True
        key = entry.field.add(name="key", number=1, label=Field.LABEL_OPTIONAL)
        self._typed(given.key_type, key, scope)
        value = entry.field.add(name="value", number=2, label=Field.LABEL_OPTIONAL)
        self._typed(given.value_type, value, f"{scope}")
        out.field.add(name=given.name, number=given.number, label=Field.LABEL_REPEATED,
                      type=Field.TYPE_MESSAGE, type_name=f"{scope}.{entry.name}")


def _enum(given: ast.Enum, out: descriptor_pb2.EnumDescriptorProto) -> None:
    out.name = given.name
    for element in given.elements:
        if isinstance(element, ast.EnumValue):
            out.value.add(name=element.name, number=element.number)


def _well_known(full: str) -> int:
    pool = descriptor_pool.Default()
    try:
        pool.FindMessageTypeByName(full.lstrip("."))
        return Field.TYPE_MESSAGE
    except KeyError:
        pass
    try:
        pool.FindEnumTypeByName(full.lstrip("."))
        return Field.TYPE_ENUM
    except KeyError:
        raise NotCompiled(f"unknown type {full}") from None
