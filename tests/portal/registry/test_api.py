"""The schema registry's REST API as Confluent's: registration and ids, versions, lookup,
deletes, compatibility levels, error bodies, and tenant isolation."""

from __future__ import annotations

import base64
import json

import pytest
from django.test import Client

from operations.models import AuditEvent
from tests.portal.registry.helpers import MEDIA, USER, USER_REQUIRED_AGE, USER_V2, Registry

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice(owner):
    return Registry(owner)


def test_register_returns_one_id_per_schema_text(alice):
    status, made = alice.register("users-value", USER)
    assert status == 200 and made["version"] == 1
    # The same text again (spaced differently), and under another subject: the same id.
    assert alice.register("users-value", json.dumps(json.loads(USER), indent=2))[1]["id"] \
        == made["id"]
    assert alice.register("people-value", USER)[1]["id"] == made["id"]
    assert alice.call("GET", "subjects/users-value/versions") == (200, [1])
    assert alice.call("GET", f"schemas/ids/{made['id']}/subjects") == \
        (200, ["people-value", "users-value"])
    assert alice.call("GET", f"schemas/ids/{made['id']}/versions")[1] == [
        {"subject": "people-value", "version": 1}, {"subject": "users-value", "version": 1}]


def test_versions_latest_lookup_and_raw_schema(alice):
    first = alice.register("users-value", USER)[1]["id"]
    second = alice.register("users-value", USER_V2)[1]["id"]
    assert second != first
    status, latest = alice.call("GET", "subjects/users-value/versions/latest")
    assert status == 200 and latest["version"] == 2 and latest["id"] == second
    assert "schemaType" not in latest  # Avro, as Confluent leaves it out
    assert json.loads(latest["schema"]) == json.loads(USER_V2)
    assert alice.call("GET", "subjects/users-value/versions/1/schema") == (200, json.loads(USER))
    status, found = alice.call("POST", "subjects/users-value", {"schema": USER})
    assert status == 200 and (found["version"], found["id"]) == (1, first)
    assert json.loads(alice.call("GET", f"schemas/ids/{first}")[1]["schema"]) == \
        json.loads(USER)
    assert alice.call("GET", "schemas/types") == (200, ["JSON", "PROTOBUF", "AVRO"])
    listed = alice.call("GET", "schemas?latestOnly=true")[1]
    assert [(r["subject"], r["version"], r["id"]) for r in listed] == [("users-value", 2, second)]
    assert len(alice.call("GET", "schemas")[1]) == 2


def test_incompatible_schema_is_refused_with_409(alice):
    alice.register("users-value", USER)
    status, body = alice.register("users-value", USER_REQUIRED_AGE)
    assert status == 409 and body["error_code"] == 409
    assert "incompatible" in body["message"] and "BACKWARD" in body["message"]
    assert alice.call("POST", "compatibility/subjects/users-value/versions/latest",
                      {"schema": USER_REQUIRED_AGE}) == (200, {"is_compatible": False})
    assert alice.call("POST", "compatibility/subjects/users-value/versions/latest",
                      {"schema": USER_V2}) == (200, {"is_compatible": True})
    # NONE lets it in; FORWARD judges the other way round.
    assert alice.call("PUT", "config/users-value", {"compatibility": "NONE"}) == \
        (200, {"compatibility": "NONE"})
    assert alice.register("users-value", USER_REQUIRED_AGE)[0] == 200
    assert alice.call("GET", "config/users-value") == (200, {"compatibilityLevel": "NONE"})
    assert alice.call("GET", "config") == (200, {"compatibilityLevel": "BACKWARD"})


def test_transitive_levels_check_every_version(alice):
    alice.call("PUT", "config", {"compatibility": "BACKWARD_TRANSITIVE"})
    alice.register("s", json.dumps({"type": "record", "name": "R", "fields": [
        {"name": "a", "type": "int"}]}))
    # v2 drops a and adds b with a default: compatible with v1.
    alice.register("s", json.dumps({"type": "record", "name": "R", "fields": [
        {"name": "b", "type": "int", "default": 0}]}))
    # v3 needs a without a default: v2 data lacks it, v1's has it; transitive checks both.
    v3 = json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"},
                                                              {"name": "b", "type": "int",
                                                               "default": 0}]})
    assert alice.register("s", v3)[0] == 409
    alice.call("PUT", "config", {"compatibility": "FULL"})
    assert alice.register("s", v3)[0] == 409  # against v2: reading v2 data lacks a
    alice.call("PUT", "config", {"compatibility": "FORWARD"})
    assert alice.register("s", v3)[0] == 200  # v2 reads v3's data


