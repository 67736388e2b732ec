"""A gateway's batch list (replication/transport/batchqueue.py, workers/replication/
consumer.py): what the replicator pushes there is applied on real stores and acknowledged
batch by batch."""

from __future__ import annotations

import time
import uuid
from itertools import pairwise

import pytest

from replication.models import ReplicaLink
from replication.services.replicas import replica_pause
from replication.stores import store_for
from replication.transport import transport
from tests.workers.test_replication import (  # noqa: F401
    Producer,
    check,
    pair,
    source_ends,
)
from workers.replication.applier import tally
from workers.replication.consumer import BatchConsumer

pytestmark = pytest.mark.django_db(transaction=True)
GATEWAY = ("newyork", "gw1")


def thirds(link: int, partition: int, end: int, inbox: str) -> list[dict]:
    cuts = [0, end // 3, 2 * end // 3, end]
    return [{"link": link, "topic": "clicks", "partition": partition, "start": start,
             "end": stop, "ticket": f"{partition}:{start}", "reply_to": inbox,
             "expires": time.time() + 60} for start, stop in pairwise(cuts)]


def acks_for(signals, inbox: str, count: int) -> list[dict]:  # type: ignore[no-untyped-def]
    acks: list[dict] = []
    deadline = time.monotonic() + 20
    while len(acks) < count and time.monotonic() < deadline:
        acks += signals.inbox.wait(0.5, inbox).acks
    return acks


def test_consecutive_batches_waiting_together_apply_as_one_and_each_is_acknowledged(
        engine, owner, pair):  # noqa: F811
    source, replica = pair
    link = ReplicaLink.objects.get()
    produce = Producer(owner, source)
    produce(120)
    ends = source_ends(source)
    assert len(ends) == 3 and min(ends.values()) >= 3
    signals, inbox = transport(), uuid.uuid4().hex
    batches = [b for p, end in ends.items() for b in thirds(link.pk, p, end, inbox)]
    # Queued long ago: its acknowledgement is overdue, so it went elsewhere; dropped here.
    stale = {**batches[0], "ticket": "stale", "expires": time.time() - 1}
    signals.batches.send([(GATEWAY, b) for b in [*batches, stale]])
    tally.take(GATEWAY)

    consumer = BatchConsumer(GATEWAY, signals).start()
    try:
        acks = acks_for(signals, inbox, len(batches))
    finally:
        consumer.close()
    assert sorted(a["ticket"] for a in acks) == sorted(b["ticket"] for b in batches)
    assert not [a for a in acks if a.get("error")]
    assert sum(a["applied"] for a in acks) == sum(ends.values())
    # One apply per partition (three batches each, waiting together), not one per batch.
    assert tally.take(GATEWAY)["batches"] == len(ends)
    report = check(source, replica, ["clicks"], acknowledged=produce.acked)
    assert report.ok, report.summary()


def test_a_batch_taken_after_its_link_paused_applies_nothing_though_the_gateway_read_it(
        engine, owner, pair):  # noqa: F811
    """A gateway remembers the links it read (LinkBook) while the links epoch stays the same.
    Pausing the link sets a new epoch, so a batch taken after the pause reads the link again
    and applies nothing: pause stops at a batch boundary, however fresh that memory."""
    source, replica = pair
    link = ReplicaLink.objects.get()
    Producer(owner, source).one_by_one(60)  # halves are record ranges on either layout
    ends = source_ends(source)
    signals, inbox = transport(), uuid.uuid4().hex

    def batches(half: int) -> list[tuple]:
        return [(GATEWAY, {"link": link.pk, "topic": "clicks", "partition": p,
                           "start": half * (end // 2), "end": end // 2 if half == 0 else end,
                           "ticket": f"{p}:{half}", "reply_to": inbox,
                           "expires": time.time() + 60}) for p, end in ends.items()]

    consumer = BatchConsumer(GATEWAY, signals).start()
    try:
        signals.batches.send(batches(0))
        first = acks_for(signals, inbox, len(ends))
        assert consumer.links(link.pk) is not None  # read once, remembered as moving
        replica_pause(actor=owner, source=source, replica=replica)
        signals.batches.send(batches(1))
        second = acks_for(signals, inbox, len(ends))
    finally:
        consumer.close()
    assert sum(a["applied"] for a in first) == sum(end // 2 for end in ends.values())
    assert len(second) == len(ends)
    assert [a["applied"] for a in second] == [0] * len(ends)
    marks = store_for(replica.cluster).watermarks(replica.uuid, "clicks")
    assert {p: high for p, (_, high) in marks.items()} == {p: e // 2 for p, e in ends.items()}
