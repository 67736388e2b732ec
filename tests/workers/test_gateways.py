"""Gateway processes: who may start, presence through heartbeats, round-robin, skipping."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from replication.engine.checker import check_replica
from replication.engine.store import Record
from replication.models import Gateway
from replication.services import replica_add, topic_create, upstream_add
from replication.services.messages import messages_produce
from replication.stores import store_for
from replication.transport import transport
from tests.factories import GatewayFactory
from tests.workers.conftest import ROOT, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def run_gateway_command(engine, cluster: str, name: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", "rungateway", "--cluster", cluster, "--name", name],
        cwd=ROOT, env=engine.env, capture_output=True, text=True, timeout=60,
    )


def is_live(cluster: str, name: str) -> bool:
    return (cluster, name) in transport().gateways.live([(cluster, name)])


@pytest.fixture
def pair(owner, activity, activity_ny):
    replica_add(actor=owner, source=activity, replica=activity_ny)
    upstream_add(actor=owner, replica=activity_ny, source=activity)
    topic_create(actor=owner, stream=activity, name="clicks", partitions=3)
    for stream in (activity, activity_ny):
        store_for(stream.cluster)  # as cluster_create does: before any gateway runs
    return activity, activity_ny


def produce_and_replicate(owner, source, replica, count: int) -> None:
    """`count` messages, 100 a produce: a batch store keeps a produce as one batch a
    partition and replicates whole batches, so small produces keep the replicator's batches
    (200 messages) apart on either store layout."""
    for first in range(0, count, 100):
        records = [Record(value=b"m%d" % i, headers=(("id", b"%d" % i),))
                   for i in range(first, min(count, first + 100))]
        messages_produce(actor=owner, stream=source, topic="clicks", records=records)

    def replicated() -> bool:
        return check_replica(store_for(source.cluster), source.uuid, store_for(replica.cluster),
                             replica.uuid, ["clicks"]).ok

    wait_until(replicated, timeout=30, every=0.2)


def logical_bytes(stream) -> int:
    """The stream's logical bytes as its store counts them: key+value+headers a message on
    the row layout (message i weighs 9 + 2 * digits(i): 14,780 bytes for i < 1000, 48,780 for
    i < 3000), the records sections uncompressed on the batch layout."""
    stats = store_for(stream.cluster).partition_stats(stream.uuid, "clicks")
    return sum(partition.bytes for partition in stats)


def test_an_unconfigured_gateway_refuses_to_start(engine, newyork):
    GatewayFactory(cluster=newyork, name="gw1")
    result = run_gateway_command(engine, "newyork", "gw9")
    assert result.returncode != 0
    assert "gateway gw9 is not configured for cluster newyork (configured: gw1)" in result.stderr
    assert "cluster gateway set" in result.stderr


def test_a_disabled_gateway_refuses_to_start(engine, newyork):
    GatewayFactory(cluster=newyork, name="gw1", enabled=False)
    result = run_gateway_command(engine, "newyork", "gw1")
    assert result.returncode != 0
    assert "gateway gw1 of cluster newyork is disabled" in result.stderr


def test_the_command_line_runs_the_gateway_process(engine, newyork):
    GatewayFactory(cluster=newyork, name="gw1")
    command = [sys.executable, "-c", "import sys; from streamgate.cli import main; "
               "sys.exit(main())", "gateway", "run", "-cluster", "newyork", "-name", "gw9"]
    result = subprocess.run(command, cwd=ROOT, env=engine.env, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode != 0
    assert "gateway gw9 is not configured for cluster newyork" in result.stderr
    usage = subprocess.run(command[:-2], cwd=ROOT, env=engine.env, capture_output=True,
                           text=True, timeout=60)
    assert "usage: streamgate gateway run -cluster <cluster> -name <name>" in usage.stderr


def test_heartbeats_make_a_gateway_up_and_a_killed_one_down(engine, newyork):
    GatewayFactory(cluster=newyork, name="gw1")
    engine.gateway("newyork", "gw1")
    wait_until(lambda: is_live("newyork", "gw1"), timeout=30)
    wait_until(lambda: Gateway.objects.get(name="gw1").status == Gateway.Status.UP)
    engine.processes["gw-newyork-gw1"].send_signal(signal.SIGKILL)
    # Nobody tells anyone: the presence key expires a TTL (2 s here) after the last beat.
    wait_until(lambda: not is_live("newyork", "gw1"), timeout=5)


def test_batches_go_round_robin_to_the_live_gateways(engine, owner, newyork, pair):
    for name in ("gw1", "gw2"):
        GatewayFactory(cluster=newyork, name=name)
        engine.gateway("newyork", name)
    wait_until(lambda: is_live("newyork", "gw1") and is_live("newyork", "gw2"), timeout=30)
    engine.replicator()
    produce_and_replicate(owner, *pair, count=3000)  # 200 a batch: at least 15 batches
    engine.close()  # a clean stop flushes the gateways' counters
    gateways = {g.name: g for g in Gateway.objects.all()}
    assert gateways["gw1"].batches_applied > 2 and gateways["gw2"].batches_applied > 2
    assert gateways["gw1"].messages_applied + gateways["gw2"].messages_applied == 3000
    # Like messages, bytes count what was newly written: a batch resent after a missed ack
    # (redelivered, or overlapping what the replica holds) adds nothing.
    assert gateways["gw1"].bytes_applied + gateways["gw2"].bytes_applied == logical_bytes(
        pair[1])


def test_a_down_gateway_is_skipped(engine, owner, newyork, pair):
    GatewayFactory(cluster=newyork, name="gw1")  # configured, never started
    GatewayFactory(cluster=newyork, name="gw2")
    engine.gateway("newyork", "gw2")
    wait_until(lambda: is_live("newyork", "gw2"), timeout=30)
    engine.replicator()
    produce_and_replicate(owner, *pair, count=1000)
    engine.close()
    gateways = {g.name: g for g in Gateway.objects.all()}
    assert gateways["gw1"].batches_applied == 0
    assert (gateways["gw2"].messages_applied, gateways["gw2"].bytes_applied) == (
        1000, logical_bytes(pair[1]))


def test_a_gateway_that_does_not_acknowledge_in_time_is_skipped(engine, owner, newyork, pair):
    for name in ("gw1", "gw2"):
        GatewayFactory(cluster=newyork, name=name)
    engine.gateway("newyork", "gw2")
    wait_until(lambda: is_live("newyork", "gw2"), timeout=30)
    # gw1 heartbeats but never consumes its queue: a hung gateway.
    transport().gateways.beat(("newyork", "gw1"), 120, "hung")
    engine.replicator()
    produce_and_replicate(owner, *pair, count=1000)
    assert "gateway_timeout" in engine.log("replicator") and "gw1" in engine.log("replicator")
    engine.close()
    gateways = {g.name: g for g in Gateway.objects.all()}
    assert (gateways["gw1"].batches_applied, gateways["gw2"].messages_applied) == (0, 1000)
    assert (gateways["gw1"].bytes_applied, gateways["gw2"].bytes_applied) == (
        0, logical_bytes(pair[1]))
