"""Replicators made visible: `replicator list` over /rest and the CLI (maprcli's envelope and
table), the overview page's card and /metrics, all from the registry (replication/transport/
leases.py)."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator

import pytest
import redis
from django.conf import settings as django_settings
from rest_framework.test import APIClient

from replication.transport import transport
from replication.transport.liveness import LocalLiveness
from tests.portal.test_metrics import samples
from tests.streamgate.test_cli import streamgate, token_for
from workers.replication.loop import Replicator

pytestmark = pytest.mark.django_db(transaction=True)
COLUMNS = ["replicator", "host", "pid", "alive", "linksHeld", "lastHeartbeat", "heartbeatAge"]


@pytest.fixture
def replicators(settings) -> Iterator[None]:
    """Presence of the test's own: "r-live" beating with 5 links, "r-dead" stopped beating."""
    namespace = f"sgt-{uuid.uuid4().hex[:10]}:"
    settings.STREAMGATE_NAMESPACE = namespace
    transport().leases.replicator_beat("r-dead", 0.001, 3)
    transport().leases.replicator_beat("r-live", 30.0, 5)
    yield
    client = redis.Redis.from_url(django_settings.REDIS_URL)
    keys = list(client.scan_iter(f"{namespace}*"))
    if keys:
        client.delete(*keys)


def test_replicator_list_shows_alive_links_held_and_last_heartbeat(replicators, operator):
    client = APIClient()
    client.force_authenticate(operator)
    body = client.get("/rest/replicator/list").json()
    assert body["status"] == "OK" and body["total"] == 2, body
    live, dead = body["data"]
    assert list(live) == COLUMNS
    assert (live["replicator"], live["alive"], live["linksHeld"]) == ("r-live", True, 5)
    assert (dead["replicator"], dead["alive"], dead["linksHeld"]) == ("r-dead", False, 0)
    assert 0 <= live["heartbeatAge"] < 30 and live["lastHeartbeat"] > 1_700_000_000_000
    assert live["pid"] > 0 and live["host"]


def test_replicator_list_needs_a_signed_in_user(replicators):
    response = APIClient().get("/rest/replicator/list")
    assert response.status_code == 401
    assert response.json()["status"] == "ERROR"


@pytest.mark.parametrize("user", ["owner", "outsider"])
def test_a_tenant_user_sees_the_replicators_health_and_no_tenants_volumes(replicators, user,
                                                                         request):
    """Replicators belong to no tenant: any tenant's user sees the same rows, which name no
    stream, link or tenant, and not how many links each holds (every tenant's)."""
    client = APIClient()
    client.force_authenticate(request.getfixturevalue(user))
    rows = client.get("/rest/replicator/list").json()["data"]
    assert [(r["replicator"], r["alive"]) for r in rows] == [("r-live", True), ("r-dead", False)]
    assert all(set(r) == set(COLUMNS) - {"linksHeld"} for r in rows)


def test_the_cli_prints_the_replicators_as_a_table_and_as_json(replicators, live_server,
                                                               operator):
    token = token_for(operator)
    table = streamgate(live_server.url, token, "replicator list")
    assert table.returncode == 0, table.stderr
    header, first, second = table.stdout.splitlines()
    assert header.split() == COLUMNS
    assert first.split()[0] == "r-live" and first.split()[3:5] == ["true", "5"]
    assert second.split()[0] == "r-dead" and second.split()[3:5] == ["false", "0"]
    raw = streamgate(live_server.url, token, "replicator list -json")
    envelope = json.loads(raw.stdout)
    assert envelope["status"] == "OK" and envelope["data"][0]["linksHeld"] == 5


@pytest.mark.parametrize("user", ["owner", "operator"])
def test_the_overview_page_has_a_replicators_card(replicators, client, user, request):
    client.force_login(request.getfixturevalue(user))
    page = client.get("/").content.decode()
    card = page[page.index('id="replicators"'):]
    card = card[:card.index("</section>")]
    assert "1 live" in card and card.count("<tr") == 3  # header, live, dead
    assert "UP" in card and "DOWN" in card
    assert ("Links held" in card) == (user == "operator")  # every tenant's links: ops only


def test_the_overview_says_when_no_replicator_runs(settings, client, owner):
    settings.STREAMGATE_NAMESPACE = f"sgt-{uuid.uuid4().hex[:10]}:"
    client.force_login(owner)
    page = client.get("/").content.decode()
    assert "No replicator is running" in page


def test_metrics_show_each_replicator_and_how_many_live(replicators, client, operator):
    client.force_login(operator)
    got = samples(client.get("/metrics").content.decode())
    assert got[("streamgate_replicators_live", ())] == 1
    live = {labels: value for (name, labels), value in got.items()
            if name == "streamgate_replicator_links"}
    assert sorted((dict(k)["replicator"], v) for k, v in live.items()) == [
        ("r-dead", 0), ("r-live", 5)]
    up = {dict(k)["replicator"]: v for (name, k), v in got.items()
          if name == "streamgate_replicator_up"}
    assert up == {"r-live": 1, "r-dead": 0}


def test_embedded_mode_lists_the_replicator_thread_from_process_memory(settings, client, owner):
    """`make run`: no Redis; the replicator thread beats into the in-process presence, which
    the overview of the same process reads."""
    settings.REDIS_URL = ""
    signals = transport()
    assert isinstance(signals.gateways, LocalLiveness)
    replicator = Replicator(signals)
    replicator.step()
    try:
        client.force_login(owner)
        page = client.get("/").content.decode()
        card = page[page.index('id="replicators"'):]
        assert "1 live" in card and f":{os.getpid()}</code>" in card
    finally:
        replicator.leases.close()
    assert replicator.inbox not in {s.id for s in signals.leases.replicators()}
