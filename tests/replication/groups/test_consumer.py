"""KIP-848's consumer groups (replication/groups/consumer.py), driven directly on an event loop:
the coordinator assigns, members reconcile a heartbeat at a time, and no partition is ever
held by two members at once."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

from replication.groups.consumer import (
    Beat,
    ConsumerGroups,
    Err,
    Settings,
    Subscribed,
    encode_assignment,
    view,
)

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)
TOPICS = {T1: Subscribed(T1, "orders", 4), T2: Subscribed(T2, "refunds", 2)}
ORDERS = {T1: TOPICS[T1]}
FAST = Settings(session_ms=100, heartbeat_ms=50)


def run(scenario: Callable[[ConsumerGroups], Any], settings: Settings = FAST) -> Any:
    async def main() -> Any:
        result = scenario(ConsumerGroups(settings))
        return await result if asyncio.iscoroutine(result) else result

    return asyncio.run(main())


def join(groups: ConsumerGroups, member: str, topics: dict = ORDERS, **kw: Any):  # type: ignore[no-untyped-def]
    names = tuple(t.name for t in topics.values())
    beat = Beat(member, 0, names=names, rebalance_timeout_ms=kw.pop("rebalance_ms", 60_000),
                **kw)
    return groups.heartbeat("g", beat, topics)


def beat(groups: ConsumerGroups, member: str, epoch: int, owned: dict | None = None,
         topics: dict = ORDERS):  # type: ignore[no-untyped-def]
    return groups.heartbeat("g", Beat(member, epoch, owned=owned), topics)


def held(groups: ConsumerGroups) -> dict[str, dict]:
    group = groups.get("g")
    assert group is not None
    return {m.member_id: {t: set(p) for t, p in m.assigned.items()}
            for m in group.members.values()}


def test_a_lone_member_gets_every_partition_at_once() -> None:
    def scenario(groups: ConsumerGroups) -> None:
        result = join(groups, "a", TOPICS)
        assert result.error is Err.NONE
        assert result.epoch == 2  # the member joined and subscribed: two group epochs
        assert result.assignment == {T1: frozenset(range(4)), T2: frozenset(range(2))}
        again = beat(groups, "a", result.epoch, topics=TOPICS)
        assert again.error is Err.NONE and again.assignment is None  # unchanged: not sent

    run(scenario)


def test_a_second_member_gets_partitions_only_after_the_first_gives_them_up() -> None:
    def scenario(groups: ConsumerGroups) -> None:
        a = join(groups, "a")
        b = join(groups, "b")
        assert b.error is Err.NONE and b.assignment == {}  # a still holds everything
        # a is told to keep half: its epoch does not move until it has revoked the rest.
        told = beat(groups, "a", a.epoch)
        assert told.epoch == a.epoch and told.assignment is not None
        keep = told.assignment[T1]
        assert len(keep) == 2
        # b still waits: a's heartbeat has not shown the partitions released.
        assert beat(groups, "b", b.epoch).assignment is None
        still = beat(groups, "a", a.epoch, owned={T1: frozenset(range(4))})  # not yet given up
        assert still.epoch == a.epoch and beat(groups, "b", b.epoch).assignment is None
        done = beat(groups, "a", a.epoch, owned={T1: keep})
        assert done.epoch > a.epoch
        given = beat(groups, "b", b.epoch)
        assert given.assignment == {T1: frozenset(range(4)) - keep}
        mine = held(groups)
        assert not mine["a"][T1] & mine["b"][T1]
        assert groups.get("g").state == "Stable"

    run(scenario)


def test_a_partition_is_never_held_by_two_members_through_joins_and_leaves() -> None:
    def scenario(groups: ConsumerGroups) -> None:
        epochs, owned = {}, {}
        for name in "abc":
            epochs[name] = join(groups, name).epoch
            owned[name] = {}
        for round_ in range(12):
            if round_ == 6:
                assert groups.heartbeat("g", Beat("b", -1), None).epoch == -1
                epochs.pop("b")
            for name in list(epochs):
                result = beat(groups, name, epochs[name], owned=owned[name])
                assert result.error is Err.NONE, (name, result)
                epochs[name] = result.epoch
                if result.assignment is not None:
                    owned[name] = {t: p for t, p in result.assignment.items() if p}
                claims = [(t, p) for n in epochs for t, ps in owned[n].items() for p in ps]
                assert len(claims) == len(set(claims)), f"round {round_}: {owned}"
        assert sorted(p for n in epochs for p in owned[n].get(T1, ())) == [0, 1, 2, 3]
        assert groups.get("g").state == "Stable"

    run(scenario)


def test_epochs_fence_a_stale_member_and_a_lost_answer_is_forgiven() -> None:
    def scenario(groups: ConsumerGroups) -> None:
        a = join(groups, "a")
        assert beat(groups, "a", a.epoch + 5).error is Err.FENCED_MEMBER_EPOCH
        assert beat(groups, "nobody", 3).error is Err.UNKNOWN_MEMBER_ID
        join(groups, "b")
        told = beat(groups, "a", a.epoch)
        done = beat(groups, "a", a.epoch, owned=told.assignment)
        # The answer carrying the new epoch was lost: the old one still heartbeats, owning
        # no more than it was assigned.
        assert beat(groups, "a", a.epoch, owned=told.assignment).error is Err.NONE
        assert groups.validate("g", "a", done.epoch) is Err.NONE
        assert groups.validate("g", "a", a.epoch) is Err.STALE_MEMBER_EPOCH
        assert groups.validate("g", "a", done.epoch + 1) is Err.FENCED_MEMBER_EPOCH
        assert groups.validate("g", "", -1) is Err.UNKNOWN_MEMBER_ID  # members consume
        assert groups.validate("other", "", -1) is Err.NONE  # not one of these groups

    run(scenario)


def test_bad_heartbeats_are_refused_with_the_reason() -> None:
    def scenario(groups: ConsumerGroups) -> None:
        assert groups.heartbeat("g", Beat("", 0, names=("x",), rebalance_timeout_ms=1),
                                {}).error is Err.INVALID_REQUEST
        refused = groups.heartbeat("g", Beat("a", 0, rebalance_timeout_ms=1), {})
        assert refused.error is Err.INVALID_REQUEST and "subscribed" in refused.message
        wrong = join(groups, "a", assignor="sticky")
        assert wrong.error is Err.UNSUPPORTED_ASSIGNOR and "uniform" in wrong.message
        assert groups.get("g") is None  # nothing was created

    run(scenario)


def test_a_member_that_stops_heartbeating_is_removed_and_its_partitions_move() -> None:
    async def scenario(groups: ConsumerGroups) -> None:
        join(groups, "a")
        b = join(groups, "b")
        await asyncio.sleep(0.06)
        beat(groups, "b", b.epoch)  # b keeps its session; a's runs out
        await asyncio.sleep(0.06)
        result = beat(groups, "b", b.epoch)
        assert list(groups.get("g").members) == ["b"]
        assert result.assignment == {T1: frozenset(range(4))}

    run(scenario)


def test_a_member_that_does_not_revoke_within_its_rebalance_timeout_is_removed() -> None:
    async def scenario(groups: ConsumerGroups) -> None:
        a = join(groups, "a", rebalance_ms=30)
        b = join(groups, "b")
        beat(groups, "a", a.epoch)  # told to revoke, never does
        await asyncio.sleep(0.05)
        assert "a" not in groups.get("g").members
        assert beat(groups, "b", b.epoch).assignment == {T1: frozenset(range(4))}

    run(scenario, Settings(session_ms=10_000))


def test_a_static_member_that_leaves_with_minus_two_keeps_its_place_for_its_successor() -> None:
    def scenario(groups: ConsumerGroups) -> None:
        a = join(groups, "a", instance_id="i1")
        epoch = groups.get("g").epoch
        assert groups.heartbeat("g", Beat("a", -2, instance_id="i1"), None).error is Err.NONE
        assert join(groups, "a2", instance_id="i1").assignment == a.assignment
        assert groups.get("g").epoch == epoch  # no rebalance
        assert join(groups, "a3", instance_id="i1").error is Err.UNRELEASED_INSTANCE_ID

    run(scenario)


def test_range_assigns_contiguous_partitions_and_new_partitions_join() -> None:
    def scenario(groups: ConsumerGroups) -> None:
        a = join(groups, "a", assignor="range")
        b = join(groups, "b", assignor="range")
        told = beat(groups, "a", a.epoch)
        assert told.assignment == {T1: frozenset({0, 1})}
        grown = {T1: Subscribed(T1, "orders", 6)}
        done = beat(groups, "a", a.epoch, owned=told.assignment, topics=grown)
        assert groups.get("g").target["a"] == {T1: frozenset({0, 1, 2})}
        assert done.assignment == {T1: frozenset({0, 1, 2})}  # a gave 2 up and takes it back
        assert beat(groups, "b", b.epoch, topics=grown).assignment == {T1: frozenset({3, 4, 5})}

    run(scenario)


def test_the_view_names_topics_as_the_member_knows_them() -> None:
    def scenario(groups: ConsumerGroups) -> None:
        join(groups, "a", TOPICS)
        shown = view(groups.get("g"))
        assert (shown.state, shown.protocol_type, shown.protocol_name) == (
            "Stable", "consumer", "uniform")
        assert shown.members[0].assignment == encode_assignment(
            {T1: frozenset(range(4)), T2: frozenset(range(2))}, {T1: "orders", T2: "refunds"})
        assert b"orders" in shown.members[0].assignment

    run(scenario)
