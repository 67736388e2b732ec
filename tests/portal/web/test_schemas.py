"""The Schemas page: the current tenant's subjects with versions, latest id, type and
compatibility; a subject's versions with their schema text; another tenant's subjects neither
listed nor reachable."""

from __future__ import annotations

import json
import re

from accounts.models import Role
from operations.models import AuditEvent, Interface
from replication.models import RegisteredSchema, RegistryConfig, SubjectVersion
from replication.services.registry import (
    Candidate,
    registry_config_set,
    schema_register,
    subject_delete,
    version_delete,
)
from replication.services.registryreads import registry_access
from tests.clients import signed_in
from tests.portal.registry.helpers import USER, USER_REQUIRED_AGE, USER_V2


def register(user, subject: str, text: str, schema_type: str = "AVRO") -> int:  # type: ignore[no-untyped-def]
    return schema_register(access=registry_access(actor=user), subject=subject,
                           candidate=Candidate(schema_type, text, None)).schema_id


def test_lists_subjects_and_shows_versions(owner):
    register(owner, "users-value", USER)
    latest = register(owner, "users-value", USER_V2)
    register(owner, "/mapr/c1/apps:orders-value", json.dumps({"type": "object"}), "JSON")
    registry_config_set(access=registry_access(actor=owner), subject="users-value",
                        field="compatibility", value="FULL")
    client = signed_in(owner)
    page = client.get("/schemas/").content.decode()
    assert "<title>Schemas · streamgate</title>" in page  # the form once, in the page only
    assert page.count('id="default-compatibility-form"') == 1
    assert '<tr data-subject="users-value">' in page
    assert f'<td data-label="Latest id" data-field="id">{latest}</td>' in page
    assert '<td data-label="Versions" data-field="versions">1, 2</td>' in page
    assert "FULL" in page and "/schemas/registry/tenants/acme" in page
    assert 'href="/schemas/subjects//mapr/c1/apps:orders-value/"' in page
    detail = client.get("/schemas/subjects/users-value/").content.decode()
    assert detail.index('data-version="2"') < detail.index('data-version="1"')
    assert "&quot;age&quot;" in detail and "FULL" in detail
    assert client.get("/schemas/subjects//mapr/c1/apps:orders-value/").status_code == 200


def test_outsider_sees_none_of_another_tenants_subjects(owner, outsider):
    register(owner, "users-value", USER)
    client = signed_in(outsider)
    assert "users-value" not in client.get("/schemas/").content.decode()
    assert client.get("/schemas/subjects/users-value/").status_code == 404


# --- the forms: register (checked first), compatibility, delete -------------------------------


def versions_of(subject: str, deleted: bool = False) -> list[int]:
    found = SubjectVersion.objects.filter(subject=subject)
    return sorted(found.values_list("version", flat=True) if deleted else
                  found.filter(deleted=False).values_list("version", flat=True))


def registry_rows() -> list:
    return [list(m.objects.order_by("pk").values()) for m in
            (RegisteredSchema, SubjectVersion, RegistryConfig)]


def test_check_shows_the_result_and_registers_nothing_then_register_says_it_was_checked(owner):
    register(owner, "users-value", USER)
    client = signed_in(owner)
    form = client.get("/schemas/register/?subject=users-value").content.decode()
    assert "New version of <code>users-value</code>" in form and "&quot;User&quot;" in form
    before = registry_rows()
    bad = client.post("/schemas/register/", {"subject": "users-value", "schema_type": "AVRO",
                                             "schema": USER_REQUIRED_AGE, "action": "check"})
    assert bad.status_code == 200 and "Not compatible" in bad.content.decode()
    assert "Against version 1 under <strong>BACKWARD</strong>" in bad.content.decode()
    good = client.post("/schemas/register/", {"subject": "users-value", "schema_type": "AVRO",
                                              "schema": USER_V2, "action": "check"})
    assert "are compatible under <strong>BACKWARD</strong>" in good.content.decode()
    assert registry_rows() == before
    done = client.post("/schemas/register/", {"subject": "users-value", "schema_type": "AVRO",
                                              "schema": USER_V2, "action": "register"},
                       follow=True)
    page = done.content.decode()
    assert done.redirect_chain[-1][0] == "/schemas/subjects/users-value/"
    assert "version 2 of users-value registered with schema id" in page
    assert "compatible (BACKWARD) with version 1" in page
    assert versions_of("users-value") == [1, 2]
    event = AuditEvent.objects.filter(object_type="subjectversion").latest("pk")
    assert (event.interface, event.actor_name) == (Interface.WEB, "alice")


