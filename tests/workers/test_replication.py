"""Replication end to end through real processes: the replicator and gateways as subprocesses
on the test database, the clusters' stores as PostgreSQL databases. Every data test ends with
the checker: each replica partition is its origin's, no gap, no duplicate, no reordering."""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from portal.rest.rows import replica_rows
from replication.engine.checker import check_replica
from replication.engine.replicator import BatchSpec
from replication.engine.store import Key, Record
from replication.models import ReplicaLink, Stream
from replication.services import (
    replica_add,
    replica_pause,
    replica_resume,
    topic_create,
    upstream_add,
)
from replication.services.cursors import cursor_commit, cursor_list
from replication.services.messages import messages_consume, messages_produce
from replication.stores import store_for
from replication.transport import local_transport, transport
from tests.channel_events import Events, use_redis_layer
from tests.factories import ClusterFactory, GatewayFactory, StreamFactory
from tests.workers.conftest import (
    in_process_engine,
    replicate_with_engine,
    start_gateways,
    wait_until,
)
from workers.replication.applier import batch_serve, tally
from workers.replication.flights import InFlight
from workers.replication.loop import Replicator
from workers.tasks import apply_batch_task

pytestmark = pytest.mark.django_db(transaction=True)


class Producer:
    """Produces numbered messages (an `id` header each) and remembers the acknowledged offsets."""

    def __init__(self, owner, stream: Stream, topic: str = "clicks") -> None:
        self.owner, self.stream, self.topic = owner, stream, topic
        self.sent = 0
        self.acked: dict[Key, set[int]] = {}

    def __call__(self, count: int) -> None:
        records = [Record(value=b"v%d" % i, key=b"k%d" % (i % 7),
                          headers=(("id", b"%s-%d" % (self.stream.path.encode(), i)),))
                   for i in range(self.sent, self.sent + count)]
        offsets = messages_produce(actor=self.owner, stream=self.stream, topic=self.topic,
                                   records=records)
        for partition, offset in offsets:
            self.acked.setdefault((self.topic, partition), set()).add(offset)
        self.sent += count

    def one_by_one(self, count: int) -> None:
        """`count` messages, one per call: a batch store then holds one record per batch, so
        a test about record ranges sees record granularity on either store layout (a batch
        store applies and copies whole batches)."""
        for _ in range(count):
            self(1)


def source_ends(stream: Stream, topic: str = "clicks") -> dict[int, int]:
    """Each partition's high watermark at the stream's store."""
    marks = store_for(stream.cluster).watermarks(stream.uuid, topic)
    return {partition: high for partition, (_low, high) in marks.items()}


def check(origin: Stream, replica: Stream, topics: list[str], **kwargs):
    return check_replica(store_for(origin.cluster), origin.uuid, store_for(replica.cluster),
                         replica.uuid, topics, **kwargs)


def wait_replicated(producer: Producer, replica: Stream, timeout: float = 30) -> None:
    wait_until(lambda: check(producer.stream, replica, [producer.topic]).ok, timeout, every=0.2)
    report = check(producer.stream, replica, [producer.topic], acknowledged=producer.acked)
    assert report.ok, report.summary()


def replica_count(replica: Stream, topic: str = "clicks") -> int:
    try:
        marks = store_for(replica.cluster).watermarks(replica.uuid, topic)
    except Exception:  # the replica's store has not heard of the topic yet
        return 0
    return sum(high - low for low, high in marks.values())


def row_of(source: Stream, replica: Stream) -> dict:
    return next(r for r in replica_rows(source) if r["replicaPath"] == replica.path)


@pytest.fixture
def pair(owner, activity, activity_ny, clicks):
    replica_add(actor=owner, source=activity, replica=activity_ny)
    upstream_add(actor=owner, replica=activity_ny, source=activity)
    return activity, activity_ny


@pytest.fixture
def replicating(gateways, owner, pair):  # type: ignore[no-untyped-def]
    """The pair with the replicator started: (source, replica, a Producer into the source)."""
    source, replica = pair
    gateways.replicator()
    return source, replica, Producer(owner, source)


