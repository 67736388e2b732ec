"""`make run`'s Kafka listener: a thread of `manage.py runembedded` on the embedded default
(SQLite, no Redis), where the demo tenant's plain names work with nothing MapR-specific."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from confluent_kafka import Producer

from tests.broker.embedded import embedded_site
from tests.broker.wire import Wire

pytestmark = pytest.mark.slow


def test_embedded_listener_serves_the_demo_tenants_plain_names_on_sqlite(tmp_path):
    with embedded_site(tmp_path) as site:
        config = site.config
        metadata = Producer(config).list_topics("orders", timeout=30)
        assert metadata.topics["orders"].error is None  # auto-created in the default stream
        listed = Producer(config).list_topics(timeout=30).topics
        assert "orders" in listed and "/mapr/sanfrancisco/activity:clicks" in listed


def test_embedded_listener_closes_a_connection_once_its_token_signs_out(tmp_path):
    """The portal and the listener share a process and SQLite here: the revocation crosses
    from the one to the other all the same."""
    with embedded_site(tmp_path) as site:
        wire = Wire(site.config["bootstrap.servers"], timeout=20)
        assert wire.authenticate("admin", site.token).error_code == 0
        assert wire.call(3, 1, topics=None).brokers
        signed_out = requests.post(f"http://127.0.0.1:{site.web}/api/v1/auth/logout/",
                                   headers={"Authorization": f"Token {site.token}"}, timeout=30)
        assert signed_out.status_code == 204
        start = time.monotonic()
        assert wire.sock.recv(1) == b""
        assert time.monotonic() - start < 5.0


def test_concurrent_writers_on_the_embedded_default_never_find_the_database_locked(tmp_path):
    """SQLite refuses at once ("database is locked", no wait) a transaction that read and then
    wants to write while another connection writes. The control database's transactions take
    the write lock when they begin and WAL lets readers on meanwhile, so requests beside the
    site's own background threads wait their turn instead of failing."""
    with embedded_site(tmp_path) as site:
        url = f"http://127.0.0.1:{site.web}/rest/stream/topic/create"

        def create(worker: int) -> list[str]:
            failed = []
            for i in range(8):
                done = requests.post(url, data={"path": "/mapr/sanfrancisco/activity",
                                                "topic": f"t{worker}-{i}"},
                                     headers={"Authorization": f"Token {site.token}"},
                                     timeout=60)
                if done.json().get("status") != "OK":
                    failed.append(done.text)
            return failed

        with ThreadPoolExecutor(6) as pool:
            failed = [text for texts in pool.map(create, range(6)) for text in texts]
        assert failed == [], failed[:3]
        assert "database is locked" not in (tmp_path / "embedded.log").read_text()