def test_json_schema_compatibility(alice):
    person = {"type": "object", "properties": {"name": {"type": "string"}},
              "required": ["name"]}
    assert alice.register("p", json.dumps(person), "JSON")[0] == 200
    optional = {**person, "properties": {**person["properties"], "age": {"type": "integer"}}}
    assert alice.register("p", json.dumps(optional), "JSON")[0] == 200
    required = {**optional, "required": ["name", "age"]}
    status, body = alice.register("p", json.dumps(required), "JSON")
    assert status == 409 and "'age' is required" in body["message"]
    retyped = {**optional, "properties": {**optional["properties"], "age": {"type": "string"}}}
    assert alice.register("p", json.dumps(retyped), "JSON")[0] == 409
    latest = alice.call("GET", "subjects/p/versions/latest")[1]
    assert latest["schemaType"] == "JSON" and json.loads(latest["schema"]) == optional


def test_protobuf_is_parsed_and_field_changes_checked(alice):
    v1 = 'syntax = "proto3";\npackage acme;\nmessage Order { string id = 1; int64 qty = 2; }'
    assert alice.register("o", v1, "PROTOBUF")[0] == 200
    status, body = alice.register("o", "message { ", "PROTOBUF")
    assert status == 422 and body["error_code"] == 42201
    retyped = v1.replace("int64 qty", "string qty")
    assert alice.register("o", retyped, "PROTOBUF")[0] == 409
    removed = v1.replace(" int64 qty = 2;", "")
    assert alice.register("o", removed, "PROTOBUF")[0] == 200
    assert alice.call("GET", "subjects/o/versions/2")[1]["schemaType"] == "PROTOBUF"


def test_references_are_stored_and_resolved(alice):
    address = json.dumps({"type": "record", "name": "Address", "namespace": "acme",
                          "fields": [{"name": "city", "type": "string"}]})
    alice.register("address", address)
    customer = json.dumps({"type": "record", "name": "Customer", "namespace": "acme",
                           "fields": [{"name": "home", "type": "acme.Address"}]})
    refs = [{"name": "acme.Address", "subject": "address", "version": 1}]
    status, made = alice.register("customer", customer, references=refs)
    assert status == 200
    assert alice.call("GET", f"schemas/ids/{made['id']}")[1]["references"] == refs
    address_id = alice.call("GET", "subjects/address/versions/1")[1]["id"]
    assert alice.call("GET", "subjects/address/versions/1/referencedby") == (200, [made["id"]])
    assert address_id != made["id"]
    # Without the reference the named type is unknown.
    assert alice.register("customer2", customer)[1]["error_code"] == 42201


def test_soft_then_permanent_delete(alice, owner):
    alice.register("users-value", USER)
    schema_id = alice.register("users-value", USER_V2)[1]["id"]
    assert alice.call("DELETE", "subjects/users-value/versions/2?permanent=true")[1][
        "error_code"] == 40407
    assert alice.call("DELETE", "subjects/users-value/versions/2") == (200, 2)
    assert alice.call("GET", "subjects/users-value/versions") == (200, [1])
    assert alice.call("GET", "subjects/users-value/versions?deleted=true") == (200, [1, 2])
    assert alice.call("GET", "subjects/users-value/versions?deleted_only=true") == (200, [2])
    assert alice.call("GET", "subjects/users-value/versions?deleted=true&offset=1&limit=1") \
        == (200, [2])
    # A soft-deleted version's schema still resolves by id (old messages stay readable).
    assert alice.call("GET", f"schemas/ids/{schema_id}")[0] == 200
    assert alice.call("DELETE", "subjects/users-value") == (200, [1])
    assert alice.call("GET", "subjects") == (200, [])
    assert alice.call("GET", "subjects?deleted=true") == (200, ["users-value"])
    assert alice.call("DELETE", "subjects/users-value?permanent=true") == (200, [1, 2])
    assert alice.call("GET", f"schemas/ids/{schema_id}")[1]["error_code"] == 40403
    # A new registration numbers on from scratch once the subject is gone.
    assert alice.register("users-value", USER)[1]["version"] == 1
    audited = AuditEvent.objects.filter(object_type="subjectversion")
    assert set(audited.values_list("action", flat=True)) == {"create", "delete"}
    assert audited.filter(action="delete", actor=owner, interface="api").count() == 4


