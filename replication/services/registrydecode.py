"""Messages framed as Confluent's serializers write them (a zero magic byte, the schema id in
four big-endian bytes, then the data) decoded by the schema registry's schema for the message
browser: Avro by the writer's schema, JSON as itself. Only the stream's tenant's schemas are
looked at, and those of the tenants replicating into its streams (whose messages its replicas
hold), so a message never shows an unrelated tenant's schema. Protobuf values are decoded by
a schema registered as a FileDescriptorProto (as confluent-kafka's serializer does) or as
.proto text, compiled without protoc (replication/schemas/protocompile.py); one importing
more than the well-known types is named (id and type) but not decoded."""

from __future__ import annotations

import io
import json
import struct
from dataclasses import dataclass, field
from typing import Any

import avro.errors
import avro.io

from replication.errors import NotFound
from replication.schemas import protodescriptor
from replication.schemas.errors import InvalidSchema
from replication.services.registryreads import parsed_of, schema_by_id

MAGIC = 0
HEADER = 5


@dataclass(frozen=True)
class Decoded:
    schema_id: int
    schema_type: str
    text: str | None  # pretty JSON; None: the schema is known, its data not decodable here


def framed_id(data: bytes | None) -> int | None:
    if data is None or len(data) < HEADER or data[0] != MAGIC:
        return None
    return struct.unpack(">I", data[1:HEADER])[0]


def _avro(handle: Any, payload: bytes) -> Any:
    return avro.io.DatumReader(handle).read(avro.io.BinaryDecoder(io.BytesIO(payload)))


@dataclass
class SchemaDecoder:
    """One page's decoder: each schema id looked up once."""

    tenant: Any
    _parsed: dict[int, Any] = field(default_factory=dict)

    def _schema(self, schema_id: int) -> Any:
        if schema_id not in self._parsed:
            try:
                self._parsed[schema_id] = parsed_of(schema_by_id(self.tenant, schema_id,
                                                                 upstream=True))
            except (NotFound, InvalidSchema):
                self._parsed[schema_id] = None
        return self._parsed[schema_id]

    def decode(self, data: bytes | None) -> Decoded | None:
        schema_id = framed_id(data)
        parsed = self._schema(schema_id) if schema_id is not None else None
        if parsed is None or data is None:
            return None
        payload = data[HEADER:]
        try:
            if parsed.schema_type == "AVRO":
                value = _avro(parsed.handle, payload)
            elif parsed.schema_type == "JSON":
                value = json.loads(payload)
            else:
                value = protodescriptor.decode(parsed.text, payload)
                if value is None:
                    return Decoded(schema_id, parsed.schema_type, None)
        except (avro.errors.AvroException, ValueError, EOFError, struct.error, TypeError):
            return None
        text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
        return Decoded(schema_id, parsed.schema_type, text)
