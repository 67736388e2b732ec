import uuid

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from replication.engine.store import Record
from replication.services import replica_add, topic_create, upstream_add
from replication.services.messages import messages_produce
from replication.stores import store_for
from tests.factories import GatewayFactory


def logical_bytes(stream, topic: str = "clicks") -> int:  # type: ignore[no-untyped-def]
    """The store's logical bytes of a topic: key+value+headers on a row store, the records
    section uncompressed on a batch store."""
    return sum(p.bytes for p in store_for(stream.cluster).partition_stats(stream.uuid, topic))


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
                   batches_applied=3, messages_applied=30, bytes_applied=300)


@pytest.mark.django_db(transaction=True)
def test_metrics_show_lag_gateways_and_produced_counters(client, operator, activity, scene):
    client.force_login(operator)
    response = client.get("/metrics")
    assert response.status_code == 200
    got = samples(response.content.decode())
    link = (("replica", "/mapr/newyork/activity"), ("source", "/mapr/sanfrancisco/activity"))
    assert got[("streamgate_replica_lag_messages", link)] == 6  # no engine runs in this test
    # All the source holds (60 bytes of values on a row store, more on a batch store).
    assert got[("streamgate_replica_lag_bytes", link)] == logical_bytes(activity) >= 60
    assert got[("streamgate_replica_lag_seconds", link)] >= 0
    assert got[("streamgate_replica_stalled", link)] == 0
    gateway = (("cluster", "newyork"), ("gateway", "gw1"))
    assert got[("streamgate_gateway_batches_total", gateway)] == 3
    assert got[("streamgate_gateway_messages_total", gateway)] == 30
    assert got[("streamgate_gateway_bytes_total", gateway)] == 300
    assert got[("streamgate_gateway_up", gateway)] == 1
    clicks = (("stream", "/mapr/sanfrancisco/activity"), ("topic", "clicks"))
    assert got[("streamgate_messages_produced_total", clicks)] == 6


@pytest.mark.django_db(transaction=True)
def test_gateway_counters_count_what_its_batches_newly_wrote(client, operator, owner, activity,
                                                             activity_ny, settings):
    """A gateway's applies, through its tally and heartbeat flush, to /metrics: messages and
    logical bytes count once, so a redelivered batch and the overlap of a batch with what the
    replica holds add nothing (as for messages_applied); batches count every delivery."""
    from workers.replication.applier import tally
    from workers.replication.gateway import Heartbeat
    from workers.tasks import apply_batch_task

    settings.STREAMGATE_NAMESPACE = f"sgt-{uuid.uuid4().hex[:10]}:"  # its "applied" wake-ups
    link = replica_add(actor=owner, source=activity, replica=activity_ny).pk
    upstream_add(actor=owner, replica=activity_ny, source=activity)
    topic_create(actor=owner, stream=activity, name="clicks", partitions=1)
    # 3 + 2 + (6 + 1 + 1) = 13 logical bytes each: value, key, one header.
    records = [Record(value=b"v%02d" % i, key=b"k%d" % i, headers=(("h", b"x"),))
               for i in range(10)]
    for record in records:  # one a call: a batch store applies whole batches
        messages_produce(actor=owner, stream=activity, topic="clicks", records=[record])
    GatewayFactory(cluster=activity_ny.cluster, name="gw1")
    gateway = ("newyork", "gw1")
    tally.take(gateway)  # what other tests of this process left for the same gateway
    for start, end, new in ((0, 6, 6), (0, 6, 0), (4, 10, 4)):  # first, redelivered, overlap
        assert apply_batch_task(link, "clicks", 0, start, end, gateway="newyork/gw1") == new
    Heartbeat([gateway]).flush([gateway], heartbeat=True)
    got = scrape(client, operator)
    labels = (("cluster", "newyork"), ("gateway", "gw1"))
    assert got[("streamgate_gateway_batches_total", labels)] == 3
    assert got[("streamgate_gateway_messages_total", labels)] == 10
    # Each message's bytes once: 10 * 13 on a row store, the batches' records sections on a
    # batch store.
    assert got[("streamgate_gateway_bytes_total", labels)] == logical_bytes(activity) >= 10 * 13
    assert got[("streamgate_gateway_errors_total", labels)] == 0


@pytest.mark.django_db
def test_metrics_are_for_operators_only(client, owner, outsider):
    assert client.get("/metrics").status_code in (401, 403)
    client.force_login(owner)
    assert client.get("/metrics").status_code == 403


