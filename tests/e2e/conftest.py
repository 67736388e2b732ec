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

from tests.channel_events import use_redis_layer

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
    use_redis_layer(settings, f"sg-e2e-{os.getpid()}")


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


# --- the replication engine beside the portal ---------------------------------------------------

from tests.workers.conftest import engine  # noqa: E402,F401  (a fixture, used by name)


def sign_up(page, tenant: str, user: str, password: str) -> None:  # type: ignore[no-untyped-def]
    """Fill the sign-up form open on `page` (user@tenant.example) and see the new user signed
    in."""
    from playwright.sync_api import expect

    page.get_by_label("Tenant name").fill(tenant)
    page.get_by_label("Your user name").fill(user)
    page.get_by_label("Email").fill(f"{user}@{tenant}.example")
    page.get_by_label("Password", exact=True).fill(password)
    page.get_by_label("Password again").fill(password)
    page.get_by_role("button", name="Create the tenant").click()
    expect(page.locator("#who")).to_have_text(user)


def off_loop(call, *args, **kwargs):  # type: ignore[no-untyped-def]
    """Run a service in a thread of its own: in the test thread Playwright's loop runs, so a
    service publishing its events after commit could not (async_to_sync refuses there)."""
    from django.db import connection

    box: dict = {}

    def run() -> None:
        try:
            box["value"] = call(*args, **kwargs)
        except BaseException as error:  # re-raised in the test thread
            box["error"] = error
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=60)
    if "error" in box:
        raise box["error"]
    return box.get("value")


class Recorder:
    """The lag recorder's beat entry, on a fast clock in a thread of the test process (the
    embedded scheduler runs the same function every 5 s)."""

    def __init__(self, every: float = 0.5) -> None:
        self.every = every
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True, name="lag-recorder")

    def _loop(self) -> None:
        from django.db import connection

        from workers.tasks import record_lag_task

        try:
            while not self.stop.wait(self.every):
                record_lag_task.apply()
        finally:
            connection.close()


@pytest.fixture
def live_engine(engine, settings):  # type: ignore[no-untyped-def]  # noqa: F811
    """The replicator and a gateway of newyork as processes, the page's channel layer the one
    they publish to, and the lag recorder sampling every half second."""
    use_redis_layer(settings, f"{engine.namespace}asgi")
    settings.CACHES = {"default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": settings.REDIS_URL, "KEY_PREFIX": f"{engine.namespace}cache"}}
    recorder = Recorder()
    recorder.thread.start()
    yield engine
    recorder.stop.set()
    recorder.thread.join(timeout=10)


@pytest.fixture(scope="session", autouse=True)
def _close_server_connections(django_db_setup, django_db_blocker) -> Iterator[None]:
    """The server's and helpers' threads keep database connections of their own, which would
    stop pytest-django from dropping the test database at the end: end them first (only this
    run's: the database name carries the run's pid)."""
    yield
    import psycopg
    from django.db import connection

    params = connection.settings_dict
    admin = f"postgresql://{params['USER']}@{params['HOST'] or '127.0.0.1'}/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                     "WHERE datname = %s AND pid <> pg_backend_pid()", [params["NAME"]])
