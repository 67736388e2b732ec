"""The message browser decodes values that a schema registry serializer framed (magic byte 0,
the schema id) by the stream's tenant's schema: Avro, JSON and Protobuf (registered as a
descriptor or as .proto text) as pretty JSON; a schema id of another tenant's is not looked at
(the bytes show as they are)."""

from __future__ import annotations

import base64
import io
import json
import struct

import fastavro
import pytest

from replication.engine.store import Record
from replication.services import topic_create
from replication.services.messages import messages_produce
from replication.services.registry import Candidate, schema_register
from replication.services.registryreads import registry_access
from tests.clients import signed_in
from tests.portal.registry.helpers import USER_V2, order_class

PERSON = {"type": "object", "properties": {"name": {"type": "string"}}}


def register(user, subject: str, text: str, schema_type: str = "AVRO") -> int:  # type: ignore[no-untyped-def]
    return schema_register(access=registry_access(actor=user), subject=subject,
                           candidate=Candidate(schema_type, text, None)).schema_id


def framed(schema_id: int, payload: bytes) -> bytes:
    return b"\x00" + struct.pack(">I", schema_id) + payload


def avro_bytes(value: dict) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(json.loads(USER_V2)), value)
    return out.getvalue()


@pytest.fixture
def framed_values(owner, activity):
    topic_create(actor=owner, stream=activity, name="orders", partitions=1)
    avro_id = register(owner, "orders-value", USER_V2)
    json_id = register(owner, "people-value", json.dumps(PERSON), "JSON")
    messages_produce(actor=owner, stream=activity, topic="orders", records=[
        Record(framed(avro_id, avro_bytes({"name": "Ann Avro", "age": 31})), partition=0),
        Record(framed(json_id, b'{"name": "Jo Json"}'), partition=0)])
    return avro_id, json_id


def test_avro_and_json_values_are_decoded_by_their_schema(owner, activity, framed_values):
    avro_id, json_id = framed_values
    page = signed_in(owner).get(f"/streams/{activity.pk}/messages/",
                                {"topic": "orders"}).content.decode()
    assert "&quot;name&quot;: &quot;Ann Avro&quot;" in page and "&quot;age&quot;: 31" in page
    assert f"avro, schema id {avro_id}" in page
    assert "&quot;name&quot;: &quot;Jo Json&quot;" in page and f"json, schema id {json_id}" in page
    # Hex asked for: the bytes as they are.
    hexed = signed_in(owner).get(f"/streams/{activity.pk}/messages/",
                                 {"topic": "orders", "decode": "hex"}).content.decode()
    assert "Ann Avro" not in hexed and "schema id" not in hexed


def test_another_tenants_schema_id_is_not_used(owner, outsider, activity):
    topic_create(actor=owner, stream=activity, name="orders", partitions=1)
    theirs = register(outsider, "secret-value", USER_V2)
    messages_produce(actor=owner, stream=activity, topic="orders", records=[
        Record(framed(theirs, avro_bytes({"name": "Ann Avro", "age": 1})), partition=0)])
    page = signed_in(owner).get(f"/streams/{activity.pk}/messages/",
                                {"topic": "orders"}).content.decode()
    assert "schema id" not in page and "Ann Avro" in page  # UTF-8 text of the raw bytes


def test_protobuf_values_are_decoded_by_their_descriptor(owner, activity):
    topic_create(actor=owner, stream=activity, name="orders", partitions=1)
    order = order_class()
    described = base64.b64encode(order.DESCRIPTOR.file.serialized_pb).decode()
    schema_id = register(owner, "orders-value", described, "PROTOBUF")
    # After the id, Confluent's message indexes: a lone 0 for the file's first message.
    value = framed(schema_id, b"\x00" + order(id="o-7", qty=12).SerializeToString())
    messages_produce(actor=owner, stream=activity, topic="orders",
                     records=[Record(value, partition=0)])
    page = signed_in(owner).get(f"/streams/{activity.pk}/messages/",
                                {"topic": "orders"}).content.decode()
    assert f"protobuf, schema id {schema_id}" in page
    assert "&quot;id&quot;: &quot;o-7&quot;" in page and "&quot;qty&quot;: &quot;12&quot;" in page


ORDERS_PROTO = '''syntax = "proto3";
package acme;
message Customer { string name = 1; }
message Order { string id = 1; int64 qty = 2; }
'''


def test_protobuf_values_are_decoded_by_their_proto_text(owner, activity):
    """A schema registered as .proto text (Confluent's tools, Java and Go serializers) is
    compiled to a descriptor; the message indexes pick the file's second message."""
    topic_create(actor=owner, stream=activity, name="orders", partitions=1)
    schema_id = register(owner, "orders-value", ORDERS_PROTO, "PROTOBUF")
    order = order_class()  # acme.Order made by hand, not by the compiler under test
    # Message indexes: zigzag count 1, zigzag index 1 (the second message, Order).
    value = framed(schema_id, b"\x02\x02" + order(id="o-8", qty=3).SerializeToString())
    messages_produce(actor=owner, stream=activity, topic="orders",
                     records=[Record(value, partition=0)])
    page = signed_in(owner).get(f"/streams/{activity.pk}/messages/",
                                {"topic": "orders"}).content.decode()
    assert f"protobuf, schema id {schema_id}" in page
    assert "&quot;id&quot;: &quot;o-8&quot;" in page and "&quot;qty&quot;: &quot;3&quot;" in page
