"""confluent-kafka's SchemaRegistryClient and its Avro and JSON serializers, unchanged, against
the portal's registry (a real HTTP server) and the Kafka listener: values produced with a
schema id, consumed back and decoded; a refused incompatible schema; another tenant's id
unknown to its client."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2

from tests.broker.conftest import KafkaEndpoint, orders_topic, sasl_token
from tests.portal.registry.helpers import order_class

pytestmark = pytest.mark.slow
NAME = "/mapr/c1/apps:orders"
USER = {"type": "record", "name": "User", "namespace": "acme", "fields": [
    {"name": "name", "type": "string"},
    {"name": "age", "type": ["null", "int"], "default": None}]}
PERSON = {"$schema": "http://json-schema.org/draft-07/schema#", "title": "Person",
          "type": "object", "properties": {"name": {"type": "string"},
                                           "age": {"type": "integer"}}, "required": ["name"]}


def registry_client(url: str, user, token: str | None = None) -> SchemaRegistryClient:  # type: ignore[no-untyped-def]
    return SchemaRegistryClient({"url": f"{url}/schemas/registry",
                                 "basic.auth.user.info": f"{user.get_username()}:"
                                                         f"{token or sasl_token(user)}"})


def round_trip(kafka: KafkaEndpoint, serialize: Callable, deserialize: Callable,
               values: list[dict]) -> list[object]:
    producer = Producer(kafka.confluent())
    context = SerializationContext(NAME, MessageField.VALUE)
    for value in values:
        producer.produce(NAME, serialize(value, context), partition=0)
    assert producer.flush(30) == 0
    consumer = Consumer(kafka.confluent(**{"group.id": f"g-{uuid.uuid4().hex[:6]}"}))
    consumer.assign([TopicPartition(NAME, 0, 0)])
    got: list[object] = []
    deadline = time.monotonic() + 30
    while len(got) < len(values) and time.monotonic() < deadline:
        msg = consumer.poll(1)
        if msg is not None:
            assert msg.error() is None, msg.error()
            assert msg.value()[0] == 0  # Confluent's magic byte, then the schema id
            got.append(deserialize(msg.value(), context))
    consumer.close()
    return got


def test_avro_serializer_and_deserializer_through_the_listener(kafka, live_server, owner):
    orders_topic(owner, 1)
    client = registry_client(live_server.url, owner, kafka.password)
    serializer = AvroSerializer(client, json.dumps(USER))
    values = [{"name": "ann", "age": 31}, {"name": "bo", "age": None}]
    got = round_trip(kafka, serializer, AvroDeserializer(registry_client(live_server.url, owner)),
                     values)
    assert got == values
    # The serializer registered under Confluent's topic strategy: "<topic>-value".
    subject = f"{NAME}-value"
    assert client.get_subjects() == [subject]
    latest = client.get_latest_version(subject)
    assert latest.version == 1 and json.loads(latest.schema.schema_str)["name"] == "User"


def test_json_serializer_through_the_listener(kafka, live_server, owner):
    orders_topic(owner, 1)
    client = registry_client(live_server.url, owner, kafka.password)
    values = [{"name": "ann", "age": 31}, {"name": "bo"}]
    got = round_trip(kafka, JSONSerializer(json.dumps(PERSON), client),
                     JSONDeserializer(json.dumps(PERSON), schema_registry_client=client),
                     values)
    assert got == values
    assert client.get_latest_version(f"{NAME}-value").schema.schema_type == "JSON"


def test_protobuf_serializer_through_the_listener(kafka, live_server, owner):
    orders_topic(owner, 1)
    client = registry_client(live_server.url, owner, kafka.password)
    order = order_class()
    serializer = ProtobufSerializer(order, client, {"use.deprecated.format": False})
    deserializer = ProtobufDeserializer(order, {"use.deprecated.format": False})
    got = round_trip(kafka, lambda value, ctx: serializer(order(**value), ctx),
                     deserializer, [{"id": "o-1", "qty": 3}])
    assert [(m.id, m.qty) for m in got] == [("o-1", 3)]
    assert client.get_latest_version(f"{NAME}-value").schema.schema_type == "PROTOBUF"
    # qty as a string now: a changed field type, refused under BACKWARD.
    retyped = order_class(descriptor_pb2.FieldDescriptorProto.TYPE_STRING)
    refusing = ProtobufSerializer(retyped, client, {"use.deprecated.format": False})
    with pytest.raises(SchemaRegistryError, match="type int64 written") as refused:
        refusing(retyped(id="x", qty="1"), SerializationContext(NAME, MessageField.VALUE))
    assert refused.value.error_code == 409


def test_client_sees_409_and_error_codes(live_server, owner, outsider):
    client = registry_client(live_server.url, owner)
    schema_id = client.register_schema("users-value", Schema(json.dumps(USER), "AVRO"))
    assert client.register_schema("users-value", Schema(json.dumps(USER), "AVRO")) == schema_id
    required = {**USER, "fields": [*USER["fields"], {"name": "email", "type": "string"}]}
    assert client.test_compatibility("users-value", Schema(json.dumps(required), "AVRO")) \
        is False
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema("users-value", Schema(json.dumps(required), "AVRO"))
    assert (refused.value.http_status_code, refused.value.error_code) == (409, 409)
    client.set_compatibility("users-value", "NONE")
    assert client.get_compatibility("users-value") == "NONE"
    assert client.register_schema("users-value", Schema(json.dumps(required), "AVRO")) \
        != schema_id
    assert client.delete_version("users-value", 2) == 2
    assert client.get_versions("users-value") == [1]
    # Another tenant's client knows neither the subject nor the id.
    theirs = registry_client(live_server.url, outsider)
    with pytest.raises(SchemaRegistryError) as unknown:
        theirs.get_schema(schema_id)
    assert (unknown.value.http_status_code, unknown.value.error_code) == (404, 40403)
    with pytest.raises(SchemaRegistryError) as no_subject:
        theirs.get_latest_version("users-value")
    assert no_subject.value.error_code == 40401
    assert theirs.get_subjects() == []
