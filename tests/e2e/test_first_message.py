"""A newcomer's whole first path, end to end in Debian's chromium: sign up a tenant, create a
stream in the browser, make a produce token there, send a message with an ordinary Kafka
client (confluent-kafka over SASL/PLAIN with that token) through a real listener, and read it
back in the message browser (issue 34: "a full sign-up to first Kafka message")."""

import pytest
from confluent_kafka import Producer
from playwright.sync_api import Browser, expect

from replication.models import Stream
from tests.broker.conftest import kafka_listeners  # noqa: F401  (a fixture, used by name)
from tests.e2e.a11y import assert_accessible
from tests.e2e.conftest import off_loop, sign_up

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_sign_up_create_a_stream_and_a_token_then_the_first_kafka_message_shows(
        portal_url, browser: Browser, settings, sanfrancisco, kafka_listeners):  # noqa: F811
    settings.SIGNUP = "open"
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                                   "LOCATION": "e2e-first-message"}}
    page = browser.new_context().new_page()
    page.goto(f"{portal_url}/signup/")
    sign_up(page, "hooli", "gavin", "middle out forever")

    page.goto(f"{portal_url}/streams/")
    page.fill("#create-stream input[name=path]", "/mapr/sanfrancisco/first")
    page.click("#create-stream button[type=submit]")
    expect(page.get_by_role("heading", level=1,
                             name="/mapr/sanfrancisco/first")).to_be_visible()

    page.goto(f"{portal_url}/account/tokens/")
    page.fill("#make-token input[name=name]", "my first producer")
    page.select_option("#make-token select[name=scope]", "produce")
    page.click("#make-token button[type=submit]")
    token = page.locator("#token-secret").input_value()
    assert_accessible(page)

    delivered: list = []
    producer = Producer({"bootstrap.servers": kafka_listeners.start("k1"),
                         "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                         "sasl.username": "gavin", "sasl.password": token, "linger.ms": 0})
    producer.produce("/mapr/sanfrancisco/first:greetings", b"hello from kafka",
                     on_delivery=lambda error, message: delivered.append(error))
    assert producer.flush(30) == 0 and delivered == [None]

    stream = off_loop(Stream.objects.get, path="/mapr/sanfrancisco/first")
    page.goto(f"{portal_url}/streams/{stream.pk}/messages/?topic=greetings")
    expect(page.locator("main")).to_contain_text("hello from kafka")
    assert_accessible(page)
