"""JSON Schemas: valid when the jsonschema library's metaschema check passes (the draft the
schema's `$schema` names, else the latest); compatibility for the common cases, checked
recursively through `properties` and array `items`:

- a property the reader requires that the writer did not require: its data may lack it;
- a property whose `type` differs (a reader's `number` reads a writer's `integer`; a reader's
  list of types must cover the writer's);
- a reader's `enum` missing values of the writer's enum;
- a reader closed to other properties (`additionalProperties: false`) lacking one the writer
  declares.

Adding or removing an optional property is compatible both ways (the open content model's
everyday reading, narrower than Confluent's strictest). `$ref`, `oneOf`/`anyOf`/`allOf`, `not`
and conditional keywords are not compared."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import jsonschema
import jsonschema.exceptions
import jsonschema.validators

from replication.schemas.errors import InvalidSchema


def parse(text: str, references: Sequence[str]) -> tuple[str, Any]:
    try:
        data = json.loads(text)
    except ValueError as error:
        raise InvalidSchema(f"the schema is not valid JSON: {error}") from None
    if not isinstance(data, dict | bool):
        raise InvalidSchema("a JSON Schema is an object (or true/false)")
    try:
        jsonschema.validators.validator_for(data).check_schema(data)
    except jsonschema.exceptions.SchemaError as error:
        where = "/".join(str(p) for p in error.path) or "the root"
        raise InvalidSchema(f"invalid JSON Schema at {where}: {error.message}") from None
    return json.dumps(data, separators=(",", ":")), data


def _types(schema: Any) -> set[str] | None:
    declared = schema.get("type") if isinstance(schema, dict) else None
    if declared is None:
        return None
    return {declared} if isinstance(declared, str) else set(declared)


def _type_problem(reader: Any, writer: Any, where: str) -> list[str]:
    read, written = _types(reader), _types(writer)
    if read is None or written is None:
        return []
    if "number" in read:
        read = read | {"integer"}
    missing = written - read
    if missing:
        return [f"{where}: type {sorted(written)} written, reader takes {sorted(read)}"]
    return []


def _enum_problem(reader: Any, writer: Any, where: str) -> list[str]:
    if not isinstance(reader, dict) or "enum" not in reader:
        return []
    if not isinstance(writer, dict) or "enum" not in writer:
        return [f"{where}: the reader restricts values to an enum the writer did not"]
    lost = [v for v in writer["enum"] if v not in reader["enum"]]
    return [f"{where}: enum values {lost} removed"] if lost else []


def _object_problems(reader: dict, writer: dict, where: str) -> list[str]:
    found: list[str] = []
    read_props, written_props = reader.get("properties", {}), writer.get("properties", {})
    newly_required = set(reader.get("required", [])) - set(writer.get("required", []))
    found += [f"{where}: property {name!r} is required, and data written before may lack it"
              for name in sorted(newly_required)]
    if reader.get("additionalProperties") is False:
        found += [f"{where}: property {name!r} was written, and the reader allows no other "
                  "properties" for name in sorted(set(written_props) - set(read_props))]
    for name in sorted(set(read_props) & set(written_props)):
        found += incompatibilities(read_props[name], written_props[name],
                                   f"{where}/properties/{name}")
    return found


def incompatibilities(reader: Any, writer: Any, where: str = "#") -> list[str]:
    if not isinstance(reader, dict) or not isinstance(writer, dict):
        return [] if reader is True or reader == writer else [f"{where}: schema changed"]
    found = _type_problem(reader, writer, where) + _enum_problem(reader, writer, where)
    found += _object_problems(reader, writer, where)
    read_items, written_items = reader.get("items"), writer.get("items")
    if isinstance(read_items, dict) and isinstance(written_items, dict):
        found += incompatibilities(read_items, written_items, f"{where}/items")
    return found
