"""Synchronous replicas, the wire options and gateway status in one process: real PostgreSQL
stores, real Redis presence (under a namespace of the test's own) or, for embedded mode, the
in-process presence. The gateway's apply runs here as the task function itself; the
end-to-end tests with gateway processes are in tests/workers/test_sync.py."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack

import pytest
import redis
from django.test import Client
from django.urls import reverse

from portal.rest.rows import gateway_rows, replica_rows
from replication.engine.store import Record, UnknownTopic
from replication.models import Gateway, ModeSwitch, ReplicaLink, Stream, SyncMode
from replication.services import replica_add, replica_pause, topic_create, upstream_add
from replication.services.gateway_status import gateways_announce
from replication.services.messages import messages_produce
from replication.services.sync import link_mode_switch, links_sync_drop, links_sync_restore
from replication.stores import store_for
from replication.transport import transport
from replication.transport.liveness import LocalLiveness, RedisLiveness
from tests.channel_events import Events, use_redis_layer
from tests.factories import GatewayFactory
from workers.tasks import apply_batch_task

pytestmark = pytest.mark.django_db(transaction=True)
NY = ("newyork", "gw1")


@pytest.fixture(autouse=True)
def namespace(settings):
    """Presence, notifications and events under a namespace of the test's own."""
    url, name = settings.REDIS_URL, f"sgt-{uuid.uuid4().hex[:10]}:"
    settings.STREAMGATE_NAMESPACE = name
    use_redis_layer(settings, f"{name}asgi")
    yield name
    client = redis.Redis.from_url(url)
    keys = list(client.scan_iter(f"{name}*"))
    if keys:
        client.delete(*keys)


@pytest.fixture
def listen() -> Iterator[Callable[[], Events]]:
    """Opens Events on this test's layer, each closed when the test ends."""
    with ExitStack() as stack:
        yield lambda: stack.enter_context(Events())


@pytest.fixture
def pair(owner, activity, activity_ny, newyork):
    for cluster in (activity.cluster, newyork):
        store_for(cluster)
    topic_create(actor=owner, stream=activity, name="clicks", partitions=2)
    GatewayFactory(cluster=newyork, name="gw1")
    replica_add(actor=owner, source=activity, replica=activity_ny, synchronous=True)
    upstream_add(actor=owner, replica=activity_ny, source=activity)
    return activity, activity_ny


def link_of(pair: tuple[Stream, Stream]) -> ReplicaLink:
    return ReplicaLink.objects.select_related("source", "replica").get(
        source=pair[0], replica=pair[1])


def beat(gateway: tuple[str, str] = NY) -> None:
    transport().gateways.beat(gateway, 30.0, "test")


def in_sync(pair: tuple[Stream, Stream]) -> ReplicaLink:
    """Promoted as a live gateway's heartbeat does it."""
    beat()
    assert links_sync_restore(clusters={"newyork"}) == 1
    link = link_of(pair)
    assert link.mode == SyncMode.SYNC
    return link


def produce(owner, stream: Stream, n: int = 1) -> list[tuple[int, int]]:
    return messages_produce(actor=owner, stream=stream, topic="clicks",
                            records=[Record(value=b"v%d" % i) for i in range(n)])


def held(replica: Stream, offsets: list[tuple[int, int]]) -> bool:
    try:
        marks = store_for(replica.cluster).watermarks(replica.uuid, "clicks")
    except UnknownTopic:
        return False
    return all(marks.get(p, (0, 0))[1] > o for p, o in offsets)


def apply_later(link: ReplicaLink, delay: float) -> threading.Thread:
    """The gateway's task, run here after `delay`: applies what each partition holds."""
    def run() -> None:
        from django.db import connection

        time.sleep(delay)
        try:
            for partition in range(2):
                apply_batch_task(link.pk, "clicks", partition, 0, 1000, gateway="newyork/gw1")
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


# --- modes and their switches ------------------------------------------------------------------


def test_a_synchronous_link_waits_in_async_until_it_qualifies(owner, pair):
    link = link_of(pair)
    assert (link.synchronous, link.mode, link.mode_since) == (True, SyncMode.ASYNC, None)
    assert links_sync_restore(clusters={"newyork"}) == 1  # the caller is a live gateway
    replica_pause(actor=owner, source=pair[0], replica=pair[1])
    assert links_sync_drop(live_clusters={"newyork"}) == 1
    assert link_of(pair).mode_reason == "the replica is paused"
    assert links_sync_restore(clusters={"newyork"}) == 0  # paused: producers cannot wait
    assert links_sync_restore(clusters={"tokyo"}) == 0


