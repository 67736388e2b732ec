"""Replication between stores: planning, gateway apply, topologies, crashes (conftest.Net).

Every test ends with the checker: each replica partition is its origin's, exactly once, in
order, unchanged (invariants 1-3)."""

import contextlib
import itertools
import multiprocessing
import os
import signal
import threading
import uuid

import pytest

from replication.engine import Misordered, Record, open_store
from replication.engine.replicator import (
    BatchSpec,
    apply_spec,
    backlog,
    cut_batches,
    pending,
    plan_batches,
    replica_positions,
    sync_cursors,
)
from replication.engine.store import ReturnToOrigin, headers_size, now_ms
from tests.replication.engine.conftest import wait_for_session


def _partitions(net, name, topic):
    store, stream = net.store(name), net.id(name)
    return {
        p: store.read(stream, topic, p, low, limit=high - low + 1, max_bytes=1 << 30)
        for p, (low, high) in store.watermarks(stream, topic).items()
    }


# --- topologies --------------------------------------------------------------------------------


def test_primary_secondary_copies_every_partition_exactly(net):
    net.add("A", "B")
    net.produce("A", "clicks", 600, partitions=4)
    net.produce("A", "orders", 50, partitions=1, size=3000)
    assert net.pump("A", "B", max_messages=64) == 650
    for topic in ("clicks", "orders"):
        # Same partitions, offsets, keys, values, headers, timestamps, origin and producer.
        assert _partitions(net, "B", topic) == _partitions(net, "A", topic)
    assert net.plan("A", "B") == []
    assert net.assert_replica("A", "B").checked == 650


def test_chain_and_fan_out(net):
    net.add("A", "B", "C", "D", "E")
    net.produce("A", "a", 500)
    for src, dst in (("A", "B"), ("B", "C"), ("A", "D"), ("A", "E")):
        net.pump(src, dst, max_messages=100)
    net.produce("A", "a", 100)  # a second wave travels the chain as well
    for src, dst in (("A", "B"), ("B", "C"), ("A", "D"), ("A", "E")):
        net.pump(src, dst)
    for replica in "BCDE":
        assert net.assert_replica("A", replica).checked == 600


def test_fan_in_diamond_applies_each_message_once(net):
    """A->B, A->C, B->D, C->D: topic a reaches D by two links, whose batches interleave."""
    net.add("A", "B", "C", "D")
    net.produce("A", "a", 900)
    net.pump("A", "B")
    net.pump("A", "C", max_messages=50)
    net.produce("A", "a", 300)
    net.pump("A", "C")  # C is now ahead of B
    applied = 0
    for _ in range(50):
        via_b, via_c = net.plan("B", "D", max_messages=70), net.plan("C", "D", max_messages=40)
        if not via_b and not via_c:
            break
        applied += sum(
            _apply_or_replan(net, spec, link) for spec, link in _interleave(via_b, via_c)
        )
    assert applied == 1200  # each message written once, whichever link brought it
    net.assert_replica("A", "D")


def _interleave(via_b, via_c):
    pairs = itertools.zip_longest([(s, "B->D") for s in via_b], [(s, "C->D") for s in via_c])
    return [item for pair in pairs for item in pair if item is not None]


def _apply_or_replan(net, spec, link) -> int:
    src = link.split("->")[0]
    # Refused when the other link has not filled the gap yet: the next plan starts at D's end.
    with contextlib.suppress(Misordered):
        return apply_spec(net.store(src), net.store("D"), spec, link=link).count
    return 0


