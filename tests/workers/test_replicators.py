"""Several replicators as real processes: they split the moving links, one killed -9 has its
links taken by the other within 5 seconds while producers write, and a replicator that lost
its lease and still sends batches changes nothing (invariant 2)."""

from __future__ import annotations

import subprocess
import threading
import time

import pytest
import redis
from django.conf import settings

from bench.ports import free_port
from replication.engine.replicator import BatchSpec
from replication.models import ReplicaLink, Stream
from replication.services import replica_add, upstream_add
from replication.stores import store_for
from replication.transport import redis_transport, transport
from replication.transport.client import namespace
from replication.transport.leases import ReplicatorState
from tests.factories import StreamFactory
from tests.streamgate.test_cli import STREAMGATE
from tests.workers.conftest import ROOT, Engine, wait_until
from tests.workers.test_replication import (  # noqa: F401 (fixtures)
    Producer,
    check,
    gateways,
    pair,
    replica_count,
    step_until,
)
from workers.replication.loop import Replicator

pytestmark = pytest.mark.django_db(transaction=True)

REPLICAS = 12  # links enough that two replicators each rank some to themselves


@pytest.fixture
def star(owner, activity, newyork, pair) -> list[Stream]:  # noqa: F811
    """activity replicated to REPLICAS streams of newyork (the pair's and more)."""
    source, first = pair
    replicas = [first]
    for i in range(1, REPLICAS):
        replica = StreamFactory(cluster=newyork, name=f"activity{i}", created_by=owner)
        replica_add(actor=owner, source=source, replica=replica)
        upstream_add(actor=owner, replica=replica, source=source)
        replicas.append(replica)
    return replicas


def states_by_pid(engine: Engine) -> dict[int, ReplicatorState]:
    pids = {process.pid for label, process in engine.processes.items()
            if label.startswith("replicator")}
    return {s.pid: s for s in transport().leases.replicators() if s.pid in pids}


def live_links(engine: Engine) -> dict[int, int]:
    return {pid: s.links for pid, s in states_by_pid(engine).items() if s.alive}


def wait_all_replicated(produce: Producer, replicas: list[Stream], timeout: float = 60) -> None:
    for replica in replicas:
        wait_until(lambda r=replica: check(produce.stream, r, [produce.topic]).ok, timeout,
                   every=0.2)
        report = check(produce.stream, replica, [produce.topic], acknowledged=produce.acked)
        assert report.ok, report.summary()  # 0 lost, duplicated, reordered, inconsistent


def test_two_replicators_split_the_links_and_one_killed_has_its_links_taken_within_5s(
        gateways, owner, activity, star):  # noqa: F811
    one, two = gateways.replicator("replicator-1"), gateways.replicator("replicator-2")
    wait_until(lambda: sorted(live_links(gateways).values()) != [] and
               sum(live_links(gateways).values()) == REPLICAS and
               len(live_links(gateways)) == 2 and min(live_links(gateways).values()) > 0,
               timeout=30)
    produce = Producer(owner, activity)
    produce(300)
    wait_all_replicated(produce, star)

    stop = threading.Event()
    writer = threading.Thread(target=lambda: [produce(50) or time.sleep(0.05)
                                              for _ in iter(stop.is_set, True)])
    writer.start()
    try:
        time.sleep(1.0)
        killed = time.monotonic()
        gateways.stop("replicator-1", kill=True)
        wait_until(lambda: live_links(gateways) == {two.pid: REPLICAS}, timeout=10, every=0.05)
        took = time.monotonic() - killed
        print(f"the survivor held every link {took:.2f}s after the kill")
        time.sleep(1.0)
    finally:
        stop.set()
        writer.join(timeout=30)
    assert took < 5.0, f"the survivor held every link {took:.1f}s after the kill"
    listed = {s.pid: s for s in transport().leases.replicators()}
    assert not listed[one.pid].alive and listed[two.pid].alive  # the dead one stays listed
    wait_all_replicated(produce, star)  # replication went on with the survivor alone
    assert produce.sent > 300


