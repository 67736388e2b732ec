"""End to end in Debian's chromium: from the navigation to the Schemas page, a subject's row,
its versions page with the schema text, and no accessibility violation on either."""

import json

import pytest
from playwright.sync_api import expect

from replication.services.registry import Candidate, schema_register
from replication.services.registryreads import registry_access
from tests.e2e.a11y import assert_accessible
from tests.e2e.conftest import off_loop
from tests.e2e.test_portal import sign_in
from tests.portal.registry.helpers import USER, USER_V2

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _register(user, subject: str, text: str) -> int:  # type: ignore[no-untyped-def]
    return schema_register(access=registry_access(actor=user), subject=subject,
                           candidate=Candidate("AVRO", text, None)).schema_id


def test_schemas_page_lists_subjects_and_shows_a_subjects_versions(portal_url, page, owner):
    off_loop(_register, owner, "users-value", USER)
    latest = off_loop(_register, owner, "users-value", USER_V2)
    sign_in(page, portal_url, "alice")
    page.get_by_role("link", name="Schemas").click()
    row = page.locator("#schema-subjects tr[data-subject='users-value']")
    expect(row.locator("[data-field=versions]")).to_have_text("1, 2")
    expect(row.locator("[data-field=id]")).to_have_text(str(latest))
    expect(page.locator("#registry-url")).to_contain_text("/schemas/registry/tenants/acme")
    assert_accessible(page)
    row.get_by_role("link", name="users-value").click()
    newest = page.locator("section[data-version='2']")
    expect(newest.locator("[data-field=id]")).to_have_text(str(latest))
    expect(newest.locator("pre")).to_contain_text('"name": "age"')
    assert json.loads(newest.locator("pre").inner_text())["name"] == "User"
    assert_accessible(page)