@pytest.fixture
def gateways(engine, newyork):
    """gw1 and gw2 configured on newyork, started, and live."""
    start_gateways(engine, newyork, "gw1", "gw2")
    return engine


def test_primary_secondary_end_to_end(replicating):
    source, replica, produce = replicating
    for _ in range(5):
        produce(400)
    wait_replicated(produce, replica)
    row = row_of(source, replica)
    assert (row["isUptodate"], row["messagesPending"], row["errors"]) == (True, 0, [])
    assert ReplicaLink.objects.get().last_progress is not None


def test_null_values_reach_the_replica_through_the_gateways_apart_from_empty_ones(
        replicating, owner):
    source, replica, produce = replicating
    values = [None, b"", b"v", None] * 25  # tombstones among empty and plain values
    placed = messages_produce(actor=owner, stream=source, topic="clicks", records=[
        Record(value, headers=(("id", b"null-%d" % i), ("gone", None)), partition=0)
        for i, value in enumerate(values)])
    for partition, offset in placed:
        produce.acked.setdefault(("clicks", partition), set()).add(offset)
    wait_replicated(produce, replica)  # the checker compares every field, values included
    got = store_for(replica.cluster).read(replica.uuid, "clicks", 0, 0)
    assert [m.value for m in got] == values
    assert {m.headers[1] for m in got} == {("gone", None)}


def test_new_data_wakes_the_replicator_promptly(replicating):
    _source, replica, produce = replicating
    produce(1)
    wait_replicated(produce, replica)
    started = time.monotonic()
    produce(10)
    wait_replicated(produce, replica)
    assert time.monotonic() - started < 2.0  # well under the 5 s sweep of these tests


def test_no_data_moves_without_the_upstream_nor_while_paused(gateways, owner, activity,
                                                             activity_ny, clicks):
    gateways.replicator()
    replica_add(actor=owner, source=activity, replica=activity_ny, paused=True)
    produce = Producer(owner, activity)
    produce(100)
    time.sleep(1.5)
    assert replica_count(activity_ny) == 0
    row = row_of(activity, activity_ny)
    assert row["waitingForUpstream"] and row["messagesPending"] == 100
    assert not row["isUptodate"]
    upstream_add(actor=owner, replica=activity_ny, source=activity)  # agreed, but paused
    produce(100)
    time.sleep(1.5)
    assert replica_count(activity_ny) == 0
    replica_resume(actor=owner, source=activity, replica=activity_ny)
    wait_replicated(produce, activity_ny)
    replica_pause(actor=owner, source=activity, replica=activity_ny)
    produce(100)
    time.sleep(1.5)
    assert replica_count(activity_ny) == 200
    assert row_of(activity, activity_ny)["messagesPending"] == 100
    replica_resume(actor=owner, source=activity, replica=activity_ny)  # from the cursor on
    wait_replicated(produce, activity_ny)


def start_replicator_without_timers(engine) -> None:
    """Retry and sweep timers far away: only a wake-up can start a link in time."""
    engine.env.update(STREAMGATE_RETRY_SECONDS="60", STREAMGATE_SWEEP_SECONDS="60")
    engine.replicator()
    wait_until(lambda: "replicator running" in engine.log("replicator"), timeout=30)
    time.sleep(0.5)  # past its first step, whose sweep would find every moving link


def replicated_within(produce: Producer, replica: Stream) -> float:
    started = time.monotonic()
    wait_replicated(produce, replica, timeout=10)
    return time.monotonic() - started


def test_upstream_add_and_resume_wake_the_replicator(gateways, owner, activity, activity_ny,
                                                     clicks):
    replica_add(actor=owner, source=activity, replica=activity_ny)
    start_replicator_without_timers(gateways)
    produce = Producer(owner, activity)
    produce(100)
    time.sleep(0.5)
    assert replica_count(activity_ny) == 0  # no upstream yet: no agreement
    upstream_add(actor=owner, replica=activity_ny, source=activity)
    assert replicated_within(produce, activity_ny) < 1.5
    replica_pause(actor=owner, source=activity, replica=activity_ny)
    produce(100)
    time.sleep(0.5)
    assert replica_count(activity_ny) == 100
    replica_resume(actor=owner, source=activity, replica=activity_ny)
    assert replicated_within(produce, activity_ny) < 1.5