def test_a_replicator_that_lost_its_lease_and_still_sends_changes_nothing(
        gateways, owner, pair, settings):  # noqa: F811
    """A replicator paused past its lease (stepped by hand here, then left alone) while a
    replicator process takes the link over; its stale batches, a redelivery of what the new
    holder applied and one past the replica's end, are trimmed and refused by the gateway."""
    settings.REPLICATION_BATCH_MESSAGES = 200
    source, replica = pair
    link = ReplicaLink.objects.get()
    produce = Producer(owner, source)
    stale = Replicator(transport())
    produce(300)
    step_until(stale, lambda: check(source, replica, ["clicks"]).ok)
    assert stale.leases.held == {link.pk}
    ends = store_for(source.cluster).watermarks(source.uuid, "clicks")

    gateways.replicator("replicator-new")  # takes the link once the stale lease expires
    wait_until(lambda: list(live_links(gateways).values()) == [1], timeout=15)
    produce(300)
    wait_until(lambda: check(source, replica, ["clicks"]).ok, timeout=30, every=0.2)
    gateways.stop("replicator-new", kill=True)  # so nothing else moves the replica now
    # One record a batch: the stale batch past the replica's end then starts past it on a
    # batch store too (which applies the whole batch holding its first offset).
    produce.one_by_one(100)
    assert stale.leases.holds({link.pk}, stale.clock()) == set()  # it would plan nothing
    before = replica_count(replica)
    marks = store_for(source.cluster).watermarks(source.uuid, "clicks")
    replica_marks = store_for(replica.cluster).watermarks(replica.uuid, "clicks")

    # What it still had to send: every partition again from 0 (all applied since), and a
    # batch starting past the replica's end (the rest of its stale plan).
    now = stale.clock()
    live = stale.dispatcher.choice.choose("newyork", now)
    assert live is not None
    # Earlier batches' acknowledgements may still come.
    sent, known = 0, set(stale.dispatcher.flights.tickets)
    for partition, (_low, old_end) in ends.items():
        key = (link.pk, "clicks", partition)
        redelivery = BatchSpec(source.uuid, replica.uuid, "clicks", partition, 0, old_end)
        stale.dispatcher._dispatch(stale.cache.links[link.pk], key, redelivery, live, now)
        end = replica_marks[partition][1]
        if marks[partition][1] > end + 1:
            gap = BatchSpec(source.uuid, replica.uuid, "clicks", partition, end + 1,
                            marks[partition][1])
            stale.dispatcher._dispatch(stale.cache.links[link.pk], key, gap, live, now)
            sent += 1
        sent += 1
    tickets = set(stale.dispatcher.flights.tickets) - known
    assert len(tickets) == sent
    acks: list[dict] = []  # its next wait sends them; they come back to its inbox
    deadline = time.monotonic() + 30
    while len(acks) < sent and time.monotonic() < deadline:
        acks += [a for a in stale._wait().acks if a["ticket"] in tickets]
    assert len(acks) == sent
    assert all(a.get("applied", 0) == 0 for a in acks), acks
    assert any(a.get("misordered") for a in acks), acks  # the gap is refused, not filled
    assert replica_count(replica) == before
    report = check(source, replica, ["clicks"])
    assert not (report.duplicates or report.reordered or report.inconsistent), report.summary()


def test_streamgate_replicator_run_is_the_replicator_process_and_is_listed(engine, tmp_path):
    """The CLI execs the server's command (so signals reach it): the pid it started with is
    the replicator's, alive in the list; SIGTERM takes it off the live ones at once."""
    log = (tmp_path / "cli-replicator.log").open("ab")
    process = subprocess.Popen([str(STREAMGATE), "replicator", "run"], cwd=ROOT, env=engine.env,
                               stdout=log, stderr=subprocess.STDOUT)
    engine.processes["replicator-cli"] = process
    wait_until(lambda: any(s.pid == process.pid and s.alive
                           for s in transport().leases.replicators()), timeout=30)
    engine.stop("replicator-cli")  # SIGTERM: gives its leases back and leaves the registry
    assert process.returncode == 0
    assert not [s for s in transport().leases.replicators() if s.pid == process.pid]


def test_batches_it_cannot_send_are_forgotten_said_and_sent_again_once_redis_answers(
        gateways, owner, pair):  # noqa: F811
    """Redis out of this replicator's reach as it sends (a real connection refused): its
    flights are dropped at once, not left to time out, the link says why, and once Redis
    answers again the retry sends the batches and the replica ends equal, nothing twice."""
    source, replica = pair
    link = ReplicaLink.objects.get()
    produce = Producer(owner, source)
    replicator = Replicator(redis_transport(settings.REDIS_URL, namespace()))  # its own client
    produce(300)
    # Cut; its next wait would send them.
    step_until(replicator, lambda: replicator.dispatcher.outbox)
    assert replicator.dispatcher.flights.inflight and replicator.dispatcher.flights.tickets
    reachable = replicator.transport.inbox.client
    replicator.transport.inbox.client = redis.Redis(port=free_port(), socket_connect_timeout=1)
    with pytest.raises(redis.ConnectionError):
        replicator._wait()
    assert not replicator.dispatcher.outbox and not replicator.dispatcher.flights.tickets
    assert not any(replicator.dispatcher.flights.inflight.values())
    assert link.pk in replicator.retry
    link.refresh_from_db()
    assert link.last_error.startswith("cannot send a batch: "), link.last_error
    assert replica_count(replica) == 0  # nothing was sent

    replicator.transport.inbox.client = reachable
    step_until(replicator, lambda: check(source, replica, ["clicks"]).ok)
    report = check(source, replica, ["clicks"], acknowledged=produce.acked)
    assert report.ok, report.summary()
    assert replica_count(replica) == 300