def test_error_bodies_carry_confluent_codes(alice):
    def code(method: str, path: str, body: object = None) -> tuple[int, int]:
        status, answer = alice.call(method, path, body)
        return status, answer["error_code"]

    assert code("GET", "subjects/nope/versions") == (404, 40401)
    alice.register("s", USER)
    assert code("GET", "subjects/s/versions/7") == (404, 40402)
    assert code("GET", "subjects/s/versions/zero") == (422, 42202)
    assert code("GET", "schemas/ids/999999") == (404, 40403)
    assert code("POST", "subjects/s", {"schema": USER_V2}) == (404, 40403)
    assert code("POST", "subjects/s/versions", {"schema": "{not json"}) == (422, 42201)
    assert code("POST", "subjects/s/versions", {"schema": USER, "schemaType": "XML"}) == \
        (422, 42201)
    assert code("PUT", "config", {"compatibility": "SIDEWAYS"}) == (422, 42203)
    assert code("GET", "config/s") == (404, 40408)
    assert code("GET", "no/such/path") == (404, 404)
    response = alice.client.get("/schemas/registry/subjects")
    assert response["Content-Type"] == MEDIA


def test_readonly_mode_refuses_registration(alice):
    assert alice.call("PUT", "mode/s", {"mode": "READONLY"}) == (200, {"mode": "READONLY"})
    assert alice.call("GET", "mode") == (200, {"mode": "READWRITE"})
    assert alice.register("s", USER)[1]["error_code"] == 42205
    alice.call("DELETE", "mode/s")
    assert alice.register("s", USER)[0] == 200


def test_sign_in_is_basic_with_an_api_token(owner):
    anonymous = Client().get("/schemas/registry/subjects")
    assert anonymous.status_code == 401 and anonymous.json()["error_code"] == 40101
    assert anonymous["WWW-Authenticate"].startswith("Basic")
    wrong = base64.b64encode(b"alice:not-a-token").decode()
    refused = Client(HTTP_AUTHORIZATION=f"Basic {wrong}").get("/schemas/registry/subjects")
    assert refused.status_code == 401


def test_read_token_reads_but_cannot_register(owner):
    Registry(owner).register("s", USER)
    reader = Registry(owner, scope="read")
    assert reader.call("GET", "subjects") == (200, ["s"])
    status, body = reader.register("s", USER_V2)
    assert status == 403 and body["error_code"] == 40301 and "scope" in body["message"]


def test_outsider_sees_nothing_of_another_tenant(alice, outsider):
    made = alice.register("users-value", USER)[1]
    mallory = Registry(outsider)
    assert mallory.call("GET", "subjects") == (200, [])
    assert mallory.call("GET", "subjects/users-value/versions/1")[1]["error_code"] == 40401
    assert mallory.call("GET", f"schemas/ids/{made['id']}")[1]["error_code"] == 40403
    assert mallory.call("GET", f"schemas/guids/{made['guid']}")[0] == 404
    assert mallory.call("DELETE", "subjects/users-value")[0] == 404
    # Her own registration of the same text gets an id of her own.
    assert mallory.register("users-value", USER)[1]["id"] != made["id"]
    assert Registry(outsider, base="/schemas/registry/tenants/acme").call(
        "GET", "subjects")[0] == 404
    assert Registry(outsider, base="/schemas/registry/tenants/globex").call(
        "GET", "subjects") == (200, ["users-value"])