def cursors_of(owner, stream: Stream, group: str = "g") -> dict[int, int]:
    return {c["partition"]: c["offset"]
            for c in cursor_list(actor=owner, stream=stream, topic="clicks", group=group)}


def highs(stream: Stream) -> dict[int, int]:
    marks = store_for(stream.cluster).watermarks(stream.uuid, "clicks")
    return {p: high for p, (_low, high) in marks.items()}


def commit_all(owner, stream: Stream, offsets: dict[int, int]) -> None:
    for partition, offset in offsets.items():
        cursor_commit(actor=owner, stream=stream, group="g", topic="clicks",
                      partition=partition, offset=offset)


def test_committed_cursors_follow_the_data_and_never_pass_the_replica_end(
        gateways, owner, replicating):
    source, replica, produce = replicating
    produce(300)
    wait_replicated(produce, replica)
    mid = {p: high // 2 for p, high in highs(source).items()}
    commit_all(owner, source, mid)
    wait_until(lambda: cursors_of(owner, replica) == mid, timeout=5)
    for name in ("gw1", "gw2"):
        gateways.stop(f"gw-newyork-{name}")  # data stops moving; cursors still do
    produce(300)
    ends = highs(source)
    commit_all(owner, source, ends)
    old_ends = highs(replica)
    wait_until(lambda: cursors_of(owner, replica) == old_ends, timeout=5)  # clamped
    time.sleep(0.5)
    assert cursors_of(owner, replica) == old_ends
    gateways.gateway("newyork", "gw1")
    wait_replicated(produce, replica)
    wait_until(lambda: cursors_of(owner, replica) == ends, timeout=10)  # caught up with data


def test_a_cursor_commit_reaches_the_replica_by_its_own_wake_up(gateways, owner, pair):
    """Produces' wake-ups move data without copying cursors; a commit's wake-up (marked
    CURSORS_CHANGED) copies them, with no sweep or retry timer to fall back on."""
    source, replica = pair
    start_replicator_without_timers(gateways)
    produce = Producer(owner, source)
    produce(200)
    wait_replicated(produce, replica)
    for n in (1, 2):
        offsets = {p: high * n // 3 for p, high in highs(source).items()}
        started = time.monotonic()
        commit_all(owner, source, offsets)
        wait_until(lambda o=offsets: cursors_of(owner, replica) == o, timeout=5, every=0.05)
        assert time.monotonic() - started < 2.0  # a wake-up, not the 60 s timers


def consume_ids(owner, stream: Stream, partition: int, start: int, end: int) -> list[bytes]:
    ids: list[bytes] = []
    while start < end:
        batch = messages_consume(actor=owner, stream=stream, topic="clicks",
                                 partition=partition, offset=start, limit=end - start)
        ids += [dict(m.headers)["id"] for m in batch]
        start = batch[-1].offset + 1
    return ids


def test_a_consumer_group_fails_over_to_the_replica_at_its_committed_offsets(owner, replicating):
    source, replica, produce = replicating
    produce(600)
    seen: list[bytes] = []
    halves = {p: high // 2 for p, high in highs(source).items()}
    for partition, half in halves.items():  # the consumer reads half, then commits
        seen += consume_ids(owner, source, partition, 0, half)
    commit_all(owner, source, halves)
    wait_replicated(produce, replica)
    wait_until(lambda: cursors_of(owner, replica) == halves, timeout=5)
    for partition, high in highs(replica).items():  # the source is gone: fail over
        seen += consume_ids(owner, replica, partition, cursors_of(owner, replica)[partition],
                            high)
    expected = {b"%s-%d" % (source.path.encode(), i) for i in range(600)}
    assert len(seen) == 600 and set(seen) == expected  # each message exactly once


def test_a_throttled_link_keeps_to_its_rate_and_delays_no_other(gateways, owner, newyork,
                                                                 activity, activity_ny, clicks):
    archive = StreamFactory(cluster=newyork, name="archive", created_by=owner)
    replica_add(actor=owner, source=activity, replica=activity_ny, throttle=True)
    replica_add(actor=owner, source=activity, replica=archive)
    for replica in (activity_ny, archive):
        upstream_add(actor=owner, replica=replica, source=activity)
    gateways.env["STREAMGATE_THROTTLE_MESSAGES_PER_S"] = "500"
    gateways.replicator()
    wait_until(lambda: "replicator running" in gateways.log("replicator"), timeout=30)
    produce = Producer(owner, activity)
    started = time.monotonic()
    for _ in range(100):
        # Small produces: a batch store applies whole batches, so a cut may overshoot by one
        # batch a partition; 3000 records in one produce would be three batches, all a burst.
        produce(30)
    produced = time.monotonic()
    wait_replicated(produce, archive, timeout=10)
    throttled = replica_count(activity_ny)
    elapsed = time.monotonic() - started
    assert time.monotonic() - produced < 1.5  # the unthrottled replica kept up meanwhile
    # A one-second burst, then 500 messages a second (plus at most a 30-record batch).
    assert throttled <= 500 * (1 + elapsed) + 30
    wait_replicated(produce, activity_ny, timeout=20)
    assert time.monotonic() - started >= 3000 / 500 - 1 - 0.5  # minus the burst, and slack


def test_a_gateway_killed_mid_stream_loses_nothing(gateways, replicating):
    _source, replica, produce = replicating
    done = threading.Event()

    def keep_producing() -> None:
        for _ in range(30):
            produce(200)
            time.sleep(0.02)
        done.set()

    thread = threading.Thread(target=keep_producing)
    thread.start()
    wait_until(lambda: replica_count(replica) > 0, timeout=30, every=0.05)
    gateways.stop("gw-newyork-gw1", kill=True)  # SIGKILL while batches are being applied
    thread.join(timeout=60)
    assert done.is_set()
    wait_replicated(produce, replica, timeout=45)
    assert produce.sent == 6000


def test_all_gateways_down_then_one_comes_back(gateways, replicating, settings):
    source, replica, produce = replicating
    produce(100)
    wait_replicated(produce, replica)
    for name in ("gw1", "gw2"):
        gateways.processes[f"gw-newyork-{name}"].send_signal(signal.SIGKILL)
    produce(300)

    def waiting() -> bool:
        return "waiting: no live gateway on cluster newyork" in row_of(source, replica)["errors"]

    wait_until(waiting, timeout=20, every=0.2)
    settings.REPLICATION_STALL_SECONDS = 1
    wait_until(lambda: any(e.startswith("stalled: ") for e in row_of(source, replica)["errors"]),
               timeout=10, every=0.2)
    stuck = row_of(source, replica)
    assert stuck["messagesPending"] > 0 and stuck["stalled"] is True
    assert stuck["timeLag"] > 0 and not stuck["isUptodate"]
    gateways.stop("gw-newyork-gw1")
    gateways.gateway("newyork", "gw1")  # a new incarnation: trusted again at once
    wait_replicated(produce, replica)
    wait_until(lambda: row_of(source, replica)["errors"] == [], timeout=10)
    caught_up = row_of(source, replica)
    assert (caught_up["stalled"], caught_up["timeLag"], caught_up["isUptodate"]) == (False, 0, True)


def test_an_apply_error_shows_in_replica_list_with_its_gateway(engine, owner, newyork, pair):
    source, replica = pair
    link = ReplicaLink.objects.get()
    Producer(owner, source)(10)
    replicator = Replicator(transport())
    key = (link.pk, "clicks", 7)
    flights = replicator.dispatcher.flights
    flights.add(key, InFlight(link_spec(link, 7), ("newyork", "gw2"), "", 1e12, "t1"))
    # A partition the source does not have: the gateway refuses the batch and says why.
    assert apply_batch_task(link.pk, "clicks", 7, 0, 10, gateway="newyork/gw2", ticket="t1") == 0
    replicator._on_acks(wait_acks(1), 0.0)
    assert row_of(source, replica)["errors"] == [
        "StoreError: clicks:7 does not exist at the source (gateway gw2)"]
    assert link.pk in replicator.retry and not flights  # retried later, not spun
    assert tally.take(("newyork", "gw2"))["errors"] == 1


def link_spec(link: ReplicaLink, partition: int) -> BatchSpec:
    return BatchSpec(link.source.uuid, link.replica.uuid, "clicks", partition, 0, 10)


def test_a_redelivered_batch_applies_once(owner, pair):
    source, replica = pair
    link = ReplicaLink.objects.get()
    produce = Producer(owner, source)
    produce(90)
    ends = source_ends(source)
    for partition, end in ends.items():
        assert apply_batch_task(link.pk, "clicks", partition, 0, end) == end
        assert apply_batch_task(link.pk, "clicks", partition, 0, end) == 0  # redelivered
        assert apply_batch_task(link.pk, "clicks", partition, 5, end) == 0  # overlapping
    report = check(source, replica, ["clicks"], acknowledged=produce.acked)
    assert report.ok, report.summary()


def test_two_gateways_racing_on_one_batch_apply_it_once(gateways, owner, pair):
    source, replica = pair
    link = ReplicaLink.objects.get()
    produce = Producer(owner, source)
    produce(1500)
    ends = store_for(source.cluster).watermarks(source.uuid, "clicks")
    applied = []
    for start in range(0, max(high for _low, high in ends.values()), 100):
        # Round by round, the same batch of every partition to both gateways at once.
        tickets = set()
        for partition, (_low, high) in ends.items():
            for name in ("gw1", "gw2") if start < high else ():
                tickets.add(ticket := uuid.uuid4().hex)
                apply_batch_task.apply_async(
                    args=(link.pk, "clicks", partition, start, min(start + 100, high)),
                    kwargs={"gateway": f"newyork/{name}", "ticket": ticket},
                    queue=f"{gateways.namespace}gw.newyork.{name}")
        acks = wait_acks(len(tickets))
        assert {a["ticket"] for a in acks} == tickets
        assert not [a["error"] for a in acks if a.get("error")]
        applied += [a["applied"] for a in acks]
    assert sum(applied) == 1500  # each message applied by one of the two, never both
    report = check(source, replica, ["clicks"], acknowledged=produce.acked)
    assert report.ok, report.summary()


def wait_acks(count: int, timeout: float = 20) -> list[dict]:
    acks: list[dict] = []
    deadline = time.monotonic() + timeout
    while len(acks) < count and time.monotonic() < deadline:
        acks += transport().inbox.wait(0.5).acks
    return acks


def test_intracluster_replication(engine, owner, sanfrancisco, activity, clicks):
    activity2 = StreamFactory(cluster=sanfrancisco, name="activity2", created_by=owner)
    replicate_with_engine(engine, owner, activity, activity2)
    produce = Producer(owner, activity)
    produce(500)
    wait_replicated(produce, activity2)


def test_a_chain_forwards_replicated_messages(gateways, owner, newyork, pair):
    """sanfrancisco/activity -> newyork/activity -> newyork/archive: the middle stream's own
    replica moves on as soon as a gateway applies to it (the gateway wakes the source side)."""
    source, middle = pair
    archive = StreamFactory(cluster=newyork, name="archive", created_by=owner)
    replica_add(actor=owner, source=middle, replica=archive)
    upstream_add(actor=owner, replica=archive, source=middle)
    gateways.replicator()
    produce = Producer(owner, source)
    for _ in range(3):
        produce(300)
    wait_replicated(produce, middle)
    wait_until(lambda: check(source, archive, ["clicks"]).ok, timeout=30, every=0.2)
    report = check(source, archive, ["clicks"], acknowledged=produce.acked)
    assert report.ok, report.summary()


def test_multi_master_pair_keeps_each_message_once_in_both(gateways, owner, sanfrancisco,
                                                           activity, activity_ny):
    GatewayFactory(cluster=sanfrancisco, name="gw1")
    gateways.gateway("sanfrancisco", "gw1")
    for source, replica in ((activity, activity_ny), (activity_ny, activity)):
        replica_add(actor=owner, source=source, replica=replica)
        upstream_add(actor=owner, replica=replica, source=source)
    gateways.replicator()
    west, east = Producer(owner, activity, "west"), Producer(owner, activity_ny, "east")
    for _ in range(3):
        west(200)
        east(150)
    wait_replicated(west, activity_ny)
    wait_replicated(east, activity)
    time.sleep(1.0)  # time enough for anything sent back to show
    # Nothing came back: each stream holds its own topic's messages once, as produced.
    assert replica_count(activity, "west") == 600 and replica_count(activity_ny, "east") == 450
    ways = ((activity, activity_ny, "west"), (activity_ny, activity, "east"))
    for origin, replica, topic in ways:
        report = check(origin, replica, [topic])
        assert report.ok and report.checked == replica_count(origin, topic), report.summary()


def test_embedded_mode_replicates_in_process(owner, newyork, pair, settings):
    """`make run`: no Redis, the configured gateways live in the process, batches apply
    eagerly in the replicator's thread (here, the test's)."""
    source, replica = pair
    with in_process_engine(settings, newyork) as signals:
        replicator = Replicator(signals)
        produce = Producer(owner, source)
        produce(700)
        deadline = time.monotonic() + 20
        while not check(source, replica, ["clicks"]).ok and time.monotonic() < deadline:
            replicator.step()
    report = check(source, replica, ["clicks"], acknowledged=produce.acked)
    assert report.ok, report.summary()
    assert row_of(source, replica)["isUptodate"]


def test_a_restarted_replica_database_loses_and_duplicates_nothing(engine, owner, activity,
                                                                   clicks, private_postgres):
    tokyo = ClusterFactory(name="tokyo", store_url=private_postgres.url("tokyo_store"))
    store_for(tokyo)
    replica = StreamFactory(cluster=tokyo, name="activity", created_by=owner)
    replicate_with_engine(engine, owner, activity, replica)
    produce = Producer(owner, activity)
    produce(200)
    # The engine moving first: else the whole produce may be written before the first batch.
    wait_until(lambda: replica_count(replica) == 200, timeout=30, every=0.05)
    thread = threading.Thread(target=lambda: [produce(200) or time.sleep(0.05)
                                              for _ in range(19)])
    thread.start()
    wait_until(lambda: replica_count(replica) > 200, timeout=30, every=0.05)
    assert replica_count(replica) < 4000  # mid-stream
    private_postgres.stop("immediate")  # a crash: connections cut mid-transaction
    time.sleep(1.0)
    private_postgres.start()
    thread.join(timeout=60)

    def caught_up() -> bool:
        try:
            return check(activity, replica, ["clicks"]).ok
        except Exception:  # this process's pooled connections die with the server, once
            return False

    wait_until(caught_up, timeout=45, every=0.3)
    report = check(activity, replica, ["clicks"], acknowledged=produce.acked)
    assert report.ok and produce.sent == 4000, report.summary()


# --- windows of batches in flight, cached links, lag events, the catch-up hand-off ------------


def in_process_replicator(settings) -> Replicator:
    """The replicator as an object of the test, stepped by hand, beside real gateways."""
    settings.REPLICATION_BATCH_MESSAGES = 200
    settings.REPLICATION_WINDOW = 4
    return Replicator(transport())


def step_until(replicator: Replicator, done, timeout: float = 30) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "timed out stepping the replicator"
        replicator.step()


def test_a_partition_keeps_a_window_of_consecutive_batches_at_one_gateway(gateways, owner, pair,
                                                                          settings):
    source, replica = pair
    replicator = in_process_replicator(settings)
    produce = Producer(owner, source)
    produce(3000)
    replicator.step()  # the first step sweeps: every partition's window fills at once
    ends = highs(source)
    for partition, high in ends.items():
        flights = replicator.dispatcher.flights.inflight[(pair_link().pk, "clicks", partition)]
        starts = [(f.spec.start, f.spec.end) for f in flights]
        assert starts == [(s, min(s + 200, high)) for s in range(0, 800, 200)][:len(starts)]
        assert len(starts) == min(4, high // 200)  # full batches only while others fly
        assert len({f.gateway for f in flights}) == 1
    step_until(replicator, lambda: check(source, replica, ["clicks"]).ok)
    wait_replicated(produce, replica)


def pair_link() -> ReplicaLink:
    return ReplicaLink.objects.get()


def test_a_gateway_killed_with_windows_in_flight_loses_nothing(gateways, owner, activity,
                                                               activity_ny, clicks):
    replica_add(actor=owner, source=activity, replica=activity_ny, paused=True)
    upstream_add(actor=owner, replica=activity_ny, source=activity)
    produce = Producer(owner, activity)
    for _ in range(15):
        produce(600)  # 9,000 messages: 15 batches of 200 per partition on average
    gateways.replicator()
    wait_until(lambda: "replicator running" in gateways.log("replicator"), timeout=30)
    replica_resume(actor=owner, source=activity, replica=activity_ny)
    wait_until(lambda: replica_count(activity_ny) > 0, timeout=30, every=0.02)
    gateways.stop("gw-newyork-gw1", kill=True)  # SIGKILL with several batches queued to it
    assert replica_count(activity_ny) < 9000  # mid catch-up
    wait_replicated(produce, activity_ny, timeout=45)


def test_a_batch_ahead_of_its_predecessor_waits_for_it_and_a_lost_one_is_refused(owner, pair):
    source, replica = pair
    link = pair_link()
    produce = Producer(owner, source)
    produce.one_by_one(300)
    high = highs(source)[0]
    half = high // 2
    later: list[int] = []
    ahead = threading.Thread(target=lambda: later.append(batch_serve(
        link_id=link.pk, topic="clicks", partition=0, start=half, end=high)))
    ahead.start()
    time.sleep(0.01)
    assert batch_serve(link_id=link.pk, topic="clicks", partition=0, start=0, end=half) == half
    ahead.join()
    assert later == [high - half]  # applied after waiting, not refused
    produce.one_by_one(300)
    beyond = highs(source)[0]
    inbox = uuid.uuid4().hex
    assert batch_serve(link_id=link.pk, topic="clicks", partition=0, start=beyond - 1,
                       end=beyond, tickets=["lost"], reply_to=inbox) == 0
    # Its predecessor never comes: refused, and the sender re-plans.
    (ack,) = transport().inbox.wait(1.0, inbox).acks
    assert ack["misordered"] and ack["ticket"] == "lost"
    assert highs(replica)[0] == high


def test_acknowledgements_plan_from_cached_links_and_link_changes_refresh_them(
        gateways, owner, pair, settings, django_assert_num_queries):
    source, replica = pair
    replicator = in_process_replicator(settings)
    produce = Producer(owner, source)
    produce(300)
    step_until(replicator, lambda: check(source, replica, ["clicks"]).ok)
    link = pair_link()
    replicator.dirty_links.add(link.pk)  # as an acknowledgement does
    replicator._gateways_read = replicator.clock()
    with django_assert_num_queries(0):  # no control-database query to plan a cached link
        replicator._plan(replicator.clock())
    replica_pause(actor=owner, source=source, replica=replica)  # a marked wake-up
    step_until(replicator, lambda: link.pk not in replicator.cache, timeout=5)
    replica_resume(actor=owner, source=source, replica=replica)
    step_until(replicator, lambda: link.pk in replicator.cache, timeout=5)


@pytest.fixture
def events(gateways, settings) -> Iterator[Events]:
    """Events on the channel layer the gateway processes publish to (their namespace's prefix);
    the replicator runs in this process, on the same settings."""
    use_redis_layer(settings, f"{gateways.namespace}asgi")
    with Events() as events:
        yield events


def test_replica_lag_events_tell_both_tenants_once_a_second(gateways, owner, pair, settings,
                                                            events):
    source, replica = pair
    for tenant in {source.tenant_id, replica.tenant_id}:
        events.join(tenant)
    replicator = in_process_replicator(settings)
    produce = Producer(owner, source)
    produce(2000)
    started = time.monotonic()
    step_until(replicator, lambda: check(source, replica, ["clicks"]).ok)
    # Until the caught-up event is out.
    step_until(replicator, lambda: not replicator.lag_events.lagging, timeout=5)
    took = time.monotonic() - started
    lags = [payload for event, payload in events.drain() if event == "replica.lag"]
    link = pair_link()
    assert lags[0]["messagesPending"] > 0 and lags[0]["bytesPending"] > 0
    assert lags[0]["timeLagMs"] >= 0
    assert lags[-1] == {"link": link.pk, "source": source.pk, "replica": replica.pk,
                        "messagesPending": 0, "bytesPending": 0, "timeLagMs": 0,
                        "stalled": False}
    assert len(lags) <= took + 2  # at most about one a second


def test_a_backlog_past_the_threshold_goes_to_the_catchup_job_when_it_takes_it(
        gateways, owner, pair, settings, monkeypatch):
    source, replica = pair
    settings.REPLICATION_CATCHUP_THRESHOLD = 100
    # The job does not take it (none can run): the link is planned as usual.
    monkeypatch.setattr("workers.replication.loop.catchup_request", lambda *, link_id: False)
    replicator = in_process_replicator(settings)
    produce = Producer(owner, source)
    produce(600)
    replicator.step()
    assert replicator.dispatcher.flights.inflight and not replicator.handed_off
    # Until every acknowledgement is in too (a batch store applies a partition's backlog as one
    # batch, whose acknowledgement may come a step after the replica holds it).
    step_until(replicator, lambda: check(source, replica, ["clicks"]).ok
               and not replicator.dispatcher.flights.inflight)
    asked: list[int] = []
    monkeypatch.setattr("workers.replication.loop.catchup_request",
                        lambda *, link_id: asked.append(link_id) or True)
    produce(600)
    link = pair_link()
    step_until(replicator, lambda: asked == [link.pk], timeout=5)
    assert link.pk in replicator.handed_off and not replicator.dispatcher.flights.inflight
    # An acknowledgement alone does not plan it again; the retry tick and the sweep would (by
    # design), so neither is due here, whenever the hand-off happened in their cycle.
    now = replicator.clock()
    replicator.next_retry = replicator.next_sweep = now + 60
    replicator.dirty_links.add(link.pk)
    replicator._plan(now)
    assert asked == [link.pk]
    produce(1)  # a wake-up of its source stream does
    step_until(replicator, lambda: len(asked) == 2, timeout=5)
    assert replica_count(replica) == 600


def test_an_acknowledgement_restarts_the_timeout_of_the_batches_queued_behind_it(settings):
    settings.REPLICATION_ACK_TIMEOUT = 10.0
    replicator = Replicator(local_transport())
    key = (1, "clicks", 0)
    spec = BatchSpec(uuid.uuid4(), uuid.uuid4(), "clicks", 0, 0, 100)
    gateway = ("newyork", "gw1")
    flights = replicator.dispatcher.flights
    flights.add(key, InFlight(spec, gateway, "", 10.0, "a"))
    flights.add(key, InFlight(spec, gateway, "", 10.0, "b"))
    replicator._on_acks([{"ticket": "a", "applied": 100}], 9.0)
    (behind,) = flights.of(key)
    assert (behind.ticket, behind.deadline) == ("b", 19.0)  # a slow gateway is not a dead one
    replicator._on_acks([{"ticket": "b", "error": "refused", "misordered": True}], 9.5)
    assert not flights.inflight and not flights.tickets and 1 in replicator.dirty_links


def test_a_topic_created_later_travels_down_a_chain_without_waiting_for_a_timer(gateways, owner,
                                                                                newyork, pair):
    source, middle = pair
    archive = StreamFactory(cluster=newyork, name="archive", created_by=owner)
    replica_add(actor=owner, source=middle, replica=archive)
    upstream_add(actor=owner, replica=archive, source=middle)
    start_replicator_without_timers(gateways)
    topic_create(actor=owner, stream=source, name="views", partitions=2)
    produce = Producer(owner, source, "views")
    produce(200)
    # The middle stream's topic comes by a bulk insert: its cached links are read again when
    # the data wakes it, well before the 60 s sweep or the 5 s safety net.
    wait_until(lambda: check(source, archive, ["views"]).ok, timeout=4, every=0.1)
