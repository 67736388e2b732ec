import uuid

import pytest

from replication.models import Cluster
from replication.services import cluster_create, replica_add, upstream_add
from replication.transport import transport
from tests.factories import GatewayFactory, StreamFactory


@pytest.fixture
def clusters(operator):
    return [cluster_create(actor=operator, name=name) for name in ("sf", "ny")]


@pytest.fixture
def moving_link(owner, clusters):
    """sf/a -> ny/a, agreed and not paused: ny needs a live gateway."""
    source = StreamFactory(cluster=clusters[0], name="a", created_by=owner)
    replica = StreamFactory(cluster=clusters[1], name="a", created_by=owner)
    replica_add(actor=owner, source=source, replica=replica)
    upstream_add(actor=owner, replica=replica, source=source)
    return replica


def test_healthz_answers_without_login(client, db):
    response = client.get("/healthz")
    assert (response.status_code, response.json()) == (200, {"status": "ok"})


def test_readyz_is_ready_with_database_stores_and_redis(client, clusters):
    response = client.get("/readyz")
    assert response.status_code == 200, response.json()
    assert {name for name, check in response.json()["checks"].items() if check["ok"]} == {
        "database", "stores", "redis", "gateways"}


def test_readyz_needs_a_live_gateway_where_replicas_move(client, moving_link):
    gateway = GatewayFactory(cluster=moving_link.cluster, name=f"gw-{uuid.uuid4().hex[:8]}")
    response = client.get("/readyz")
    assert response.status_code == 503
    assert "no live gateway on cluster ny" in response.json()["checks"]["gateways"]["detail"]
    signals = transport().gateways
    signals.beat(("ny", gateway.name), 30)
    try:
        assert client.get("/readyz").status_code == 200
    finally:
        signals.forget(("ny", gateway.name))


def test_readyz_names_an_unreachable_cluster_store(client, clusters):
    Cluster.objects.create(name="lost", store_url="postgresql://postgres@127.0.0.1:1/nowhere")
    response = client.get("/readyz")
    assert response.status_code == 503
    assert "lost" in response.json()["checks"]["stores"]["detail"]


def test_readyz_reports_redis_down(client, clusters, settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["redis"]["ok"] is False