# --- produce and consume rates, alarms, jobs (operations) --------------------------------------


def scrape(client, operator) -> dict[tuple[str, tuple], float]:  # type: ignore[no-untyped-def]
    client.force_login(operator)
    response = client.get("/metrics")
    assert response.status_code == 200
    return samples(response.content.decode())


@pytest.mark.django_db
def test_produce_and_consume_through_the_api_count_messages_and_bytes(api, client, owner,
                                                                      operator, activity):
    topic_create(actor=owner, stream=activity, name="clicks", partitions=1)
    base = f"/api/v1/streams/{activity.uuid}/topics/clicks/messages/"
    body = {"records": [{"value": "hello"}, {"value": "world!"}]}
    assert api(owner).post(base, body, format="json").status_code == 201
    assert len(api(owner).get(base, {"encoding": "utf-8"}).json()["messages"]) == 2
    assert len(api(owner).get(base, {"offset": 1}).json()["messages"]) == 1
    got = scrape(client, operator)
    stream = (("stream", activity.path),)
    assert got[("streamgate_produced_messages_total", stream)] == 2
    assert got[("streamgate_produced_bytes_total", stream)] == 11
    assert got[("streamgate_consumed_messages_total", stream)] == 3
    assert got[("streamgate_consumed_bytes_total", stream)] == 17


@pytest.mark.django_db
def test_alarms_open_by_kind(client, operator, owner, activity, activity_ny):
    from operations.alarms import alarms_evaluate
    from operations.models import AlarmKind

    replica_add(actor=owner, source=activity, replica=activity_ny)  # waits for its upstream
    alarms_evaluate()
    got = scrape(client, operator)
    assert got[("streamgate_alarms_open", (("alarm", AlarmKind.WAITING_FOR_UPSTREAM.value),))] == 1
    assert got[("streamgate_alarms_open", (("alarm", AlarmKind.STALLED.value),))] == 0


@pytest.mark.django_db
def test_job_progress_of_active_jobs_only(client, operator, owner, activity, activity_ny):
    from replication.models import Job

    running = Job.objects.create(kind=Job.Kind.COPYSTREAM, state=Job.State.RUNNING,
                                 tenant=activity.tenant, source_path=activity.path,
                                 destination_path=activity_ny.path, messages_total=200,
                                 messages_done=50, bytes_total=2000, bytes_done=500)
    Job.objects.create(kind=Job.Kind.DIFFSTREAMS, state=Job.State.SUCCEEDED,
                       tenant=activity.tenant, source_path=activity.path,
                       destination_path=activity_ny.path)
    got = scrape(client, operator)
    job = (("destination", activity_ny.path), ("job", str(running.pk)), ("kind", "copystream"),
           ("source", activity.path), ("state", "RUNNING"))
    assert got[("streamgate_job_percent", job)] == 25
    assert got[("streamgate_job_messages_done", job)] == 50
    assert got[("streamgate_job_bytes_total", job)] == 2000
    assert [key for key in got if key[0] == "streamgate_job_percent"] == [
        ("streamgate_job_percent", job)]


def test_traffic_counts_add_up_on_the_shared_redis_cache(settings):
    """The counters' one-round-trip form on Redis (portal/cache.py `incr_many`): a new
    stream's counts start from zero, keep no expiry, and add up across requests."""
    from django.core.cache import caches

    from replication.counters import (
        PRODUCED,
        count_refusal,
        count_traffic,
        refusal_totals,
        traffic_totals,
    )

    settings.CACHES = {"default": {"BACKEND": "portal.cache.ReusingRedisCache",
                                   "LOCATION": settings.REDIS_URL,
                                   "KEY_PREFIX": f"test-counters-{uuid.uuid4().hex}"}}
    stream = uuid.uuid4()
    count_traffic(direction=PRODUCED, stream=stream, messages=3, nbytes=600)
    count_traffic(direction=PRODUCED, stream=stream, messages=2, nbytes=10)
    count_refusal("batch_too_large")
    assert traffic_totals(PRODUCED, [stream]) == {stream: (5, 610)}
    assert refusal_totals()["batch_too_large"] == 1
    cache = caches["default"]
    key = cache.make_and_validate_key(f"metrics:{PRODUCED}:messages:{stream}")
    client = cache._cache.get_client(write=True)
    assert client.ttl(key) == -1  # kept for good, as `add(key, 0, timeout=None)` did
    client.delete(*client.keys(f"{cache.key_prefix}*"))
