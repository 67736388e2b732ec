"""Writes racing a drain's or a rebalance's partition moves in the same process (issue 33):
the run goes on in a thread (the embedded mode's background run) while this thread keeps
creating new topics and producing to them, and producing to the topic whose partitions move,
through the service layer as the REST produce does. Every write succeeds, or meets
PartitionMoving (retriable) and a retry stores it; none is refused otherwise, none is lost,
none doubled.

The races this pins: (1) a move's switch drops the process's cached placement; while another
thread read it again, a third thread's look found nothing and took the cluster for a
one-group cluster: it wrote to the home group's store past the router, and a partition placed
on another group was refused there as not held, with no retry (the write after an
UnknownTopic that the drain test once met). (2) A produce split over groups, one of which
refused it as not held, was sent again whole: the other group's records were stored twice.
(3) A placement made from a view read before a drain began, or recorded but not yet held when
the drain was planned, put a new partition on the draining group and left it there."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.db import connection

from replication import placement
from replication.engine.store import Record
from replication.errors import PartitionMoving
from replication.models import Placement, Rebalance
from replication.services import topic_create
from replication.services.messages import messages_consume, messages_produce
from replication.services.rebalance import rebalance_start, store_group_drain
from replication.services.storegroups import store_group_add
from replication.storerouter import GroupRouter
from replication.stores import store_for
from tests.replication.services.test_rebalance import _embedded, ended, fill, run_state
from tests.replication.services.test_storegroups import group_url, grow

pytestmark = pytest.mark.django_db(transaction=True)
__all__ = ["_embedded"]  # the fixture, used here too

SIZES = [300] * 12  # four partitions of clicks on each of three groups
# Reading a big cluster's placement takes a while (100,000 rows); the race is in that while.
# Opening each group's store a little slower here stands in for it.
SLOW_READ = 0.02


@pytest.fixture
def slow_placement_reads(monkeypatch):  # type: ignore[no-untyped-def]
    opener = placement.opener

    def slow(*args):  # type: ignore[no-untyped-def]
        time.sleep(SLOW_READ)
        return opener(*args)

    monkeypatch.setattr(placement, "opener", slow)


def produced(owner, stream, topic: str, partitions: range,  # type: ignore[no-untyped-def]
             tag: str) -> list[tuple[int, int, bytes]]:
    """One record a partition in one produce, retried on PartitionMoving only (nothing was
    written then): (partition, offset, value) of each record acknowledged."""
    records = [Record(value=f"{tag}:{p}".encode(), partition=p) for p in partitions]
    for _ in range(50):
        try:
            placed = messages_produce(actor=owner, stream=stream, topic=topic, records=records)
        except PartitionMoving:
            time.sleep(0.05)
            continue
        return [(p, offset, r.value) for (p, offset), r in zip(placed, records, strict=True)]
    raise AssertionError(f"{topic} still moving after 50 tries")


def stored(owner, stream, topic: str, partitions: int) -> list[tuple[int, int, bytes]]:  # type: ignore[no-untyped-def]
    return [(p, m.offset, m.value) for p in range(partitions) for m in messages_consume(
        actor=owner, stream=stream, topic=topic, partition=p, limit=1000)]


def race(owner, stream, run_id: int) -> None:  # type: ignore[no-untyped-def]
    """While the run goes on (and a few rounds more): a new topic created and written, and a
    record written to every partition of clicks, each in one produce; then every record
    acknowledged is stored, once."""
    acked: dict[str, list] = {"clicks": []}
    rounds = 0
    while Rebalance.objects.get(pk=run_id).state in Rebalance.ACTIVE or rounds < 3:
        fresh = f"fresh{rounds}"
        topic_create(actor=owner, stream=stream, name=fresh, partitions=3)
        acked[fresh] = produced(owner, stream, fresh, range(3), fresh)
        acked["clicks"] += produced(owner, stream, "clicks", range(len(SIZES)), f"r{rounds}")
        rounds += 1
    assert run_state(ended(run_id)) == Rebalance.State.SUCCEEDED
    for topic, mine in acked.items():
        got = stored(owner, stream, topic, len(SIZES) if topic == "clicks" else 3)
        tags = Counter(value for _, _, value in got)
        assert [v for v, n in tags.items() if n > 1] == [], f"{topic}: written twice"
        assert set(mine) <= set(got), f"{topic}: acknowledged and lost"


def test_writes_racing_a_drain_are_stored_once_or_retried(
        operator, owner, activity, slow_placement_reads):
    grow(operator, activity.cluster, "s2", "s3")
    fill(owner, activity, "clicks", SIZES)
    started = store_group_drain(actor=operator, cluster=activity.cluster.name, name="s3")
    race(owner, activity, started["id"])
    assert not Placement.objects.filter(group__name="s3").exists()


def test_writes_racing_a_rebalance_are_stored_once_or_retried(
        operator, owner, activity, slow_placement_reads):
    grow(operator, activity.cluster)
    fill(owner, activity, "clicks", SIZES)
    for name in ("s2", "s3"):
        store_group_add(actor=operator, cluster=activity.cluster.name, name=name,
                        url=group_url(activity.cluster, name))
    started = rebalance_start(actor=operator, cluster=activity.cluster.name)
    assert len(started["moves"]) >= 6
    race(owner, activity, started["id"])


@contextmanager
def rereading(cluster: str, monkeypatch) -> Iterator[None]:  # type: ignore[no-untyped-def]
    """Within the block, a thread reading the cluster's placement again, as after a move's
    switch, is held inside that read (once it read the version, opening the groups' stores);
    it finishes when the block ends."""
    inside, go_on = threading.Event(), threading.Event()
    opener = placement.opener

    def held_open(*args):  # type: ignore[no-untyped-def]
        if threading.current_thread().name == "reader":
            inside.set()
            go_on.wait(10)
        return opener(*args)

    def read_again() -> None:
        try:
            placement.view_of(cluster)
        finally:
            connection.close()  # the thread's own

    monkeypatch.setattr(placement, "opener", held_open)
    placement.bump(cluster)  # as a move's switch does
    placement.forget(cluster)
    reader = threading.Thread(target=read_again, name="reader")
    reader.start()
    try:
        assert inside.wait(10)
        yield
    finally:
        go_on.set()
        reader.join(10)


def test_a_look_at_the_placement_while_another_thread_reads_it_again_finds_the_groups(
        operator, activity, monkeypatch):
    grow(operator, activity.cluster, "s2")
    assert isinstance(store_for(activity.cluster), GroupRouter)
    with rereading(activity.cluster.name, monkeypatch):
        assert isinstance(store_for(activity.cluster), GroupRouter)


def test_a_view_read_before_this_process_changed_the_placement_is_read_again(
        operator, activity, monkeypatch):
    """The reader's view, overtaken by this thread's change, is not taken as fresh."""
    grow(operator, activity.cluster, "s2")
    name = activity.cluster.name
    with rereading(name, monkeypatch):
        placement.bump(name)
        placement.forget(name)
    activity.cluster.refresh_from_db()
    assert placement.view_of(name).version == activity.cluster.placement_version


def test_a_view_read_before_a_drain_never_places_a_new_partition_on_the_draining_group(
        operator, owner, activity):
    """Another process's view, read just before the drain began, still has the group active:
    its placement of a new topic is found stale when recorded and made again from the
    groups as they are (else the drain, planned already, would leave it behind)."""
    grow(operator, activity.cluster, "s2", "s3")
    fill(owner, activity, "clicks", [100, 100, 100])
    stale = placement.view_of(activity.cluster.name)
    assert stale is not None and "s3" in stale.active
    started = store_group_drain(actor=operator, cluster=activity.cluster.name, name="s3")
    topic_create(actor=owner, stream=activity, name="late", partitions=3)
    placed = placement.place(stale, activity.uuid, "late", range(3))  # its first write of it
    assert {placed.group_of(activity.uuid, "late", p) for p in range(3)} == {"s1", "s2"}
    assert run_state(ended(started["id"])) == Rebalance.State.SUCCEEDED
    assert not Placement.objects.filter(group__name="s3").exists()
    acked = produced(owner, activity, "late", range(3), "late")
    assert set(acked) <= set(stored(owner, activity, "late", 3))


def test_a_drain_moves_a_partition_placed_on_the_group_but_not_held_there_yet(
        operator, owner, activity, monkeypatch):
    """A placer records its placement, then makes the group hold it: a drain planned in
    between (from what the groups hold) would leave that partition behind."""
    grow(operator, activity.cluster, "s2", "s3")
    fill(owner, activity, "clicks", [100, 100, 100])
    topic_create(actor=owner, stream=activity, name="late", partitions=3)
    hold = placement.hold
    monkeypatch.setattr(placement, "hold", lambda *args: None)  # the placer, paused there
    placement.place(placement.view_of(activity.cluster.name), activity.uuid, "late", range(3))
    monkeypatch.setattr(placement, "hold", hold)
    assert Placement.objects.filter(group__name="s3", topic="late").count() == 1
    started = store_group_drain(actor=operator, cluster=activity.cluster.name, name="s3")
    assert {(m["topic"], m["from"]) for m in started["moves"]} == {("clicks", "s3"),
                                                                   ("late", "s3")}
    assert run_state(ended(started["id"])) == Rebalance.State.SUCCEEDED
    assert not Placement.objects.filter(group__name="s3").exists()
    acked = produced(owner, activity, "late", range(3), "late")
    assert set(acked) <= set(stored(owner, activity, "late", 3))
