"""Avro schemas: parsed with the Avro project's own library, compatibility by its schema
resolution rules (avro.compatibility, the port of Java's SchemaCompatibility)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import avro.errors
import avro.name
import avro.schema
from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

from replication.schemas.errors import InvalidSchema


def _json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        # A bare primitive name ("string") is valid Avro as it is.
        if text.strip().isidentifier():
            return text.strip()
        raise InvalidSchema(f"{what} is not valid JSON, so not an Avro schema") from None


def parse(text: str, references: Sequence[str]) -> tuple[str, avro.schema.Schema]:
    """The canonical text (Avro's JSON form, compact), and the parsed schema. Named types of
    the references are parsed first, so the schema may use them by name; a schema with
    references keeps its own JSON (compacted), which names them rather than inlining them."""
    names = avro.name.Names()
    try:
        for number, reference in enumerate(references, 1):
            avro.schema.make_avsc_object(_json(reference, f"reference {number}"), names)
        data = _json(text, "the schema")
        parsed = avro.schema.make_avsc_object(data, names)
    except (avro.errors.AvroException, TypeError, KeyError, AttributeError) as error:
        raise InvalidSchema(f"invalid Avro schema: {error}") from None
    shown = data if references else parsed.to_json()
    return json.dumps(shown, separators=(",", ":")), parsed


def incompatibilities(reader: avro.schema.Schema, writer: avro.schema.Schema) -> list[str]:
    result = ReaderWriterCompatibilityChecker().get_compatibility(reader, writer)
    if result.compatibility is SchemaCompatibilityType.compatible:
        return []
    kinds = sorted(str(k.name) for k in result.incompatibilities)
    where = ", ".join(sorted(result.locations)) or "/"
    what = ", ".join(sorted(str(m) for m in result.messages))
    return [f"{' '.join(kinds)} at {where}: {what}"]
