"""Throughput per stream and per cluster over the last hour, from the produce counters, the
gateways' applied counters and the replicas' backlog: sampled by the lag recorder's beat
entry, served as rates for the charts; the outsider from another tenant sees none of it."""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from operations import throughput
from portal.web.templatetags.human import size
from replication import lag_history, placement
from replication.engine.store import Record
from replication.models import Gateway, Stream
from replication.services import replica_add, replica_pause, topic_create, upstream_add
from replication.services.messages import messages_produce
from replication.stores import store_for
from tests.clients import signed_in
from tests.factories import GatewayFactory, StreamFactory

pytestmark = pytest.mark.usefixtures("private_cache")


def produce(owner, stream, count: int) -> None:
    messages_produce(actor=owner, stream=stream, topic="clicks",
                     records=[Record(b"0123456789") for _ in range(count)])


@pytest.fixture
def paused_pair(owner, activity, activity_ny):
    topic_create(actor=owner, stream=activity, name="clicks")
    replica_add(actor=owner, source=activity, replica=activity_ny)
    upstream_add(actor=owner, replica=activity_ny, source=activity)
    replica_pause(actor=owner, source=activity, replica=activity_ny)


def test_stream_rates_show_messages_and_bytes_in_and_replicated(owner, activity, paused_pair):
    throughput.throughput_record(now=1_000.0)
    produce(owner, activity, 300)  # 30 s later: 10 msg/s, 100 B/s in
    lag_history.lag_record()  # paused: all 300 pending, nothing replicated
    throughput.throughput_record(now=1_030.0)
    data = signed_in(owner).get(f"/streams/{activity.pk}/throughput/").json()
    assert data["fields"] == ["t", "in_messages", "in_bytes", "replicated_messages",
                              "replicated_bytes"]
    (chart,) = data["charts"]
    assert chart["title"] == activity.path
    assert chart["points"] == [[1_030_000, 10.0, 100.0, 0.0, 0.0]]


def test_replicated_rate_is_what_the_backlog_did_not_keep(owner, activity, paused_pair):
    produce(owner, activity, 300)
    lag_history.lag_record()
    throughput.throughput_record(now=1_000.0)
    # nothing produced; the backlog of 300 drained in 30 s: 10 msg/s replicated
    from replication.models import ReplicaLink

    link = ReplicaLink.objects.get()
    lag_history._append({link.pk: [0, 0, 0, 0, 0]})
    throughput.throughput_record(now=1_030.0)
    (point,) = throughput.stream_throughput([activity.pk])[activity.pk]
    # The backlog's bytes are the store's logical bytes: 3000 on a row store (the values), the
    # batch's records section on a batch store.
    held = sum(p.bytes for p in store_for(activity.cluster).partition_stats(activity.uuid,
                                                                             "clicks"))
    assert held >= 3000
    assert point[1] == 0.0 and point[3] == 10.0 and point[4] == pytest.approx(held / 30, abs=0.01)


def test_cluster_rates_show_a_tenant_its_own_streams_and_an_operator_the_gateways(
        owner, operator, activity, newyork, sanfrancisco, paused_pair):
    """The gateways apply every tenant's batches: a tenant's user sees what its own streams
    sent on (nothing, paused), never the 4 msg/s of others' traffic newyork applied."""
    gw = GatewayFactory(cluster=newyork, name="gw1")
    throughput.throughput_record(now=1_000.0)
    produce(owner, activity, 60)
    lag_history.lag_record()  # paused: all 60 pending, nothing sent on
    Gateway.objects.filter(pk=gw.pk).update(messages_applied=120, bytes_applied=1200)
    throughput.throughput_record(now=1_030.0)

    def charts(user) -> dict:  # type: ignore[no-untyped-def]
        return {c["title"]: c["points"] for c in
                signed_in(user).get("/overview/throughput/").json()["charts"]}

    mine = charts(owner)
    assert mine["sanfrancisco"] == [[1_030_000, 2.0, 20.0, 0.0, 0.0]]
    assert mine["newyork"] == [[1_030_000, 0.0, 0.0, 0.0, 0.0]]
    assert charts(operator)["newyork"] == [[1_030_000, 0.0, 0.0, 4.0, 40.0]]


def test_samples_at_most_every_thirty_seconds_from_the_recorders_beat(owner, activity):
    assert throughput.throughput_record(now=2_000.0)
    assert not throughput.throughput_record(now=2_010.0)
    assert throughput.throughput_record(now=2_030.0)
    from django.core.cache import cache

    from workers.tasks import record_lag_task

    cache.delete(throughput.LAST_KEY)
    record_lag_task.apply()
    assert cache.get(throughput.LAST_KEY) is not None


def test_pages_carry_the_throughput_charts(owner, activity):
    client = signed_in(owner)
    assert 'data-throughput-url="/overview/throughput/"' in client.get("/").content.decode()
    page = client.get(f"/streams/{activity.pk}/").content.decode()
    assert f'data-throughput-url="/streams/{activity.pk}/throughput/"' in page
    assert "/static/js/throughput.js" in page


def test_another_tenant_sees_no_throughput(outsider, owner, activity, paused_pair):
    throughput.throughput_record(now=1_000.0)
    produce(owner, activity, 30)
    throughput.throughput_record(now=1_030.0)
    client = signed_in(outsider)
    assert client.get(f"/streams/{activity.pk}/throughput/").status_code == 404
    assert client.get("/overview/throughput/").json()["charts"] == []


def test_the_streams_list_shows_each_streams_health_bytes_stored_and_produce_rate(
        owner, sanfrancisco, activity, activity_ny, paused_pair):
    lonely = StreamFactory(cluster=sanfrancisco, name="lonely", created_by=owner,
                           tenant=owner.memberships.get().tenant)
    throughput.throughput_record(now=1_000.0)
    produce(owner, activity, 300)  # 30 s later: 10 msg/s
    lag_history.lag_record()
    throughput.throughput_record(now=1_030.0)
    client = signed_in(owner)
    page = client.get("/streams/").content.decode()

    def row(stream) -> str:  # type: ignore[no-untyped-def]
        return re.search(rf'<tr data-stream="{stream.path}">.*?</tr>', page, re.S).group(0)

    held = sum(p.bytes for p in store_for(activity.cluster).partition_stats(activity.uuid,
                                                                             "clicks"))
    source = row(activity)
    assert ">Paused<" in source and ">10 msg/s<" in source and f">{size(held)}<" in source
    assert ">Paused<" in row(activity_ny) and ">0 msg/s<" in row(activity_ny)
    alone = row(lonely)
    assert "Not replicated" in alone and ">0 bytes<" in alone and ">0 msg/s<" in alone
    # The figures of a page cost the same queries whatever its number of streams. Each
    # request reads the placement afresh: a process looks again every 2 s (one query), and
    # under load the 20 streams took longer than that to make (CI: 7 queries against 6).
    placement.forget()
    with CaptureQueriesContext(connection) as few:
        client.get("/streams/")
    for i in range(20):
        StreamFactory(cluster=sanfrancisco, name=f"more{i}", created_by=owner,
                      tenant=owner.memberships.get().tenant)
    placement.forget()
    with CaptureQueriesContext(connection) as many:
        page = client.get("/streams/").content.decode()
    assert len(many.captured_queries) == len(few.captured_queries)
    assert '<td data-label="Produced" data-field="rate"><span class="muted">—</span>' in row(
        Stream.objects.get(name="more0"))  # not sampled twice yet
