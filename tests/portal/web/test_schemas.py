"""The Schemas page: the current tenant's subjects with versions, latest id, type and
compatibility; a subject's versions with their schema text; another tenant's subjects neither
listed nor reachable."""

from __future__ import annotations

import json

from replication.services.registry import Candidate, registry_config_set, schema_register
from replication.services.registryreads import registry_access
from tests.clients import signed_in
from tests.portal.registry.helpers import USER, USER_V2


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
