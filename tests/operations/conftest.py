"""A replica pair across two clusters: alice's /mapr/sanfrancisco/activity (topic clicks, one
partition) replicating to /mapr/newyork/activity."""

from __future__ import annotations

import os
from datetime import timedelta

import pytest
from django.utils import timezone

from replication import services
from replication.models import ReplicaLink, Topic
from tests.channel_events import use_redis_layer
from tests.factories import GatewayFactory


@pytest.fixture
def clicks(owner, activity) -> Topic:
    return services.topic_create(actor=owner, stream=activity, name="clicks", partitions=1)


@pytest.fixture
def link(owner, activity, activity_ny, clicks) -> ReplicaLink:
    """Registered at the source only: waiting for the replica's owner to approve."""
    return services.replica_add(actor=owner, source=activity, replica=activity_ny)


@pytest.fixture
def pair(owner, activity, activity_ny, link) -> ReplicaLink:
    """Agreed both ways: a moving link."""
    services.upstream_add(actor=owner, replica=activity_ny, source=activity)
    return link


@pytest.fixture
def live_gateway(newyork):
    return GatewayFactory(cluster=newyork, name="gw1", last_heartbeat=timezone.now())


def ago(seconds: float):  # type: ignore[no-untyped-def]
    return timezone.now() - timedelta(seconds=seconds)


@pytest.fixture
def private_channel_layer(settings) -> None:
    use_redis_layer(settings, f"sg-test-{os.getpid()}")
