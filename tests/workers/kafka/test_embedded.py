"""`make run`'s Kafka listener: a thread of `manage.py runembedded` on the embedded default
(SQLite, no Redis), where the demo tenant's plain names work with nothing MapR-specific."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from tests.workers.kafka.embedded import embedded_site

pytestmark = pytest.mark.slow


def test_embedded_listener_serves_the_demo_tenants_plain_names_on_sqlite(tmp_path):
    with embedded_site(tmp_path) as site:
        config = site.config
        metadata = Producer(config).list_topics("orders", timeout=30)
        assert metadata.topics["orders"].error is None  # auto-created in the default stream
        listed = Producer(config).list_topics(timeout=30).topics
        assert "orders" in listed and "/mapr/sanfrancisco/activity:clicks" in listed