def test_an_incompatible_or_invalid_schema_is_refused_beside_its_field_and_kept(owner):
    register(owner, "users-value", USER)
    client = signed_in(owner)
    before = registry_rows()
    refused = client.post("/schemas/register/", {"subject": "users-value", "schema_type": "AVRO",
                                                 "schema": USER_REQUIRED_AGE,
                                                 "action": "register"})
    page = refused.content.decode()
    assert refused.status_code == 409
    assert 'id="err-schema"' in page and "incompatible with an earlier schema" in page
    assert "&quot;age&quot;" in page  # what was typed is kept
    invalid = client.post("/schemas/register/", {"subject": "x", "schema_type": "AVRO",
                                                 "schema": "{oops", "action": "register"})
    assert invalid.status_code == 400 and 'id="err-schema"' in invalid.content.decode()
    nameless = client.post("/schemas/register/", {"subject": " ", "schema_type": "AVRO",
                                                  "schema": USER, "action": "register"})
    assert 'id="err-subject"' in nameless.content.decode()
    assert "give the subject&#x27;s name, e.g. orders-value" in nameless.content.decode()
    assert registry_rows() == before


def test_a_new_subject_registers_a_protobuf_schema(owner):
    client = signed_in(owner)
    proto = 'syntax = "proto3";\npackage acme;\nmessage Order { string id = 1; }\n'
    checked = client.post("/schemas/register/", {"subject": "orders-value",
                                                 "schema_type": "PROTOBUF", "schema": proto,
                                                 "action": "check"}).content.decode()
    assert "A new subject" in checked
    client.post("/schemas/register/", {"subject": "orders-value", "schema_type": "PROTOBUF",
                                       "schema": proto, "action": "register"})
    assert versions_of("orders-value") == [1]


def test_compatibility_set_and_cleared_for_a_subject_and_the_default(owner):
    register(owner, "users-value", USER)
    client = signed_in(owner)
    done = client.post("/schemas/compatibility/", {"subject": "users-value",
                                                   "compatibility": "NONE"}, follow=True)
    assert "users-value&#x27;s compatibility is now NONE" in done.content.decode()
    client.post("/schemas/compatibility/", {"compatibility": "FULL"})
    cleared = client.post("/schemas/compatibility/", {"subject": "users-value",
                                                      "compatibility": ""}, follow=True)
    assert "compatibility is now FULL (the registry&#x27;s default)" in cleared.content.decode()
    assert list(RegistryConfig.objects.values_list("subject", "compatibility")) == [("", "FULL")]
    bad = client.post("/schemas/compatibility/", {"compatibility": "LOOSE"}, follow=True)
    assert "compatibility not changed: &#x27;LOOSE&#x27; is not a compatibility" in \
        bad.content.decode()
    assert list(RegistryConfig.objects.values_list("subject", "compatibility")) == [("", "FULL")]


