"""schema list|info|register|check|delete|compatibility over /rest: the registry's own rules
(compatibility, soft then permanent deletes, roles and token scopes), maprcli's envelope for
every refusal, nothing changed by a refusal, and another tenant's registry unseen."""

from __future__ import annotations

import errno
from typing import Any

import pytest
from django.test import Client

from accounts.models import Role
from accounts.tokens import issue_token
from operations.models import AuditEvent, Interface
from replication.models import RegisteredSchema, RegistryConfig, SubjectVersion
from tests.portal.registry.helpers import USER, USER_REQUIRED_AGE, USER_V2
from tests.portal.test_rest import call, ok

pytestmark = pytest.mark.django_db
PROTO = 'syntax = "proto3";\npackage acme;\nmessage Order { string id = 1; int64 qty = 2; }\n'


def refused(response: Any, status: int, error_id: int) -> str:
    body = response.json()
    assert response.status_code == status and body["status"] == "ERROR", body
    assert list(body) == ["timestamp", "timeofday", "status", "errors"]
    assert body["errors"][0]["id"] == error_id, body
    return body["errors"][0]["desc"]


def registry_state() -> list[Any]:
    return [list(m.objects.order_by("pk").values()) for m in
            (RegisteredSchema, SubjectVersion, RegistryConfig)]


def token_client(user: Any, scope: str) -> Any:
    return Client(HTTP_AUTHORIZATION=f"Token {issue_token(user, name='t', scope=scope)[1]}")


@pytest.fixture
def alice(api, owner):
    return api(owner)


def test_register_list_info_and_the_same_schema_twice(alice):
    [made] = ok(call(alice, "schema/register", subject="users-value", schema=USER))
    assert (made["subject"], made["version"], made["type"]) == ("users-value", 1, "AVRO")
    [again] = ok(call(alice, "schema/register", subject="users-value", schema=USER))
    assert (again["version"], again["id"]) == (1, made["id"])  # the version holding it
    [v2] = ok(call(alice, "schema/register", subject="users-value", schema=USER_V2))
    [proto] = ok(call(alice, "schema/register", subject="orders-value", type="protobuf",
                      schema=PROTO))
    assert proto["type"] == "PROTOBUF" and proto["id"] not in (made["id"], v2["id"])
    listed = ok(call(alice, "schema/list"))
    assert [(r["subject"], r["versions"], r["latestversion"], r["id"], r["compatibility"])
            for r in listed] == [("orders-value", [1], 1, proto["id"], "BACKWARD"),
                                 ("users-value", [1, 2], 2, v2["id"], "BACKWARD")]
    assert [r["version"] for r in ok(call(alice, "schema/info", subject="users-value"))] == [1, 2]
    [latest] = ok(call(alice, "schema/info", subject="users-value", version="latest"))
    assert latest["version"] == 2 and '"age"' in latest["schema"]


def test_an_incompatible_schema_is_refused_with_the_reason_and_check_says_so_first(alice):
    ok(call(alice, "schema/register", subject="users-value", schema=USER))
    [check] = ok(call(alice, "schema/check", subject="users-value", schema=USER_REQUIRED_AGE))
    assert check["compatible"] is False and check["compatibility"] == "BACKWARD"
    assert any("age" in message for message in check["messages"])
    [fine] = ok(call(alice, "schema/check", subject="users-value", schema=USER_V2))
    assert fine["compatible"] is True and fine["messages"] == []
    before = registry_state()
    desc = refused(call(alice, "schema/register", subject="users-value",
                        schema=USER_REQUIRED_AGE), 409, errno.EEXIST)
    assert "incompatible with an earlier schema for subject 'users-value'" in desc
    assert registry_state() == before


def test_compatibility_shown_set_and_cleared_per_subject_and_for_the_registry(alice):
    ok(call(alice, "schema/register", subject="users-value", schema=USER))
    [shown] = ok(call(alice, "schema/compatibility", subject="users-value"))
    assert (shown["compatibility"], shown["source"]) == ("BACKWARD", "default")
    [set_] = ok(call(alice, "schema/compatibility", subject="users-value", level="none"))
    assert (set_["compatibility"], set_["source"]) == ("NONE", "subject")
    ok(call(alice, "schema/register", subject="users-value", schema=USER_REQUIRED_AGE))
    [registry] = ok(call(alice, "schema/compatibility", level="full_transitive"))
    assert (registry["subject"], registry["compatibility"]) == ("", "FULL_TRANSITIVE")
    [cleared] = ok(call(alice, "schema/compatibility", subject="users-value", level="default"))
    assert (cleared["compatibility"], cleared["source"]) == ("FULL_TRANSITIVE", "default")
    audited = AuditEvent.objects.filter(object_type="registryconfig", interface=Interface.REST)
    assert audited.count() >= 3  # each change audited, as made through /rest


