"""Synchronous replicas through real processes: the replicator and gateways as subprocesses,
the producer in the test. A synchronous produce returns only once the replica holds it; the
link drops to async by itself when it cannot keep up and returns once caught up; every switch
is a row, a field of `replica list` and an event; gateways going up and down are events."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection

from portal.rest.rows import replica_rows
from replication.engine.store import Record, UnknownTopic
from replication.models import Gateway, ReplicaLink, Stream, SyncMode
from replication.services import replica_add, replica_edit, topic_create, upstream_add
from replication.services.messages import messages_produce
from replication.stores import store_for
from replication.transport import transport
from tests.channel_events import Events, use_redis_layer
from tests.factories import GatewayFactory, StreamFactory
from tests.workers.conftest import in_process_engine, wait_until
from workers.replication.loop import Replicator

pytestmark = pytest.mark.django_db(transaction=True)


def produce(owner, stream: Stream, n: int = 1, start: int = 0) -> list[tuple[int, int]]:
    records = [Record(value=b"v%d" % i, headers=(("id", b"%d" % i),))
               for i in range(start, start + n)]
    return messages_produce(actor=owner, stream=stream, topic="clicks", records=records)


def replica_holds(replica: Stream, offsets: list[tuple[int, int]]) -> bool:
    try:
        marks = store_for(replica.cluster).watermarks(replica.uuid, "clicks")
    except UnknownTopic:  # nothing applied yet
        return False
    return all(marks.get(p, (0, 0))[1] > offset for p, offset in offsets)


def link_of(source: Stream, replica: Stream) -> ReplicaLink:
    return ReplicaLink.objects.get(source=source, replica=replica)


def row_of(source: Stream, replica: Stream) -> dict:
    return next(r for r in replica_rows(source) if r["replicaPath"] == replica.path)


def switches(link: ReplicaLink) -> list[tuple[str, str]]:
    return [(s.from_mode, s.to_mode) for s in link.mode_switches.order_by("at", "pk")]


@pytest.fixture
def sync_pair(owner, activity, activity_ny):
    for cluster in (activity.cluster, activity_ny.cluster):
        store_for(cluster)
    topic_create(actor=owner, stream=activity, name="clicks", partitions=3)
    replica_add(actor=owner, source=activity, replica=activity_ny, synchronous=True)
    upstream_add(actor=owner, replica=activity_ny, source=activity)
    return activity, activity_ny


@pytest.fixture
def events(engine, settings) -> Iterator[Events]:
    """Events on the channel layer the subprocesses publish to (their namespace's prefix)."""
    use_redis_layer(settings, f"{engine.namespace}asgi")
    with Events() as events:
        yield events


def start_gateway(engine, newyork, name: str = "gw1") -> None:
    if not Gateway.objects.filter(cluster=newyork, name=name).exists():
        GatewayFactory(cluster=newyork, name=name)
    engine.gateway("newyork", name)
    gateway = ("newyork", name)
    wait_until(lambda: gateway in transport().gateways.live([gateway]), timeout=30)


def running_engine(engine, owner, newyork, source: Stream, replica: Stream) -> None:
    """A gateway and the replicator, past their start-up: the link is in sync mode."""
    start_gateway(engine, newyork)
    engine.replicator()
    # The first produce may wait for the replicator's start-up and drop the link to async for
    # it; the gateway's heartbeat promotes the caught-up link to sync again.
    offsets = produce(owner, source, start=10_000)
    wait_until(lambda: replica_holds(replica, offsets), timeout=30)
    wait_until(lambda: link_of(source, replica).mode == SyncMode.SYNC, timeout=15)


def test_a_synchronous_produce_returns_only_once_the_replica_holds_it(engine, owner, newyork,
                                                                       sync_pair):
    source, replica = sync_pair
    running_engine(engine, owner, newyork, source, replica)
    before = switches(link_of(source, replica))
    for i in range(30):
        offsets = produce(owner, source, n=1 + i % 3, start=i * 3)
        # No waiting here: the produce itself waited for the replica.
        assert replica_holds(replica, offsets), f"produce {i} acknowledged before the replica"
    link = link_of(source, replica)
    assert link.mode == SyncMode.SYNC and switches(link) == before
    assert before[-1] == ("async", "sync")
    row = row_of(source, replica)
    assert (row["synchronous"], row["mode"], row["isUptodate"]) == (True, "sync", True)
    assert row["modeReason"] == "caught up, with a live gateway on cluster newyork"
    assert row["modeSince"] == int(link.mode_since.timestamp() * 1000)


def test_an_asynchronous_replica_does_not_hold_the_producer(engine, owner, newyork, activity,
                                                           activity_ny):
    """The control: the same produce to an asynchronous replica returns before it applies."""
    topic_create(actor=owner, stream=activity, name="clicks", partitions=1)
    replica_add(actor=owner, source=activity, replica=activity_ny)
    upstream_add(actor=owner, replica=activity_ny, source=activity)
    start_gateway(engine, newyork)  # no replicator: nothing can apply
    started = time.monotonic()
    offsets = produce(owner, activity)
    assert time.monotonic() - started < 1.0 and not replica_holds(activity_ny, offsets)
    assert link_of(activity, activity_ny).mode == SyncMode.ASYNC


def test_without_a_live_gateway_the_link_drops_to_async_and_comes_back(engine, owner, newyork,
                                                                       sync_pair, events):
    source, replica = sync_pair
    events.join(source.tenant_id)
    running_engine(engine, owner, newyork, source, replica)
    before = switches(link_of(source, replica))
    engine.processes["gw-newyork-gw1"].send_signal(signal.SIGKILL)
    wait_until(lambda: not transport().gateways.live([("newyork", "gw1")]), timeout=10)
    started = time.monotonic()
    offsets = produce(owner, source, n=50)
    # Acknowledged at once, without waiting out the timeout: no gateway could apply it.
    assert time.monotonic() - started < 1.0 and not replica_holds(replica, offsets)
    row = row_of(source, replica)
    assert (row["synchronous"], row["mode"]) == (True, "async")
    assert row["modeReason"] == "no live gateway on cluster newyork"
    assert row["messagesPending"] == 50
    engine.stop("gw-newyork-gw1")
    start_gateway(engine, newyork)
    # It catches up asynchronously, then returns to sync by itself.
    wait_until(lambda: link_of(source, replica).mode == SyncMode.SYNC, timeout=20)
    assert replica_holds(replica, offsets)
    link = link_of(source, replica)
    assert switches(link) == [*before, ("sync", "async"), ("async", "sync")]
    assert [s.reason for s in link.mode_switches.order_by("at", "pk")][-2:] == [
        "no live gateway on cluster newyork",
        "caught up, with a live gateway on cluster newyork"]
    modes = [p["mode"] for e, p in events.collect(2.0) if e == "replica.mode"]
    assert "async" in modes and modes[-1] == "sync"


def test_a_replica_that_does_not_apply_in_time_drops_to_async(engine, owner, newyork,
                                                              sync_pair, settings):
    source, replica = sync_pair
    settings.REPLICATION_SYNC_TIMEOUT_MS = 1200
    start_gateway(engine, newyork)
    wait_until(lambda: link_of(source, replica).mode == SyncMode.SYNC, timeout=15)
    # A gateway is live but no replicator sends it anything: the produce waits the timeout.
    started = time.monotonic()
    offsets = produce(owner, source)
    waited = time.monotonic() - started
    assert 1.2 <= waited < 3.5 and not replica_holds(replica, offsets)
    link = link_of(source, replica)
    assert link.mode == SyncMode.ASYNC
    assert link.mode_reason == "the replica did not apply a produce within 1200 ms"
    started = time.monotonic()
    produce(owner, source, start=1)  # async now: not held up any more
    assert time.monotonic() - started < 1.0
    engine.replicator()
    wait_until(lambda: link_of(source, replica).mode == SyncMode.SYNC, timeout=20)
    assert replica_holds(replica, produce(owner, source, start=2))


def test_a_slow_replica_drops_to_async_past_the_latency_threshold(engine, owner, newyork,
                                                                  sync_pair, settings):
    source, replica = sync_pair
    settings.REPLICATION_SYNC_LATENCY_MS = 300
    settings.REPLICATION_SYNC_TIMEOUT_MS = 30_000  # the replicator's start-up fits in it
    running_engine(engine, owner, newyork, source, replica)
    engine.stop("replicator")
    # The replicator comes back only after its start-up: the produce is applied, but slowly.
    threading.Timer(0.2, engine.replicator).start()
    offsets = produce(owner, source)
    assert replica_holds(replica, offsets)
    link = link_of(source, replica)
    assert link.mode == SyncMode.ASYNC
    assert link.mode_reason.startswith("the replica took ")
    assert link.mode_reason.endswith(" ms to apply a produce, over the 300 ms threshold")


def test_turning_synchronous_off_leaves_sync_mode_at_once(engine, owner, newyork, sync_pair):
    source, replica = sync_pair
    start_gateway(engine, newyork)
    wait_until(lambda: link_of(source, replica).mode == SyncMode.SYNC, timeout=15)
    replica_edit(actor=owner, source=source, replica=replica, synchronous=False)
    link = link_of(source, replica)
    assert (link.mode, link.mode_reason) == (SyncMode.ASYNC, "-synchronous set to false")
    offsets = produce(owner, source)  # nothing replicates (no replicator): not held up
    assert not replica_holds(replica, offsets)
    time.sleep(1.5)  # several heartbeats: a non-synchronous link is never promoted
    assert link_of(source, replica).mode == SyncMode.ASYNC


def test_gateways_going_up_and_down_are_events_for_the_tenants_concerned(
    engine, owner, outsider, newyork, activity, activity_ny, events,
):
    elsewhere = StreamFactory(cluster=activity.cluster, name="other", created_by=outsider)
    events.join(activity.tenant_id)
    events.join(elsewhere.tenant_id)  # globex has nothing on newyork: hears nothing
    gw1, gw2 = (GatewayFactory(cluster=newyork, name=n) for n in ("gw1", "gw2"))
    start_gateway(engine, newyork, "gw1")
    start_gateway(engine, newyork, "gw2")
    # Each process sends its event just after committing the status: a kill or a stop landing
    # in between takes the event (never the recorded status) with it, so hear each first.
    wait_until(lambda: {g.announced_status for g in Gateway.objects.all()} == {"UP"}, timeout=10)
    got = events.collect(2.0)
    engine.processes["gw-newyork-gw2"].send_signal(signal.SIGKILL)
    # Nobody is told of a kill: gw1's heartbeat notices once gw2's presence expires.
    wait_until(lambda: Gateway.objects.get(pk=gw2.pk).announced_status == "DOWN", timeout=10)
    got += events.collect(3.0)
    engine.stop("gw-newyork-gw1")  # a clean stop announces itself
    got += events.collect(6.0)
    statuses = [(p["gateway"], Gateway.objects.get(pk=p["gateway"]).name)
                for e, p in got if e == "gateway.status"]
    assert statuses.count((gw1.pk, "gw1")) == 2 and statuses.count((gw2.pk, "gw2")) == 2
    assert all(set(p) == {"cluster", "gateway"} and p["cluster"] == newyork.pk
               for e, p in got if e == "gateway.status")
    assert {g.name: g.announced_status for g in Gateway.objects.all()} == {
        "gw1": "DOWN", "gw2": "DOWN"}
    assert activity_ny.tenant_id == activity.tenant_id != elsewhere.tenant_id


def test_gateway_status_events_reach_no_other_tenant(engine, owner, outsider, newyork,
                                                     activity, events):
    elsewhere = StreamFactory(cluster=activity.cluster, name="other", created_by=outsider)
    events.join(elsewhere.tenant_id)
    StreamFactory(cluster=newyork, name="mine", created_by=owner)
    start_gateway(engine, newyork)
    engine.stop("gw-newyork-gw1")
    assert [e for e, _ in events.collect(3.0)] == []
    assert Gateway.objects.get().announced_status == "DOWN"  # it was announced, elsewhere


def test_embedded_mode_waits_for_the_in_process_gateway(owner, newyork, sync_pair, settings):
    """`make run`: no Redis; the gateways live in the process and batches apply eagerly in
    the replicator's thread, which notifies the producer waiting in another thread."""
    source, replica = sync_pair
    # The gateway's beat makes it live, and promotes the link.
    with in_process_engine(settings, newyork) as signals:
        assert link_of(source, replica).mode == SyncMode.SYNC
        replicator = Replicator(signals)

        def produce_in_thread() -> tuple[list[tuple[int, int]], float, bool]:
            try:
                started = time.monotonic()
                offsets = produce(owner, source, n=5)
                return offsets, time.monotonic() - started, replica_holds(replica, offsets)
            finally:
                connection.close()

        with ThreadPoolExecutor(1) as pool:
            future = pool.submit(produce_in_thread)
            deadline = time.monotonic() + 20
            while not future.done() and time.monotonic() < deadline:
                replicator.step()
            _offsets, waited, held = future.result(timeout=5)
    assert held and waited < 1.0
    assert link_of(source, replica).mode == SyncMode.SYNC


# --- -networkencryption: TLS on every connection the messages cross ----------------------------


def with_tls(server) -> None:  # type: ignore[no-untyped-def]
    """Restart a private PostgreSQL with TLS on, under a self-signed certificate."""
    import os
    import pwd
    import subprocess

    server.stop()
    key, crt = server.data / "server.key", server.data / "server.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(crt)],
                   check=True, capture_output=True, timeout=60)
    key.chmod(0o600)
    if os.geteuid() == 0:
        owner = pwd.getpwnam("postgres")
        for path in (key, crt):
            os.chown(path, owner.pw_uid, owner.pw_gid)
    with (server.data / "postgresql.conf").open("a") as conf:
        conf.write("\nssl = on\n")
    server.start()


