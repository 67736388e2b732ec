"""The transport's protocols (replication/transport/), each in Redis and in process memory: the
replicators' registry and link leases (one holder per link, expiry, the rendezvous split, the
replicator's side in workers/replication/leases.py), wake-ups reaching every replicator, and
the replicator's wait."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest
import redis
from django.conf import settings

from replication.transport import Signals, Transport, local_transport, redis_transport
from replication.transport.leases import ranked_first
from workers.replication.leases import LinkLeases


@pytest.fixture(params=["redis", "local"])
def signals(request) -> Iterator[Transport]:
    if request.param == "local":
        yield local_transport()
        return
    client = redis.Redis.from_url(settings.REDIS_URL)
    namespace = f"sgt-{uuid.uuid4().hex[:10]}:"
    yield redis_transport(settings.REDIS_URL, namespace)
    keys = list(client.scan_iter(f"{namespace}*"))
    if keys:
        client.delete(*keys)


def test_a_link_is_leased_to_one_replicator_at_a_time(signals):
    assert signals.leases.lease("a", [1, 2], [], 5.0) == {1, 2}
    assert signals.leases.lease("b", [2, 3], [], 5.0) == {3}  # 2 is a's
    assert signals.leases.lease("a", [1, 2], [], 5.0) == {1, 2}  # renewed
    signals.leases.lease("a", [1], [2], 5.0)  # a gives 2 back
    assert signals.leases.lease("b", [2, 3], [], 5.0) == {2, 3}
    signals.leases.lease("a", [], [3], 5.0)  # not a's to give back: b keeps it
    assert signals.leases.lease("a", [3], [], 5.0) == set()
    assert signals.leases.lease_holders([1, 2, 3, 4]) == {1: "a", 2: "b", 3: "b"}


def test_a_lease_not_renewed_expires_and_another_takes_it(signals):
    assert signals.leases.lease("a", [7], [], 0.3) == {7}
    assert signals.leases.lease("b", [7], [], 0.3) == set()
    time.sleep(0.4)
    assert signals.leases.lease("b", [7], [], 0.3) == {7}


def test_the_registry_lists_live_and_dead_replicators_with_their_links(signals):
    assert signals.leases.replicator_beat("a", 0.3, 4) == ["a"]
    assert signals.leases.replicator_beat("b", 5.0, 2) == ["a", "b"]
    time.sleep(0.4)
    assert signals.leases.replicator_beat("b", 5.0, 6) == ["b"]  # a stopped beating
    states = {s.id: s for s in signals.leases.replicators()}
    assert (states["a"].alive, states["a"].links) == (False, 4)
    assert (states["b"].alive, states["b"].links) == (True, 6)
    assert time.time() - states["b"].heartbeat < 5 and states["b"].pid > 0
    signals.leases.replicator_forget("a")
    assert [s.id for s in signals.leases.replicators()] == ["b"]


def test_a_wake_up_reaches_every_live_replicator(signals):
    signals.leases.replicator_beat("a", 5.0, 0)
    signals.leases.replicator_beat("b", 5.0, 0)
    signals.wakeups.wake(["s1", "s2"])
    assert signals.inbox.wait(1.0, "a").streams == {"s1", "s2"}
    assert signals.inbox.wait(1.0, "b").streams == {"s1", "s2"}  # not taken by a
    assert signals.inbox.wait(0.05, "a").streams == set()


def test_a_short_wait_keeps_its_time_and_returns_what_comes_meanwhile(signals):
    """The replicator's linger is a wait of a few ms. Redis times a blocking pop out only on
    its timer (100 ms a tick at its default hz 10), so such a wait must not block in Redis."""
    signals.leases.replicator_beat("a", 5.0, 0)
    took = []
    for timeout in (0.0, 0.002, 0.02):
        start = time.monotonic()
        assert signals.inbox.wait(timeout, "a") == Signals()
        took.append(time.monotonic() - start)
    assert max(took) < 0.06, took

    # What comes during a short wait is what it returns, not something for the next one.
    threading.Timer(0.01, signals.wakeups.wake, [["s1"]]).start()
    start = time.monotonic()
    while not (streams := signals.inbox.wait(0.02, "a").streams):
        assert time.monotonic() - start < 1.0
    assert streams == {"s1"}
    signals.acks.done([{"ticket": "t1"}], "a", [], [])
    assert signals.inbox.wait(0.002, "a").acks == [{"ticket": "t1"}]


def test_live_replicators_split_the_links_and_a_dead_ones_share_goes_to_the_others(signals):
    moving = set(range(1, 41))
    a, b = (LinkLeases(signals.leases, name, 0.5) for name in ("a", "b"))
    a.tick(moving, 0.0)
    b.tick(moving, 0.0)
    a.tick(moving, 0.0)  # a hears of b, and gives b's share back in the same tick
    b.tick(moving, 0.0)  # which b takes
    assert a.held and b.held and a.held | b.held == moving and not a.held & b.held
    assert a.held == {link for link in moving if ranked_first(link, ["a", "b"]) == "a"}
    time.sleep(0.6)  # a dies: its beat and leases expire
    share = set(b.held)
    assert b.tick(moving, 1.0) == moving - share  # hears that a is gone, and takes its links
    assert b.held == moving


def test_a_replicator_whose_lease_lapsed_plans_nothing(signals):
    leases = LinkLeases(signals.leases, "a", 0.5)
    leases.tick({1, 2}, 0.0)
    assert leases.holds({1, 2}, 0.1) == {1, 2}
    assert leases.holds({1, 2}, 0.6) == set()  # no renewal within the lease: not trusted


def test_a_link_that_starts_moving_is_taken_before_the_next_tick(signals):
    leases = LinkLeases(signals.leases, "a", 5.0)
    leases.tick(set(), 0.0)
    assert leases.holds({9}, 0.1) == {9}


def test_a_clean_stop_gives_the_leases_back_at_once(signals):
    a, b = LinkLeases(signals.leases, "a", 5.0), LinkLeases(signals.leases, "b", 5.0)
    a.tick({1, 2, 3}, 0.0)
    a.close()
    b.tick({1, 2, 3}, 0.0)
    assert b.held == {1, 2, 3}
    assert [s.id for s in signals.leases.replicators()] == ["b"]


def test_one_live_replicator_leads_and_another_takes_over_when_it_dies(signals):
    a, b = LinkLeases(signals.leases, "a", 0.5), LinkLeases(signals.leases, "b", 0.5)
    a.tick(set(), 0.0)
    b.tick(set(), 0.0)
    a.tick(set(), 0.0)
    assert [a.leads(), b.leads()].count(True) == 1
    other = b if a.leads() else a
    time.sleep(0.6)  # the leader dies
    other.tick(set(), 1.0)
    assert other.leads()
