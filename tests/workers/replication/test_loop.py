"""What a gateway's acknowledgement makes the replicator do (workers/replication/loop.py): re-plan
the link only when its last plan saw more of the partition than is in flight or applied (new
data past that comes with a wake-up), and keep the lag it reports true without a plan."""

from __future__ import annotations

import uuid

from replication.engine.replicator import Backlog, BatchSpec
from replication.engine.store import PartitionStats
from replication.models import Cluster, MovingLink
from replication.transport import local_transport
from workers.replication.flights import InFlight
from workers.replication.loop import Replicator

SOURCE, REPLICA = uuid.uuid4(), uuid.uuid4()
GATEWAY = ("newyork", "gw1")


def flight(start: int, end: int, ticket: str) -> InFlight:
    return InFlight(BatchSpec(SOURCE, REPLICA, "clicks", 0, start, end), GATEWAY, "i", 1e9,
                    ticket)


def planned(high: int, *flights: InFlight) -> Replicator:
    """A replicator whose last plan of link 7 saw clicks:0 up to `high`, with `flights`."""
    replicator = Replicator(local_transport())
    replicator.dispatcher.flights.inflight[(7, "clicks", 0)] = list(flights)
    replicator.dispatcher.flights.tickets = {f.ticket: (7, "clicks", 0) for f in flights}
    replicator.dispatcher.flights.highs[7] = {("clicks", 0): high}
    stats = PartitionStats(0, 0, high, high, high * 100, 1, 2, 0, None)
    cluster = Cluster(name="newyork")
    link = MovingLink(7, SOURCE, cluster, REPLICA, cluster, {"clicks": SOURCE})
    start = flights[0].spec.start if flights else high
    replicator.lag_events.note(link, [Backlog("clicks", stats, start)], 0.0)
    return replicator


def ack(replicator: Replicator, ticket: str) -> None:
    replicator._on_acks([{"ticket": ticket, "applied": 1, "gateway": "gw1", "link": 7}], 1.0)


def test_an_acknowledgement_of_all_the_plan_saw_plans_nothing_and_the_lag_is_zero(settings):
    replicator = planned(100, flight(50, 100, "a"))
    ack(replicator, "a")
    assert replicator.dirty_links == set()
    assert replicator.dispatcher.flights.inflight == {}
    assert replicator.lag_events.lags[7].messages == 0


def test_an_acknowledgement_re_plans_when_the_plan_held_a_partial_batch_back(settings):
    replicator = planned(130, flight(50, 100, "a"))  # [100, 130) waited for the flight
    ack(replicator, "a")
    assert replicator.dirty_links == {7}
    assert replicator.lag_events.lags[7].messages == 30


def test_a_window_of_flights_re_plans_only_after_the_last_of_what_was_seen(settings):
    replicator = planned(200, flight(0, 100, "a"), flight(100, 200, "b"))
    ack(replicator, "a")
    assert replicator.dirty_links == set()  # "b" is on its way with the rest
    assert replicator.lag_events.lags[7].messages == 100
    ack(replicator, "b")
    assert replicator.dirty_links == set()
    assert replicator.lag_events.lags[7].messages == 0


def test_an_acknowledgement_without_a_plan_to_go_by_re_plans(settings):
    replicator = planned(100, flight(50, 100, "a"))
    # e.g. a replicator that took the link over from another
    replicator.dispatcher.flights.highs.clear()
    ack(replicator, "a")
    assert replicator.dirty_links == {7}


def test_a_link_owing_cursors_re_plans_on_every_acknowledgement(settings):
    replicator = planned(100, flight(50, 100, "a"))
    replicator.cursors.owed.add(7)  # cursors clamped to the replica's end wait for this data
    ack(replicator, "a")
    assert replicator.dirty_links == {7}
