"""A gateway's batch list (replication/batchqueue.py, workers/batches.py): what the
replicator pushes there is applied on real stores and acknowledged batch by batch."""

from __future__ import annotations

import time
import uuid
from itertools import pairwise

import pytest

from replication.models import ReplicaLink
from replication.presence import presence
from tests.workers.test_replication import (  # noqa: F401
    Producer,
    check,
    pair,
    source_ends,
)
from workers.batches import BatchConsumer
from workers.gateway import tally

pytestmark = pytest.mark.django_db(transaction=True)
GATEWAY = ("newyork", "gw1")


def thirds(link: int, partition: int, end: int, inbox: str) -> list[dict]:
    cuts = [0, end // 3, 2 * end // 3, end]
    return [{"link": link, "topic": "clicks", "partition": partition, "start": start,
             "end": stop, "ticket": f"{partition}:{start}", "reply_to": inbox,
             "expires": time.time() + 60} for start, stop in pairwise(cuts)]


def test_consecutive_batches_waiting_together_apply_as_one_and_each_is_acknowledged(
        engine, owner, pair):  # noqa: F811
    source, replica = pair
    link = ReplicaLink.objects.get()
    produce = Producer(owner, source)
    produce(120)
    ends = source_ends(source)
    assert len(ends) == 3 and min(ends.values()) >= 3
    signals, inbox = presence(), uuid.uuid4().hex
    batches = [b for p, end in ends.items() for b in thirds(link.pk, p, end, inbox)]
    # Queued long ago: its acknowledgement is overdue, so it went elsewhere; dropped here.
    stale = {**batches[0], "ticket": "stale", "expires": time.time() - 1}
    signals.send_batches([(GATEWAY, b) for b in [*batches, stale]], 60)
    tally.take(GATEWAY)

    consumer = BatchConsumer(GATEWAY, signals).start()
    try:
        acks: list[dict] = []
        deadline = time.monotonic() + 20
        while len(acks) < len(batches) and time.monotonic() < deadline:
            acks += signals.wait(0.5, inbox).acks
    finally:
        consumer.close()
    assert sorted(a["ticket"] for a in acks) == sorted(b["ticket"] for b in batches)
    assert not [a for a in acks if a.get("error")]
    assert sum(a["applied"] for a in acks) == sum(ends.values())
    # One apply per partition (three batches each, waiting together), not one per batch.
    assert tally.take(GATEWAY)["batches"] == len(ends)
    report = check(source, replica, ["clicks"], acknowledged=produce.acked)
    assert report.ok, report.summary()