def test_delete_a_version_then_the_subject_for_good_after_typing_its_name(owner):
    register(owner, "users-value", USER)
    register(owner, "users-value", USER_V2)
    client = signed_in(owner)
    ask = client.get("/schemas/delete/?subject=users-value&version=2").content.decode()
    assert "Delete version 2 of <code>users-value</code>?" in ask
    before = registry_rows()
    wrong = client.post("/schemas/delete/", {"subject": "users-value", "version": "2",
                                             "confirm": "users"})
    assert wrong.status_code == 400
    assert "type the subject&#x27;s name, users-value, to delete" in wrong.content.decode()
    assert registry_rows() == before
    client.post("/schemas/delete/", {"subject": "users-value", "version": "2",
                                     "confirm": "users-value"})
    assert (versions_of("users-value"), versions_of("users-value", deleted=True)) == ([1], [1, 2])
    done = client.post("/schemas/delete/", {"subject": "users-value", "confirm": "users-value",
                                            "permanent": "true"}, follow=True)
    assert done.redirect_chain[-1][0] == "/schemas/"
    assert "subject users-value deleted for good" in done.content.decode()
    assert not SubjectVersion.objects.exists()


def test_a_viewer_gets_no_forms_and_is_refused_and_an_outsider_finds_nothing(
        owner, member, outsider):
    register(owner, "users-value", USER)
    membership = member.memberships.get()
    membership.role = Role.VIEWER
    membership.save()
    viewer = signed_in(member)
    assert "Register a schema" not in viewer.get("/schemas/").content.decode()
    assert "Delete the subject" not in viewer.get("/schemas/subjects/users-value/").content.decode()
    before = registry_rows()
    refused = viewer.post("/schemas/register/", {"subject": "users-value", "schema_type": "AVRO",
                                                 "schema": USER_V2, "action": "register"})
    assert "needs the role admin or member in tenant acme; yours is viewer" in \
        refused.content.decode()
    viewer.post("/schemas/delete/", {"subject": "users-value", "confirm": "users-value"})
    viewer.post("/schemas/compatibility/", {"compatibility": "NONE"})
    mallory = signed_in(outsider)
    assert mallory.get("/schemas/delete/?subject=users-value").status_code == 404
    assert mallory.post("/schemas/delete/", {"subject": "users-value",
                                             "confirm": "users-value"}).status_code == 404
    assert mallory.post("/schemas/compatibility/", {"subject": "users-value",
                                                    "compatibility": "NONE"}).status_code == 404
    assert registry_rows() == before


def test_soft_deleted_versions_and_subjects_show_when_asked_and_delete_for_good(owner):
    """Soft-deleted versions leave the page until ?deleted=true (the registry API's word)
    shows them, marked, with a link to delete them for good; a subject soft-deleted whole
    is listed then too."""
    register(owner, "users-value", USER)
    register(owner, "users-value", USER_V2)
    register(owner, "gone-value", USER)
    access = registry_access(actor=owner)
    version_delete(access=access, subject="users-value", version="1", permanent=False)
    subject_delete(access=access, subject="gone-value", permanent=False)
    client = signed_in(owner)
    page = client.get("/schemas/").content.decode()
    assert 'data-subject="gone-value"' not in page and 'id="show-deleted"' in page
    assert '<td data-label="Versions" data-field="versions">2</td>' in page
    shown = client.get("/schemas/?deleted=true").content.decode()
    assert 'data-subject="gone-value"' in shown and 'id="hide-deleted"' in shown
    assert re.search(r'data-field="versions">2; <span class="muted" data-field="deleted">'
                     r'soft-deleted: 1</span>', shown)
    assert 'href="/schemas/subjects/users-value/?deleted=true"' in shown
    hidden = client.get("/schemas/subjects/users-value/").content.decode()
    assert 'data-version="1"' not in hidden
    detail = client.get("/schemas/subjects/users-value/?deleted=true").content.decode()
    assert 'data-version="1" data-deleted="true"' in detail
    assert "Delete version 1 for good" in detail and "&amp;version=1&amp;permanent=true" in detail
    assert client.get("/schemas/subjects/gone-value/").status_code == 404
    assert client.get("/schemas/subjects/gone-value/?deleted=true").status_code == 200
    confirm = client.get("/schemas/delete/?subject=users-value&version=1&permanent=true")
    assert 'name="permanent" value="true" checked' in confirm.content.decode()
