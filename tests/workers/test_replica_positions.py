"""The replicator's memory of where each replica is (workers/replicator.py `positions`): plans
read only the source while it holds, and the replica's apply rule corrects it when it is wrong
(DESIGN.md invariant 2)."""

from __future__ import annotations

import pytest

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
