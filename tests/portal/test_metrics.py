import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from replication.engine.store import Record
from replication.services import replica_add, topic_create, upstream_add
from replication.services.messages import messages_produce
from tests.factories import GatewayFactory


def samples(text: str) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


@pytest.fixture
def scene(owner, activity, activity_ny):
    replica_add(actor=owner, source=activity, replica=activity_ny)
    upstream_add(actor=owner, replica=activity_ny, source=activity)
    topic_create(actor=owner, stream=activity, name="clicks", partitions=2)
    messages_produce(actor=owner, stream=activity, topic="clicks",
                     records=[Record(value=b"x" * 10)] * 6)
    GatewayFactory(cluster=activity_ny.cluster, name="gw1", last_heartbeat=timezone.now(),
                   batches_applied=3, messages_applied=30)


@pytest.mark.django_db(transaction=True)
def test_metrics_show_lag_gateways_and_produced_counters(client, operator, scene):
    client.force_login(operator)
    response = client.get("/metrics")
    assert response.status_code == 200
    got = samples(response.content.decode())
    link = (("replica", "/mapr/newyork/activity"), ("source", "/mapr/sanfrancisco/activity"))
    assert got[("streamgate_replica_lag_messages", link)] == 6  # no engine runs in this test
    assert got[("streamgate_replica_lag_bytes", link)] == 60
    assert got[("streamgate_replica_lag_seconds", link)] >= 0
    assert got[("streamgate_replica_stalled", link)] == 0
    gateway = (("cluster", "newyork"), ("gateway", "gw1"))
    assert got[("streamgate_gateway_batches_total", gateway)] == 3
    assert got[("streamgate_gateway_up", gateway)] == 1
    clicks = (("stream", "/mapr/sanfrancisco/activity"), ("topic", "clicks"))
    assert got[("streamgate_messages_produced_total", clicks)] == 6


@pytest.mark.django_db
def test_metrics_are_for_operators_only(client, owner, outsider):
    assert client.get("/metrics").status_code in (401, 403)
    client.force_login(owner)
    assert client.get("/metrics").status_code == 403
