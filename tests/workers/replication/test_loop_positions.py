"""What the replicator remembers to read less: where each replica is (workers/replication/
loop.py `positions`), which the replica's apply rule corrects when it is wrong (DESIGN.md
invariant 2), and what each link's ends looked like at the last sweep (workers/replication/
linkcache.py SweepMarks)."""

from __future__ import annotations

import pytest

from replication.engine.store import Record
from replication.models import ReplicaLink
from replication.stores import store_for
from tests.workers.test_replication import (  # noqa: F401
    Producer,
    check,
    gateways,
    in_process_replicator,
    pair,
    source_ends,
    step_until,
)

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_replica_made_again_behind_the_replicators_back_is_copied_whole_once(
        gateways, owner, pair, settings):  # noqa: F811
    """The replicator knows the replica is at the source's end; the replica's topic is then
    deleted and made again, empty, where the replicator cannot see it. The next batches,
    planned from the remembered positions, are refused as a gap; the replicator forgets the
    positions, reads the replica and copies everything again: nothing lost, nothing twice."""
    source, replica = pair
    settings.REPLICATION_SWEEP_SECONDS = 300  # the sweep forgets every position too: not here
    replicator = in_process_replicator(settings)
    produce = Producer(owner, source)
    produce(300)
    step_until(replicator, lambda: check(source, replica, ["clicks"]).ok)
    link = ReplicaLink.objects.get()
    step_until(replicator, lambda: replicator.positions.get(link.pk) == {
        ("clicks", p): end for p, end in source_ends(source).items()})
    store = store_for(replica.cluster)
    store.drop_topic(replica.uuid, "clicks")
    store.ensure_topic(replica.uuid, "clicks", len(source_ends(source)))
    produce(60)
    step_until(replicator, lambda: check(source, replica, ["clicks"]).ok, timeout=10)
    report = check(source, replica, ["clicks"], acknowledged=produce.acked)
    assert report.ok and produce.sent == 360, report.summary()


def test_a_sweep_plans_only_the_links_whose_ends_changed_and_finds_a_lost_wake_up(
        gateways, owner, pair, settings):  # noqa: F811
    """The sweep is there for wake-ups that were lost. It plans a link only if its source or
    replica stream changed since the sweep before (SweepMarks), so an idle deployment's sweep
    reads two figures a store, not every link's partitions and cursors; and a message that
    arrived without its wake-up changes the source's, so the sweep finds and copies it."""
    source, replica = pair
    replicator = in_process_replicator(settings)
    Producer(owner, source)(100)
    step_until(replicator, lambda: check(source, replica, ["clicks"]).ok)
    pumped: list[int] = []
    pump = replicator._pump
    replicator._pump = lambda link, now, **kw: pumped.append(link.id) or pump(link, now, **kw)

    def sweep() -> list[int]:
        pumped.clear()
        replicator.next_sweep = 0.0
        replicator._plan(replicator.clock())
        return list(pumped)

    sweep()  # the replica moved since the first sweep: planned once more
    assert sweep() == []  # nothing changed since
    store_for(source.cluster).append(source.uuid, "clicks", [Record(b"no wake-up")],
                                     origin=source.uuid)
    assert sweep() == [ReplicaLink.objects.get().pk]
    step_until(replicator, lambda: check(source, replica, ["clicks"]).ok, timeout=10)
