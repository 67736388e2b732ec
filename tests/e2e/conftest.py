"""Browser tests: Debian's chromium driven by Playwright against a live ASGI server (HTTP and
websockets) on the test database. Playwright never downloads a browser here."""

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from channels.routing import ProtocolTypeRouter
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.asgi import get_asgi_application

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict) -> dict:
    assert CHROMIUM.exists(), "install Debian's chromium: make install-test does it"
    return {**browser_type_launch_args, "executable_path": str(CHROMIUM), "args": CHROMIUM_ARGS}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Playwright's session keeps an event loop marked running in the test thread until the
    # session ends, which async_to_sync and Django's async-safety checks elsewhere would trip
    # on: the browser tests run last.
    items.sort(key=lambda item: "tests/e2e/" in item.nodeid)


@pytest.fixture(scope="session", autouse=True)
def _orm_beside_playwright() -> Iterator[None]:
    # Because of that running loop, Django refuses the ORM calls of fixtures and database
    # teardown in the test thread; the server's threads are unaffected. Session scope: the
    # loop outlives every function-scoped teardown.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    yield
    if previous is None:
        del os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"]
    else:
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture(autouse=True)
def _e2e_settings(settings) -> None:  # type: ignore[no-untyped-def]
    # The real Redis layer under this run's own prefix: test runs share one Redis.
    settings.CHANNEL_LAYERS = {"default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {"hosts": [settings.REDIS_URL], "prefix": f"sg-e2e-{os.getpid()}"},
    }}


@pytest.fixture
def portal_url(transactional_db, _e2e_settings) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """The portal under uvicorn in a thread of this process, so it sees the test database.
    pytest-django's live_server is WSGI only; the pages need the websocket too."""
    from portal.asgi import application

    app = ProtocolTypeRouter({
        "http": ASGIStaticFilesHandler(get_asgi_application()),  # static files via finders
        "websocket": application.application_mapping["websocket"],  # the real auth stack
    })
    config = uvicorn.Config(app, host="127.0.0.1", port=0, lifespan="off", log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)
