"""End to end in Debian's chromium: from the navigation to the Schemas page, a subject's row,
its versions page with the schema text, and no accessibility violation on either; values that
confluent-kafka's serializers wrote (their schemas registered by its SchemaRegistryClient over
HTTP) shown decoded in the message browser."""

import json

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from playwright.sync_api import Page, expect

from accounts.tokens import issue_token
from replication.engine.store import Record
from replication.services import topic_create
from replication.services.messages import messages_produce
from replication.services.registry import Candidate, schema_register
from replication.services.registryreads import registry_access
from tests.e2e.a11y import assert_accessible
from tests.e2e.conftest import off_loop
from tests.e2e.test_portal import sign_in
from tests.portal.registry.helpers import USER, USER_REQUIRED_AGE, USER_V2, order_class

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


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_schemas_written_from_the_browser(portal_url, browser, scheme, owner):
    """Register a version (checked first: refused, then compatible), set the subject's level,
    delete a version after typing the subject's name; axe on every page, at 390 px."""
    off_loop(_register, owner, "users-value", USER)
    page = browser.new_context(color_scheme=scheme, viewport={"width": 390, "height": 844}
                               ).new_page()
    sign_in(page, portal_url, "alice")
    page.goto(f"{portal_url}/schemas/subjects/users-value/")
    page.get_by_role("link", name="Register a new version").click()
    schema = page.locator("#register-schema textarea[name=schema]")
    expect(schema).to_contain_text('"User"')  # starts from the latest version
    schema.fill(USER_REQUIRED_AGE)
    page.get_by_role("button", name="Check compatibility").click()
    expect(page.locator("#compatibility-result h2")).to_have_text("Not compatible")
    expect(page.locator("#compatibility-problems")).to_contain_text("age")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    assert_accessible(page)
    page.locator("#register-schema textarea[name=schema]").fill(USER_V2)
    page.get_by_role("button", name="Check compatibility").click()
    expect(page.locator("#compatibility-result h2")).to_have_text("Compatible")
    page.get_by_role("button", name="Register").click()
    expect(page.locator(".messages")).to_contain_text(
        "version 2 of users-value registered with schema id")
    expect(page.locator("section[data-version='2']")).to_be_visible()
    assert_accessible(page)
    page.select_option("#subject-compatibility-form select", "FULL")
    page.click("#subject-compatibility-form button[type=submit]")
    expect(page.locator("#subject-compatibility")).to_have_text("FULL")
    page.locator("section[data-version='2']").get_by_role("link",
                                                          name="Delete version 2").click()
    assert_accessible(page)
    page.fill("#delete-schema input[name=confirm]", "users")
    page.click("#delete-schema button[type=submit]")
    expect(page.locator("#err-confirm")).to_contain_text("type the subject's name")
    assert_accessible(page)
    page.fill("#delete-schema input[name=confirm]", "users-value")
    page.click("#delete-schema button[type=submit]")
    expect(page.locator(".messages")).to_contain_text("version 2 of users-value deleted")
    expect(page.locator("section[data-version]")).to_have_count(1)


PERSON = json.dumps({"$schema": "http://json-schema.org/draft-07/schema#", "title": "Person",
                     "type": "object", "properties": {"name": {"type": "string"}}})


def test_the_message_browser_shows_values_decoded_by_their_schema(portal_url, page: Page,
                                                                  owner, activity):
    """Avro, JSON Schema and Protobuf: each registered by its serializer, as a producer's
    first message registers it, then its fields on the page (not the framed bytes)."""
    secret = off_loop(issue_token, owner, name="producer", scope="produce")[1]
    registry = SchemaRegistryClient({"url": f"{portal_url}/schemas/registry",
                                     "basic.auth.user.info": f"alice:{secret}"})
    order = order_class()
    serializers = {
        "users": lambda: AvroSerializer(registry, USER_V2)({"name": "Ann Avro", "age": 31},
                                                           _value_of("users")),
        "people": lambda: JSONSerializer(PERSON, registry)({"name": "Jo Json"},
                                                           _value_of("people")),
        "orders": lambda: ProtobufSerializer(order, registry, {"use.deprecated.format": False}
                                             )(order(id="o-7", qty=3), _value_of("orders"))}
    for topic, serialize in serializers.items():
        off_loop(topic_create, actor=owner, stream=activity, name=topic, partitions=1)
        off_loop(messages_produce, actor=owner, stream=activity, topic=topic,
                 records=[Record(serialize(), key=b"k")])
    ids = {topic: registry.get_latest_version(f"{topic}-value").schema_id
           for topic in serializers}
    sign_in(page, portal_url, "alice")
    page.goto(f"{portal_url}/streams/{activity.pk}/messages/?topic=users")
    value = page.locator('#messages tr[data-offset="0:0"] td.value')
    expect(value.locator("pre")).to_contain_text('"name": "Ann Avro"')
    expect(value.locator("pre")).to_contain_text('"age": 31')
    expect(value.locator("small")).to_have_text(f"avro, schema id {ids['users']}")
    assert_accessible(page)
    # Protobuf's JSON mapping writes an int64 as a string.
    shown = {"people": '"name": "Jo Json"', "orders": '"qty": "3"'}
    for topic, kind in (("people", "json"), ("orders", "protobuf")):
        page.goto(f"{portal_url}/streams/{activity.pk}/messages/{topic}/0/0/")
        value = page.locator("#message dd.value")
        expect(value.locator("pre")).to_contain_text(shown[topic])
        expect(value.locator("small")).to_have_text(f"{kind}, schema id {ids[topic]}")


def _value_of(topic: str) -> SerializationContext:
    return SerializationContext(topic, MessageField.VALUE)
