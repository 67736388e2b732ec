"""A schema text parsed by its type: validity, the canonical text a schema is stored and
deduplicated by, and the compatibility check between two versions of a subject.

Compatibility directions follow Confluent: BACKWARD means the new schema reads data written
with the old one (the new schema is the reader), FORWARD the old one reads the new's data, FULL
both; the _TRANSITIVE levels check against every live version instead of the latest."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from replication.schemas import avroformat, jsonformat, protoformat
from replication.schemas.errors import InvalidSchema

TYPES = ("JSON", "PROTOBUF", "AVRO")  # the order Confluent's /schemas/types lists them in


@dataclass(frozen=True)
class Reference:
    """A named reference to another subject's version, with that version's schema text."""

    name: str
    subject: str
    version: int
    text: str = field(compare=False)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "subject": self.subject, "version": self.version}


@dataclass(frozen=True)
class Parsed:
    schema_type: str
    text: str  # canonical
    references: tuple[Reference, ...]
    handle: Any = field(compare=False, repr=False)  # the parser's object, for compatibility

    @property
    def fingerprint(self) -> str:
        refs = json.dumps([r.as_dict() for r in self.references], separators=(",", ":"))
        digest = hashlib.sha256(f"{self.schema_type}\n{self.text}\n{refs}".encode())
        return digest.hexdigest()


@dataclass(frozen=True)
class Format:
    parse: Callable[[str, Sequence[str]], tuple[str, Any]]
    # Reasons the reader cannot read what the writer wrote (empty: compatible).
    incompatibilities: Callable[[Any, Any], list[str]]


FORMATS: dict[str, Format] = {
    "AVRO": Format(avroformat.parse, avroformat.incompatibilities),
    "JSON": Format(jsonformat.parse, jsonformat.incompatibilities),
    "PROTOBUF": Format(protoformat.parse, protoformat.incompatibilities),
}


def parse(schema_type: str | None, text: Any,
          references: Sequence[Reference] = ()) -> Parsed:
    kind = (schema_type or "AVRO").upper()
    if kind not in FORMATS:
        raise InvalidSchema(f"unknown schema type {schema_type!r}: use one of "
                            f"{', '.join(TYPES)}")
    if not isinstance(text, str) or not text.strip():
        raise InvalidSchema("the request has no schema: send {\"schema\": \"<schema text>\"}")
    canonical, handle = FORMATS[kind].parse(text, [r.text for r in references])
    return Parsed(kind, canonical, tuple(references), handle)


def incompatibilities(level: str, new: Parsed, olds: Sequence[Parsed]) -> list[str]:
    """Why `new` breaks `level` against `olds` (the subject's live versions, oldest first);
    empty when compatible. Non-transitive levels look at the latest only."""
    if level == "NONE" or not olds:
        return []
    against = olds if level.endswith("_TRANSITIVE") else olds[-1:]
    check = FORMATS[new.schema_type].incompatibilities
    found: list[str] = []
    for old in reversed(against):
        if old.schema_type != new.schema_type:
            found.append(f"the schema type changed from {old.schema_type} to "
                         f"{new.schema_type}")
            continue
        if level.startswith(("BACKWARD", "FULL")):
            found += [f"BACKWARD: {m}" for m in check(new.handle, old.handle)]
        if level.startswith(("FORWARD", "FULL")):
            found += [f"FORWARD: {m}" for m in check(old.handle, new.handle)]
    return found