def test_fan_in_diamond_with_concurrent_links(pg_net):
    net = pg_net
    net.add("A", "B", "C", "D")
    net.produce("A", "a", 3000, partitions=2)
    net.pump("A", "B")
    net.pump("A", "C")
    errors: list[BaseException] = []
    applied: list[int] = []

    def link(src: str) -> None:
        try:
            applied.append(net.pump(src, "D", max_messages=97))
        except BaseException as error:  # surfaced below
            errors.append(error)

    threads = [threading.Thread(target=link, args=(src,)) for src in "BC"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == [] and sum(applied) == 3000
    net.assert_replica("A", "D")


def test_multi_master_pair_never_sends_a_topic_back(net):
    net.add("A", "B")
    for wave in range(3):
        net.produce("A", "a", 120)
        net.produce("B", "b", 80, partitions=2)
        for src, dst in (("A", "B"), ("B", "A")):
            plan = net.plan(src, dst, max_messages=30)
            # Invariant 3: only the topic originating at the source side travels.
            assert {s.topic for s in plan} == {"a" if src == "A" else "b"}
            net.pump(src, dst, max_messages=30)
        assert net.plan("B", "A") == net.plan("A", "B") == [], wave
    assert net.assert_replica("A", "B").checked == 360
    assert net.assert_replica("B", "A").checked == 240
    assert net.topics("A") == net.topics("B") == {"a": net.id("A"), "b": net.id("B")}


def test_ring_of_three_with_a_topic_per_stream(net):
    net.add("A", "B", "C")
    ring = (("A", "B"), ("B", "C"), ("C", "A"))
    for name in "ABC":
        net.produce(name, name.lower(), 200)
    for _ in range(3):  # a topic needs two hops to go round
        for src, dst in ring:
            net.pump(src, dst, max_messages=64)
    for src, dst in ring:
        assert net.plan(src, dst) == []
    for origin, replica in itertools.permutations("ABC", 2):
        net.assert_replica(origin, replica)
    # C received a from B and never sends it on to A, its origin.
    assert {s.topic for s in net.plan("C", "A")} == set()


def test_apply_batch_refuses_to_carry_messages_back_to_their_origin(net):
    net.add("A", "B")
    net.produce("A", "a", 10, partitions=1)
    net.pump("A", "B")
    back = BatchSpec(net.id("B"), net.id("A"), "a", 0, 0, 10)
    with pytest.raises(ReturnToOrigin):
        apply_spec(net.store("B"), net.store("A"), back, link="B->A")
    assert net.store("A").watermarks(net.id("A"), "a") == {0: (0, 10)}
    net.assert_replica("A", "B")


# --- redelivery, ordering, concurrency, crashes -------------------------------------------------


def test_redelivered_batch_is_applied_once(net):
    net.add("A", "B")
    net.produce("A", "a", 300, partitions=1)
    (spec,) = net.plan("A", "B")
    counts = [apply_spec(net.store("A"), net.store("B"), spec, link="l").count for _ in range(3)]
    assert counts == [300, 0, 0]
    net.assert_replica("A", "B")


def test_out_of_order_batches_are_refused_then_replanned(net):
    net.add("A", "B")
    net.produce("A", "a", 300, partitions=1)
    first, second, third = net.plan("A", "B", max_messages=100)
    src, dst = net.store("A"), net.store("B")
    with pytest.raises(Misordered) as caught:
        apply_spec(src, dst, second, link="l")
    assert (caught.value.expected, caught.value.got) == (0, 100)
    assert net.check("A", "B", require_caught_up=False).ok  # nothing was written
    assert apply_spec(src, dst, first, link="l").count == 100
    with pytest.raises(Misordered):
        apply_spec(src, dst, third, link="l")
    replanned = net.plan("A", "B", max_messages=100)
    assert replanned == [second, third]
    assert [apply_spec(src, dst, spec, link="l").count for spec in replanned] == [100, 100]
    net.assert_replica("A", "B")


def test_threads_applying_one_batch_store_it_once(net):
    net.add("A", "B")
    net.produce("A", "a", 2000, partitions=1)
    (spec,) = net.plan("A", "B")
    barrier, counts = threading.Barrier(4), []

    def gateway() -> None:
        barrier.wait()
        counts.append(apply_spec(net.store("A"), net.store("B"), spec, link="l").count)

    threads = [threading.Thread(target=gateway) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(counts) == [0, 0, 0, 2000]
    net.assert_replica("A", "B")


def _gateway(source_url, replica_url, spec, barrier, results) -> None:
    source, replica = open_store(source_url), open_store(replica_url)
    try:
        barrier.wait(30)
        results.put(apply_spec(source, replica, spec, link="l").count)
    finally:
        source.close()
        replica.close()


def test_processes_applying_one_batch_store_it_once(net):
    net.add("A", "B")
    net.produce("A", "a", 3000, partitions=1)
    (spec,) = net.plan("A", "B")
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    args = (net.url("A"), net.url("B"), spec, barrier, results)
    procs = [ctx.Process(target=_gateway, args=args) for _ in range(2)]
    for p in procs:
        p.start()
    counts = sorted(results.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(30)
    assert counts == [0, 3000]
    net.assert_replica("A", "B")


def _doomed_gateway(source_url, replica_url, spec) -> None:
    source, replica = open_store(source_url), open_store(replica_url)
    apply_spec(source, replica, spec, link="doomed")


def test_gateway_killed_mid_batch_leaves_a_prefix(pg_net):
    net = pg_net
    net.add("A", "B")
    net.produce("A", "a", 1000, partitions=1)
    net.pump("A", "B")
    # A big batch, so the gateway spends a while inside its transaction.
    placed = net.store("A").append(
        net.id("A"), "a", [Record(b"x" * 200)] * 60_000, origin=net.id("A")
    )
    net.acked["a"][("a", 0)].update(offset for _, offset in placed)
    (spec,) = net.plan("A", "B", max_messages=1_000_000, max_bytes=1 << 30)
    ctx = multiprocessing.get_context("spawn")
    doomed = ctx.Process(target=_doomed_gateway, args=(net.url("A"), net.url("B"), spec))
    doomed.start()
    # The gateway is inside its apply transaction.
    wait_for_session(net.url("B"), "state = 'active' AND query LIKE 'COPY messages%'",
                     "the gateway never began writing")
    os.kill(doomed.pid, signal.SIGKILL)
    doomed.join(10)
    assert net.store("B").watermarks(net.id("B"), "a") == {0: (0, 1000)}
    net.assert_replica("A", "B", require_caught_up=False)
    assert net.pump("A", "B") == 60_000
    net.assert_replica("A", "B")


# --- growth, retention, backlog -----------------------------------------------------------------


def test_topics_and_partitions_added_later_are_replicated(net):
    net.add("A", "B")
    net.produce("A", "a", 100, partitions=2)
    net.pump("A", "B")
    net.produce("A", "a", 100, partitions=5)  # grows the topic
    net.produce("A", "late", 40, partitions=2)  # a topic created after replication began
    assert {(s.topic, s.partition) for s in net.plan("A", "B")} >= {("a", 4), ("late", 1)}
    net.pump("A", "B")
    assert net.store("B").partitions(net.id("B"), "a") == 5
    net.assert_replica("A", "B")


def test_fresh_replica_of_an_expired_origin_starts_at_its_low_watermark(net):
    net.add("A", "B", "C")
    store, a = net.store("A"), net.id("A")
    store.ensure_topic(a, "a", 1)
    net.origins["a"] = a
    old = [Record(b"old", timestamp_ms=1)] * 1000
    young = [Record(b"young %d" % i, timestamp_ms=now_ms()) for i in range(500)]
    store.append(a, "a", old + young, origin=a)
    while store.expire(a, before_ms=2):
        pass
    assert store.watermarks(a, "a") == {0: (1000, 1500)}
    net.pump("A", "B", max_messages=200)
    net.pump("B", "C")  # and B's replica starts where B does
    for replica in "BC":
        assert net.store(replica).watermarks(net.id(replica), "a") == {0: (1000, 1500)}
        assert net.assert_replica("A", replica).checked == 500
        assert _partitions(net, replica, "a") == _partitions(net, "A", "a")


def test_lagging_replica_whose_next_messages_expired_is_refused(net):
    net.add("A", "B")
    store, a = net.store("A"), net.id("A")
    store.ensure_topic(a, "a", 1)
    net.origins["a"] = a
    store.append(a, "a", [Record(b"old", timestamp_ms=1)] * 100, origin=a)
    first = net.plan("A", "B", max_messages=40)[0]
    apply_spec(store, net.store("B"), first, link="l")  # B holds 0..39
    store.append(a, "a", [Record(b"new", timestamp_ms=now_ms())] * 10, origin=a)
    while store.expire(a, before_ms=2):
        pass
    with pytest.raises(Misordered) as caught:  # 40..99 are gone: a gap, never papered over
        net.pump("A", "B")
    assert (caught.value.expected, caught.value.got) == (40, 100)
    assert net.store("B").watermarks(net.id("B"), "a") == {0: (0, 40)}
    assert net.check("A", "B", require_caught_up=False).ok  # still a prefix, never patched
    assert [a.offset for a in net.check("A", "B").unreplicated] == [40]


def test_pending_reports_the_backlog(net):
    net.add("A", "B")
    net.produce("A", "a", 90, partitions=3, size=100)
    net.pump("A", "B")
    done = {k: len(offsets) for k, offsets in net.acked["a"].items()}
    net.produce("A", "a", 30, partitions=3, size=100)
    args = (net.store("A"), net.id("A"), net.store("B"), net.id("B"), net.topics("A"))
    before = pending(*args)
    assert before.messages == 30 and len(before.partitions) == 3
    # Each record is 100 value bytes, a key and two headers: about 130 bytes.
    assert 30 * 110 < before.bytes < 30 * 150
    stamps = sorted(1_700_000_000_000 + i for i in range(90, 120))
    assert (before.min_ts, before.max_ts) == (stamps[0], stamps[-1])
    new = {k: len(offsets) - done.get(k, 0) for k, offsets in net.acked["a"].items()}
    assert {(p.topic, p.partition): p.messages for p in before.partitions} == new
    net.pump("A", "B")
    after = pending(*args)
    assert (after.messages, after.bytes, after.min_ts, after.partitions) == (0, 0, None, ())
    net.assert_replica("A", "B")


def test_replica_positions_default_to_zero(net):
    net.add("A", "B")
    net.produce("A", "a", 10, partitions=1)
    net.pump("A", "B")
    positions = replica_positions(net.store("B"), net.id("B"), {"a": 3, "never": 1})
    assert positions == {("a", 0): 10, ("a", 1): 0, ("a", 2): 0, ("never", 0): 0}
    net.assert_replica("A", "B")


def test_batches_are_bounded_by_count_and_bytes(net):
    net.add("A", "B")
    net.produce("A", "a", 1000, partitions=1, size=1000)
    by_count = net.plan("A", "B", max_messages=300)
    assert [(s.start, s.end) for s in by_count] == [(0, 300), (300, 600), (600, 900), (900, 1000)]
    by_bytes = net.plan("A", "B", max_bytes=100_000)  # about 95 messages of ~1050 bytes
    assert 90 <= by_bytes[0].end - by_bytes[0].start <= 100
    assert by_bytes[-1].end == 1000
    assert all(a.end == b.start for a, b in itertools.pairwise(by_bytes))
    other = uuid.uuid4()
    assert plan_batches(net.store("A"), net.id("A"), net.store("B"), other, {"a": other}) == []
    for spec in by_bytes:
        apply_spec(net.store("A"), net.store("B"), spec, link="l")
    net.assert_replica("A", "B")


# --- consumer cursors --------------------------------------------------------------------------


def test_cursor_sync_writes_only_changed_cursors_and_retries_clamped_ones(net):
    net.add("A", "B")
    net.produce("A", "clicks", 30, partitions=1)
    source, replica = net.store("A"), net.store("B")
    a, b, synced = net.id("A"), net.id("B"), {}

    def sync() -> int:
        return sync_cursors(source, a, replica, b, net.topics("A"), synced)

    source.commit_cursor(a, "g", "clicks", 0, 20)
    assert sync() == 1  # the replica has no such partition yet: owed
    net.pump("A", "B")
    assert sync() == 0 and replica.fetch_cursor(b, "g", "clicks", 0) == 20
    replica.commit_cursor(b, "g", "clicks", 0, 10)  # behind what was copied: left alone
    assert sync() == 0 and replica.fetch_cursor(b, "g", "clicks", 0) == 10
    net.produce("A", "clicks", 30, partitions=1)
    source.commit_cursor(a, "g", "clicks", 0, 50)
    assert sync() == 1 and replica.fetch_cursor(b, "g", "clicks", 0) == 30  # clamped, owed
    net.pump("A", "B")
    assert sync() == 0 and replica.fetch_cursor(b, "g", "clicks", 0) == 50


# --- the PostgreSQL pipe apply and windows of batches ------------------------------------------


def _stats(net, name, topic):
    return {st.partition: (st.low, st.high, st.messages, st.bytes)
            for st in net.store(name).partition_stats(net.id(name), topic)}


def _logical_bytes(net, name, topic, partition, start, end) -> int:
    """Keys, values and encoded headers of [start, end), as the stores count them."""
    messages = net.store(name).read(net.id(name), topic, partition, start, limit=end - start,
                                    max_bytes=1 << 30)
    return sum(len(m.value) + len(m.key or b"") + headers_size(m.headers) for m in messages)


def test_piped_apply_keeps_rows_and_counters_as_the_origin_has_them(pg_net):
    pg_net.add("A", "B", "C")
    pg_net.produce("A", "a", 500, partitions=2)
    nbytes = 0
    for spec in pg_net.plan("A", "B", max_messages=70):
        applied = pg_net.store("B").apply_from(
            pg_net.store("A"), spec.source, spec.replica, spec.topic, spec.partition,
            spec.start, spec.end, link="l")
        assert applied.count == spec.end - spec.start
        assert applied.bytes == _logical_bytes(pg_net, "A", "a", spec.partition, spec.start,
                                               spec.end)
        nbytes += applied.bytes
    pg_net.assert_replica("A", "B")
    assert _stats(pg_net, "B", "a") == _stats(pg_net, "A", "a")  # rows and logical bytes
    assert nbytes == sum(st[3] for st in _stats(pg_net, "A", "a").values())
    sqlite = open_store("sqlite:///:memory:")
    try:  # only PostgreSQL to PostgreSQL pipes; other pairs take apply's general path
        assert pg_net.store("B").apply_from(sqlite, pg_net.id("A"), pg_net.id("C"), "a", 0, 0,
                                            10, link="l") is None
    finally:
        sqlite.close()


def test_piped_apply_trims_overlaps_and_refuses_gaps(pg_net):
    pg_net.add("A", "B")
    pg_net.produce("A", "a", 300, partitions=1)
    src, dst = pg_net.store("A"), pg_net.store("B")
    first, second, third = pg_net.plan("A", "B", max_messages=100)
    with pytest.raises(Misordered) as caught:
        apply_spec(src, dst, second, link="l")
    assert (caught.value.expected, caught.value.got) == (0, 100)
    assert apply_spec(src, dst, first, link="l").count == 100
    overlap = BatchSpec(first.source, first.replica, "a", 0, 50, 200)
    applied = apply_spec(src, dst, overlap, link="l")
    # [100, 200) only: the trimmed overlap's bytes do not count, as its messages do not.
    assert (applied.count, applied.bytes) == (100, _logical_bytes(pg_net, "A", "a", 0, 100, 200))
    redelivered = apply_spec(src, dst, second, link="l")
    assert (redelivered.count, redelivered.bytes) == (0, 0)
    assert apply_spec(src, dst, third, link="l").count == 100
    pg_net.assert_replica("A", "B")
    assert dst.replication_cursor(pg_net.id("B"), "l", "a", 0) == 300


def test_piped_apply_of_an_expired_prefix_starts_a_fresh_replica_at_the_low_watermark(pg_net):
    pg_net.add("A", "B")
    pg_net.produce("A", "a", 200, partitions=1)
    src = pg_net.store("A")
    src.expire(pg_net.id("A"), before_ms=1_700_000_000_000 + 80)  # offsets 0-79 expire
    (spec,) = pg_net.plan("A", "B")
    assert (spec.start, spec.end) == (80, 200)
    stale = BatchSpec(spec.source, spec.replica, "a", 0, 0, 200)  # planned before expiry
    assert apply_spec(src, pg_net.store("B"), stale, link="l").count == 120
    assert pg_net.store("B").watermarks(pg_net.id("B"), "a") == {0: (80, 200)}


def test_cut_batches_starts_past_the_batches_in_flight(net):
    net.add("A", "B")
    net.produce("A", "a", 1000, partitions=1)
    store, replica = net.store("A"), net.store("B")
    lagging = backlog(store, net.id("A"), replica, net.id("B"), net.topics("A"))
    (lag,) = lagging
    assert (lag.key, lag.start, lag.messages, lag.step(300, 1 << 30)) == (("a", 0), 0, 1000, 300)
    specs = cut_batches(net.id("A"), net.id("B"), lagging, max_messages=300,
                        after={("a", 0): 600})
    assert [(s.start, s.end) for s in specs] == [(600, 900), (900, 1000)]


def test_piped_apply_within_one_store_copies_on_the_server(pg_net):
    pg_net.add("A", "B", "C")  # A and C share a store (intracluster replication)
    assert pg_net.store("A") is pg_net.store("C")
    pg_net.produce("A", "a", 400, partitions=2)
    src = pg_net.store("A")
    specs = pg_net.plan("A", "C", max_messages=90)
    applied = [apply_spec(src, src, spec, link="l") for spec in specs]
    assert [(a.count, a.bytes) for a in applied] == [
        (s.end - s.start, _logical_bytes(pg_net, "A", "a", s.partition, s.start, s.end))
        for s in specs]
    assert [apply_spec(src, src, spec, link="l").count for spec in specs] == [0] * len(specs)
    pg_net.assert_replica("A", "C")
    assert _stats(pg_net, "C", "a") == _stats(pg_net, "A", "a")


def test_a_backlog_goes_by_the_replica_positions_it_knows_and_reads_those_it_lacks(net):
    """The replicator's plans read only the source while it knows where the replica is
    (`known`, learnt from the last read and the acknowledgements); a topic it lacks a
    position for is read from the replica, and remembered."""
    net.add("A", "B")
    net.produce("A", "a", 100, partitions=2)
    args = (net.store("A"), net.id("A"), net.store("B"), net.id("B"), net.topics("A"))
    known: dict = {}
    assert {lag.key: lag.start for lag in backlog(*args, known)} == {("a", 0): 0, ("a", 1): 0}
    assert known == {("a", 0): 0, ("a", 1): 0}
    net.pump("A", "B")  # the replica moves on behind the caller's back
    assert {lag.key: lag.start for lag in backlog(*args, known)} == {("a", 0): 0, ("a", 1): 0}
    del known[("a", 1)]
    assert backlog(*args, known) == []  # read again: caught up
    highs = {("a", p): high for p, (_, high) in net.store("A").watermarks(net.id("A"), "a").items()}
    assert known == highs


def test_stream_marks_change_with_messages_cursors_and_a_topic_made_again_only(net):
    """What the replicator's sweep compares (MessageStore.stream_marks): one stream's marks move
    with its messages, its consumer cursors and its topics, and with nothing else."""
    net.add("A", "B")
    net.produce("A", "a", 30, partitions=2)
    store, stream = net.store("A"), net.id("A")
    before = store.stream_marks()
    assert store.stream_marks() == before and net.id("B") not in before
    net.produce("A", "a", 1, partitions=2)
    after_produce = store.stream_marks()
    store.commit_cursor(stream, "g", "a", 0, 3)
    after_commit = store.stream_marks()
    store.drop_topic(stream, "a")
    store.ensure_topic(stream, "a", 2)
    remade = store.stream_marks()
    marks = [before[stream], after_produce[stream], after_commit[stream], remade[stream]]
    assert len(set(marks)) == 4
