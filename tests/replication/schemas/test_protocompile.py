""".proto text compiled to a descriptor without protoc: what protobuf's own descriptor pool
accepts, decoding what a hand-made descriptor's class wrote, with protobuf's scoping rules,
maps, oneofs, proto3 optional, enums and the well-known types; what it cannot compile is None."""

from __future__ import annotations

import pytest
from google.protobuf import descriptor_pool, json_format, message_factory, timestamp_pb2

from replication.schemas import protocompile, protodescriptor
from tests.portal.registry.helpers import order_class

RICH = '''syntax = "proto3";
package shop.v1;
import "google/protobuf/timestamp.proto";
message Order {
  optional int32 priority = 1;
  repeated string tags = 2;
  map<string, Line> lines = 3;
  oneof payer { string card = 4; Account account = 5; }
  enum State { NEW = 0; PAID = 1; }
  State state = 6;
  message Line { int64 qty = 1; }
  google.protobuf.Timestamp at = 7;
  .shop.v1.Order.Line first = 8;
}
message Account { string id = 1; Order.State last = 2; }
'''


def classes(text: str) -> descriptor_pool.DescriptorPool:
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(protocompile.compile_proto(text))
    return pool


def test_a_rich_schema_compiles_and_round_trips():
    pool = classes(RICH)
    order = message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.v1.Order"))
    written = order(priority=0, tags=["a"], card="4111", state=1)
    written.lines["x"].qty = 2
    written.first.qty = 9
    written.at.seconds = 60
    framed = b"\x00" + written.SerializeToString()
    assert protodescriptor.decode(RICH, framed) == {
        "priority": 0, "tags": ["a"], "lines": {"x": {"qty": "2"}}, "card": "4111",
        "state": "PAID", "at": "1970-01-01T00:01:00Z", "first": {"qty": "9"}}
    described = pool.FindMessageTypeByName("shop.v1.Order")
    assert described.fields_by_name["priority"].has_presence  # proto3 optional
    assert described.fields_by_name["card"].containing_oneof.name == "payer"
    account = pool.FindMessageTypeByName("shop.v1.Account")
    assert account.fields_by_name["last"].enum_type.full_name == "shop.v1.Order.State"


def test_it_decodes_what_a_hand_made_descriptors_class_wrote():
    order = order_class()
    text = 'syntax = "proto3"; package acme; message Order { string id = 1; int64 qty = 2; }'
    value = order(id="o-1", qty=5).SerializeToString()
    assert protodescriptor.decode(text, b"\x00" + value) == json_format.MessageToDict(
        order(id="o-1", qty=5), preserving_proto_field_name=True)


@pytest.mark.parametrize("text", [
    'syntax = "proto3"; import "acme/other.proto"; message X { acme.Y y = 1; }',
    'syntax = "proto3"; message X { Missing y = 1; }',
    'syntax = "proto2"; message X { optional group G = 1 { optional int32 a = 2; } }',
    "not a proto file {",
])
def test_what_cannot_be_compiled_is_none(text):
    assert protocompile.compile_proto(text) is None
    assert protodescriptor.decode(text, b"\x00\x08\x01") is None
