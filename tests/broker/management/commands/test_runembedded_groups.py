"""A consumer group on the embedded default (`manage.py runembedded`: SQLite stores, no Redis,
the listener a thread beside the portal): its commits are the stream's cursors and its
membership shows in `stream assign list`, both through the portal's /rest."""

from __future__ import annotations

import time

import pytest
import requests
from confluent_kafka import Consumer, Producer

from tests.broker.embedded import embedded_site

pytestmark = pytest.mark.slow
STREAM = "/mapr/sanfrancisco/kafka"  # the demo tenant's default stream (replication/demo.py)


def rest(port: int, token: str, command: str, **params: str) -> list[dict]:
    response = requests.get(f"http://127.0.0.1:{port}/rest/{command}", params=params,
                            headers={"Authorization": f"Token {token}"}, timeout=30)
    body = response.json()
    assert body["status"] == "OK", body
    return body["data"]


def test_embedded_group_commits_and_membership_show_in_the_portal(tmp_path):
    with embedded_site(tmp_path) as site:
        config, web, token = site.config, site.web, site.token
        producer = Producer(config)
        for index in range(20):
            producer.produce("orders", f"v{index}".encode())
        assert producer.flush(30) == 0
        consumer = Consumer({**config, "group.id": "shipping", "auto.offset.reset": "earliest",
                             "enable.auto.commit": False})
        consumer.subscribe(["orders"])
        seen, deadline = [], time.monotonic() + 60
        while len(seen) < 20:
            assert time.monotonic() < deadline, seen
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                seen.append(message.value())
                consumer.commit(message=message, asynchronous=False)
        cursors = rest(web, token, "stream/cursor/list", path=STREAM, consumergroup="shipping")
        assert sum(c["committedoffset"] for c in cursors) == 20
        assert {c["topic"] for c in cursors} == {"orders"}
        deadline = time.monotonic() + 30
        while not (rows := rest(web, token, "stream/assign/list", path=STREAM)):
            assert time.monotonic() < deadline, "group state never reached the portal"
            time.sleep(0.3)
        assert {r["consumergroup"] for r in rows} == {"shipping"}
        assert {r["topic"] for r in rows} == {"orders"}
        consumer.close()