def test_a_link_with_a_backlog_returns_to_sync_only_once_caught_up(owner, pair, settings):
    settings.REPLICATION_SYNC_TIMEOUT_MS = 100
    link = in_sync(pair)
    produce(owner, pair[0], n=20)  # nothing applies it: drops after the timeout
    assert link_of(pair).mode == SyncMode.ASYNC
    assert links_sync_restore(clusters={"newyork"}) == 0
    apply_later(link, 0).join()
    assert links_sync_restore(clusters={"newyork"}) == 1
    assert link_of(pair).mode_reason == "caught up, with a live gateway on cluster newyork"


def test_each_switch_is_recorded_once_whoever_races_for_it(pair):
    link = in_sync(pair)
    results = []
    threads = [threading.Thread(target=lambda: results.append(link_mode_switch(
        link=link_of(pair), to=SyncMode.ASYNC, reason="race"))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == [False, False, False, True]
    assert [(s.from_mode, s.to_mode, s.reason) for s in ModeSwitch.objects.order_by("at")] == [
        ("async", "sync", "caught up, with a live gateway on cluster newyork"),
        ("sync", "async", "race")]
    assert link.mode_switches.count() == 2


def test_replica_list_shows_the_configured_and_the_active_mode(owner, pair, activity):
    row = replica_rows(activity)[0]
    assert (row["synchronous"], row["mode"], row["modeSince"], row["modeReason"]) == (
        True, "async", None, "")
    link = in_sync(pair)
    row = replica_rows(activity)[0]
    assert (row["mode"], row["modeReason"]) == (
        "sync", "caught up, with a live gateway on cluster newyork")
    assert row["modeSince"] == int(link.mode_since.timestamp() * 1000)
    assert list(row)[-3:] == ["mode", "modeSince", "modeReason"]


# --- the producer ------------------------------------------------------------------------------


def test_a_produce_with_no_live_gateway_drops_the_link_without_waiting(owner, pair):
    in_sync(pair)
    transport().gateways.forget(NY)
    started = time.monotonic()
    offsets = produce(owner, pair[0])
    assert time.monotonic() - started < 1.0 and not held(pair[1], offsets)
    link = link_of(pair)
    assert (link.mode, link.mode_reason) == (SyncMode.ASYNC, "no live gateway on cluster newyork")


def test_a_produce_waits_the_timeout_then_drops_the_link(owner, pair, settings):
    settings.REPLICATION_SYNC_TIMEOUT_MS = 1500
    in_sync(pair)
    started = time.monotonic()
    produce(owner, pair[0])
    assert 1.5 <= time.monotonic() - started < 4.0
    link = link_of(pair)
    assert link.mode_reason == "the replica did not apply a produce within 1500 ms"
    started = time.monotonic()
    produce(owner, pair[0])  # async now: acknowledged at once
    assert time.monotonic() - started < 1.0


@pytest.mark.parametrize("embedded", [False, True], ids=["redis", "embedded"])
def test_the_gateways_applied_notice_releases_the_producer_at_once(owner, pair, settings,
                                                                   embedded):
    if embedded:
        settings.REDIS_URL = ""
    assert isinstance(transport().gateways, LocalLiveness if embedded else RedisLiveness)
    # Re-checks so rare that only the notification can explain a prompt return.
    settings.REPLICATION_SYNC_RECHECK_MS = 10_000
    settings.REPLICATION_SYNC_TIMEOUT_MS = 10_000
    link = in_sync(pair)
    thread = apply_later(link, 0.4)
    started = time.monotonic()
    offsets = produce(owner, pair[0], n=4)
    waited = time.monotonic() - started
    thread.join()
    assert held(pair[1], offsets) and 0.35 <= waited < 2.0
    assert link_of(pair).mode == SyncMode.SYNC


def test_a_slow_apply_drops_the_link_past_the_latency_threshold(owner, pair, settings):
    settings.REPLICATION_SYNC_LATENCY_MS = 200
    link = in_sync(pair)
    thread = apply_later(link, 0.5)
    offsets = produce(owner, pair[0], n=2)
    thread.join()
    assert held(pair[1], offsets)
    link = link_of(pair)
    assert link.mode == SyncMode.ASYNC
    assert link.mode_reason.endswith("ms to apply a produce, over the 200 ms threshold")


def test_mode_switches_are_events_for_the_tenants_of_both_ends(owner, outsider, pair, listen):
    source, replica = pair
    mine, theirs = listen(), listen()
    mine.join(source.tenant_id)
    theirs.join(outsider.memberships.get().tenant_id)
    in_sync(pair)
    transport().gateways.forget(NY)
    produce(owner, source)
    payload = {"source": source.pk, "replica": replica.pk}
    assert mine.collect(1.0) == [("replica.mode", {**payload, "mode": "sync"}),
                                 ("replica.mode", {**payload, "mode": "async"})]
    assert theirs.collect(0.2) == []


# --- wire options at apply time ----------------------------------------------------------------


def test_a_gateway_refuses_an_encrypted_link_once_a_store_allows_plaintext(owner, activity,
                                                                           activity_ny):
    clusters = (activity.cluster, activity_ny.cluster)
    for cluster in clusters:
        cluster.store_url = f"postgresql://u@{cluster.name}.example/s?sslmode=verify-full"
        cluster.save()
    link = replica_add(actor=owner, source=activity, replica=activity_ny,
                       networkencryption=True)
    upstream_add(actor=owner, replica=activity_ny, source=activity)
    for cluster in clusters:  # an operator points the stores at plaintext ones
        cluster.store_url = ""
        cluster.save()
        store_for(cluster)
    topic_create(actor=owner, stream=activity, name="clicks", partitions=1)
    produce(owner, activity, n=3)
    inbox = uuid.uuid4().hex
    assert apply_batch_task(link.pk, "clicks", 0, 0, 3, gateway="newyork/gw1", ticket="t1",
                            reply_to=inbox) == 0
    ack = transport().inbox.wait(1.0, inbox).acks[0]
    assert ack["error"].startswith("WireRefused: -networkencryption true needs TLS on every "
                                   "connection the messages cross")
    assert not held(activity_ny, [(0, 0)])


# --- gateways: counters, status, announcements ------------------------------------------------


def test_gateway_get_shows_counters_heartbeat_and_live_status(newyork):
    from django.utils import timezone

    GatewayFactory(cluster=newyork, name="gw1", batches_applied=7, messages_applied=700,
                   bytes_applied=9100, errors=1, last_heartbeat=timezone.now())
    GatewayFactory(cluster=newyork, name="gw2", enabled=False)
    GatewayFactory(cluster=newyork, name="gw3")
    beat()
    rows = {r["gateway"]: r for r in gateway_rows(newyork)}
    assert list(rows["gw1"]) == ["cluster", "gateway", "address", "enabled", "status",
                                 "lastHeartbeat", "heartbeatAge", "batchesApplied",
                                 "messagesApplied", "bytesApplied", "errors"]
    gw1 = rows["gw1"]
    assert (gw1["status"], gw1["batchesApplied"], gw1["messagesApplied"], gw1["bytesApplied"],
            gw1["errors"]) == ("UP", 7, 700, 9100, 1)
    assert 0 <= gw1["heartbeatAge"] < 5 and gw1["lastHeartbeat"] > 0
    assert (rows["gw2"]["status"], rows["gw3"]["status"]) == ("DISABLED", "UNKNOWN")
    assert rows["gw3"]["heartbeatAge"] is None and rows["gw3"]["lastHeartbeat"] is None
    transport().gateways.forget(NY)  # presence decides, not the database's recent heartbeat
    assert {r["gateway"]: r["status"] for r in gateway_rows(newyork)}["gw1"] == "DOWN"


def test_a_gateway_change_is_announced_once_to_the_tenants_concerned(
    newyork, owner, outsider, activity, activity_ny, listen,
):
    mine, theirs = listen(), listen()
    mine.join(activity_ny.tenant_id)
    theirs.join(outsider.memberships.get().tenant_id)
    gateway = GatewayFactory(cluster=newyork, name="gw1")
    assert gateways_announce(live=set()) == 0  # never up: not announced down
    assert gateways_announce(live={NY}) == 1
    assert gateways_announce(live={NY}) == 0
    assert Gateway.objects.get().announced_status == "UP"
    assert gateways_announce(live=set()) == 1
    payload = {"cluster": newyork.pk, "gateway": gateway.pk}
    assert mine.collect(1.0) == [("gateway.status", payload)] * 2
    assert theirs.collect(0.2) == []
    assert Gateway.objects.get().announced_status == "DOWN"


# --- the admin ---------------------------------------------------------------------------------


def test_the_admin_shows_mode_switches(operator, pair):
    link = in_sync(pair)
    client = Client()
    client.force_login(operator)
    page = client.get(reverse("admin:replication_modeswitch_changelist")).content.decode()
    assert "caught up, with a live gateway on cluster newyork" in page
    page = client.get(reverse("admin:replication_replicalink_change", args=[link.pk]))
    assert "caught up, with a live gateway on cluster newyork" in page.content.decode()
    listing = client.get(reverse("admin:replication_replicalink_changelist")).content.decode()
    assert "field-mode" in listing