def test_an_encrypted_link_replicates_over_tls_connections_only(engine, owner, activity,
                                                                 activity_ny, newyork,
                                                                 private_postgres):
    import psycopg

    with_tls(private_postgres)
    for cluster, name in ((activity.cluster, "sf_store"), (newyork, "ny_store")):
        cluster.store_url = f"{private_postgres.url(name)}?sslmode=require"
        cluster.save()
        store_for(cluster)
    topic_create(actor=owner, stream=activity, name="clicks", partitions=2)
    link = replica_add(actor=owner, source=activity, replica=activity_ny, networkencryption=True)
    upstream_add(actor=owner, replica=activity_ny, source=activity)
    assert link.networkencryption is True and row_of(activity, activity_ny)["networkencryption"]
    start_gateway(engine, newyork)
    engine.replicator()
    offsets = produce(owner, activity, n=100)
    wait_until(lambda: replica_holds(activity_ny, offsets), timeout=30)
    # Every connection to the stores (the gateway's, the replicator's, this process's) is TLS.
    with psycopg.connect(private_postgres.url("postgres")) as conn:
        rows = conn.execute(
            "SELECT a.datname, s.ssl FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) "
            "WHERE a.datname IN ('sf_store', 'ny_store')").fetchall()
    assert {name for name, _ in rows} == {"sf_store", "ny_store"}
    assert all(ssl for _, ssl in rows), rows
