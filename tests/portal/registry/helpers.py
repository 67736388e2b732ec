"""A registry client for the tests: Django's test client signing in with HTTP Basic (a user
name and an API token, as confluent-kafka's basic.auth.user.info sends them)."""

from __future__ import annotations

import base64
import json
from typing import Any

from django.test import Client
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from accounts.tokens import issue_token

BASE = "/schemas/registry"
MEDIA = "application/vnd.schemaregistry.v1+json"
USER = json.dumps({"type": "record", "name": "User", "namespace": "acme", "fields": [
    {"name": "name", "type": "string"}]})
USER_V2 = json.dumps({"type": "record", "name": "User", "namespace": "acme", "fields": [
    {"name": "name", "type": "string"},
    {"name": "age", "type": ["null", "int"], "default": None}]})
USER_REQUIRED_AGE = json.dumps({"type": "record", "name": "User", "namespace": "acme",
                                "fields": [{"name": "name", "type": "string"},
                                           {"name": "age", "type": "int"}]})


class Registry:
    def __init__(self, user: Any, scope: str = "admin", base: str = BASE) -> None:
        secret = issue_token(user, name="registry", scope=scope)[1]
        basic = base64.b64encode(f"{user.get_username()}:{secret}".encode()).decode()
        self.client = Client(HTTP_AUTHORIZATION=f"Basic {basic}")
        self.base = base

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = json.dumps(body) if body is not None else ""
        response = self.client.generic(method, f"{self.base}/{path}", data,
                                       content_type=MEDIA)
        text = response.content.decode()
        try:
            return response.status_code, json.loads(text)
        except ValueError:
            return response.status_code, text

    def register(self, subject: str, schema: str, schema_type: str = "AVRO",
                 **extra: Any) -> tuple[int, Any]:
        return self.call("POST", f"subjects/{subject}/versions",
                         {"schema": schema, "schemaType": schema_type, **extra})


def order_class(qty_type: int = descriptor_pb2.FieldDescriptorProto.TYPE_INT64) -> type:
    """acme.Order {string id = 1; <qty_type> qty = 2;}, as protoc would generate it."""
    described = descriptor_pb2.FileDescriptorProto(name="orders.proto", package="acme",
                                                   syntax="proto3")
    message = described.message_type.add(name="Order")
    message.field.add(name="id", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                      label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    message.field.add(name="qty", number=2, type=qty_type,
                      label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(described)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("acme.Order"))