def test_delete_soft_then_permanent_for_a_version_and_a_subject(alice):
    ok(call(alice, "schema/register", subject="users-value", schema=USER))
    ok(call(alice, "schema/register", subject="users-value", schema=USER_V2))
    before = registry_state()
    desc = refused(call(alice, "schema/delete", subject="users-value", version="2",
                        permanent="true"), 404, errno.ENOENT)
    assert "was not deleted first" in desc and registry_state() == before
    assert ok(call(alice, "schema/delete", subject="users-value", version="2")) == [
        {"subject": "users-value", "version": 2, "permanent": False}]
    assert [r["version"] for r in ok(call(alice, "schema/info", subject="users-value"))] == [1]
    assert [r["version"] for r in ok(call(alice, "schema/info", subject="users-value",
                                          deleted="true"))] == [1, 2]
    ok(call(alice, "schema/delete", subject="users-value", version="2", permanent="true"))
    ok(call(alice, "schema/delete", subject="users-value"))
    assert ok(call(alice, "schema/list")) == []
    assert ok(call(alice, "schema/list", deleted="true")) == [
        {"subject": "users-value", "versions": [], "deleted": True}]
    ok(call(alice, "schema/delete", subject="users-value", permanent="true"))
    assert not SubjectVersion.objects.exists()


@pytest.mark.parametrize(("params", "status", "expected"), [
    ({"subject": "s", "schema": "{not json"}, 422, "schema"),
    ({"subject": "s", "schema": USER, "type": "xml"}, 400,
     "-type 'xml' is not one of avro, json, protobuf"),
    ({"subject": "s", "schema": PROTO, "type": "protobuf", "references": "[oops"}, 400,
     "-references is not JSON"),
    ({"subject": "", "schema": USER}, 400, "subject names are 1 to 255"),
    ({"schema": USER}, 400, "-subject is required for 'schema register'"),
    ({"subject": "s", "schema": USER, "tenant": "globex"}, 404, "no tenant 'globex' among"),
])
def test_bad_registrations_are_refused_with_the_reason_and_change_nothing(
        alice, outsider, params, status, expected):
    before = registry_state()
    response = call(alice, "schema/register", **params)
    assert response.status_code == status, response.json()
    assert expected in response.json()["errors"][0]["desc"]
    assert registry_state() == before


def test_bad_levels_and_versions_name_the_option(alice):
    ok(call(alice, "schema/register", subject="users-value", schema=USER))
    before = registry_state()
    assert "-level 'loose' is not one of none, backward" in refused(
        call(alice, "schema/compatibility", subject="users-value", level="loose"), 400,
        errno.EINVAL)
    assert "-level default clears a subject's own level: give -subject" in refused(
        call(alice, "schema/compatibility", level="default"), 400, errno.EINVAL)
    assert "the version 'two' is not valid" in refused(
        call(alice, "schema/info", subject="users-value", version="two"), 422, errno.EINVAL)
    assert "subject 'nothing' not found" in refused(
        call(alice, "schema/info", subject="nothing"), 404, errno.ENOENT)
    assert registry_state() == before


def test_roles_and_token_scopes_are_the_registry_apis(owner, member):
    viewer = member.memberships.get()
    viewer.role = Role.VIEWER
    viewer.save()
    as_viewer = token_client(member, "admin")
    assert ok(call(as_viewer, "schema/list")) == []
    before = registry_state()
    assert "needs the role admin or member in tenant acme; yours is viewer" in refused(
        call(as_viewer, "schema/register", subject="s", schema=USER), 403, errno.EPERM)
    read_token = token_client(owner, "read")
    assert "needs the produce scope" in refused(
        call(read_token, "schema/register", subject="s", schema=USER), 403, errno.EPERM)
    produce = token_client(owner, "produce")
    ok(call(produce, "schema/register", subject="s", schema=USER))
    after_register = registry_state()
    assert "needs the admin scope" in refused(call(produce, "schema/delete", subject="s"), 403,
                                              errno.EPERM)
    assert "needs the admin scope" in refused(
        call(produce, "schema/compatibility", subject="s", level="none"), 403, errno.EPERM)
    assert registry_state() == after_register != before


def test_an_outsider_sees_nothing_of_another_tenants_registry(alice, api, outsider):
    ok(call(alice, "schema/register", subject="users-value", schema=USER))
    mallory = api(outsider)
    assert ok(call(mallory, "schema/list")) == []
    before = registry_state()
    assert "subject 'users-value' not found" in refused(
        call(mallory, "schema/info", subject="users-value"), 404, errno.ENOENT)
    refused(call(mallory, "schema/delete", subject="users-value"), 404, errno.ENOENT)
    refused(call(mallory, "schema/list", tenant="acme"), 404, errno.ENOENT)
    assert registry_state() == before
