"""Cross-site request forgery against /rest in Debian's chromium (issue 27, item 1): alice is
signed in to the portal; a page served from another origin sends her browser to a /rest
command that changes her stream, by `location=` (a GET, which her SameSite=Lax cookie goes
with) or by a form it submits (a POST). Her stream is unchanged afterwards.

The other origin is either another site (127.0.0.2: the browser keeps a Lax cookie home on a
cross-site POST) or the same site on another port (127.0.0.1: the cookie goes along, so the
CSRF token is what refuses the POST)."""

from __future__ import annotations

import html
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlencode

import pytest
from playwright.sync_api import Page

from replication import services
from replication.models import Stream
from tests.e2e.conftest import off_loop
from tests.e2e.test_portal import sign_in

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
SF = "/mapr/sanfrancisco/activity"
# The attacks: alice's ttl and both ACEs, then a topic created and one deleted.
ATTACKS = [
    ("stream/edit", {"path": SF, "ttl": "222", "produceperm": "p", "consumeperm": "p"}),
    ("stream/topic/create", {"path": SF, "topic": "views"}),
    ("stream/topic/delete", {"path": SF, "topic": "clicks"}),
]
OTHER_SITE, SAME_SITE = "127.0.0.2", "127.0.0.1"


class OtherOrigin:
    """A web server on another origin than the portal's, serving one attacker page."""

    def __init__(self, host: str) -> None:
        self.page = b""
        origin = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.end_headers()
                self.wfile.write(origin.page)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.url = f"http://{host}:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def serve(self, body: str) -> str:
        self.page = f"<!doctype html><title>cute cats</title>{body}".encode()
        return self.url


@pytest.fixture(params=[OTHER_SITE, SAME_SITE], ids=["other-site", "same-site-other-port"])
def other_origin(request: pytest.FixtureRequest) -> Iterator[OtherOrigin]:
    origin = OtherOrigin(request.param)
    origin.thread.start()
    yield origin
    origin.server.shutdown()
    origin.server.server_close()


@pytest.fixture
def alice(portal_url: str, page: Page, owner, activity) -> Callable[[], Any]:  # type: ignore[no-untyped-def]
    """alice signed in on the portal, her stream with topic clicks; what an attack could
    change of it, to compare before and after."""
    off_loop(services.topic_create, actor=owner, stream=activity, name="clicks", partitions=1)
    sign_in(page, portal_url, "alice")

    def stream_state() -> tuple:
        stream = Stream.objects.get(path=SF)
        return (stream.ttl, stream.produceperm, stream.consumeperm,
                sorted(stream.topics.values_list("name", flat=True)))

    return stream_state


def attack(page: Page, attacker_page: str) -> Any:
    """Open the attacker's page; the /rest response the browser got from it."""
    with page.expect_response(lambda response: "/rest/" in response.url) as answer:
        page.goto(attacker_page)
    return answer.value


@pytest.mark.parametrize(("command", "params"), ATTACKS, ids=[a[0] for a in ATTACKS])
def test_a_page_on_another_origin_sending_the_browser_to_a_rest_change_changes_nothing(
    portal_url, page: Page, alice, other_origin: OtherOrigin, command, params
):
    before = alice()
    target = f"{portal_url}/rest/{command}?{urlencode(params)}"
    response = attack(page, other_origin.serve(f"<script>location = {json.dumps(target)};"
                                               "</script>"))
    # 405, not 401: alice's session cookie went with the navigation, and GET was refused.
    assert response.status == 405, response.text()
    assert "takes POST, not GET" in response.json()["errors"][0]["desc"]
    assert alice() == before


@pytest.mark.parametrize(("command", "params"), ATTACKS, ids=[a[0] for a in ATTACKS])
def test_a_form_on_another_origin_posting_a_rest_change_changes_nothing(
    portal_url, page: Page, alice, other_origin: OtherOrigin, command, params
):
    before = alice()
    fields = "".join(f'<input type="hidden" name="{html.escape(name)}" '
                     f'value="{html.escape(value)}">' for name, value in params.items())
    response = attack(page, other_origin.serve(
        f'<form method="post" action="{portal_url}/rest/{command}">{fields}</form>'
        "<script>document.forms[0].submit();</script>"))
    if other_origin.url.startswith(f"http://{OTHER_SITE}:"):
        assert response.status == 401, response.text()  # the Lax cookie stayed home
    else:
        assert response.status == 403, response.text()  # it went, without the CSRF token
        assert "X-CSRFToken header" in response.json()["errors"][0]["desc"]
    assert alice() == before
