"""The group coordinator's state machine, driven directly on an event loop (no wire code)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from replication.groups.coordinator import Coordinator, Err, GroupView, JoinResult, Limits

PROTOCOLS = [("range", b"range-meta"), ("roundrobin", b"rr-meta")]
FAST = Limits(min_session_ms=50, max_session_ms=60_000)


def run(scenario: Callable[[Coordinator], Awaitable[Any]], limits: Limits = FAST) -> Any:
    async def main() -> Any:
        return await asyncio.wait_for(scenario(Coordinator(limits)), 10)

    return asyncio.run(main())


async def join(co: Coordinator, member_id: str = "", *, protocols: list | None = None,
               session_ms: int = 5000, rebalance_ms: int = 1000, **kw: Any) -> JoinResult:
    return await co.join("g", member_id=member_id, protocol_type="consumer",
                         protocols=protocols or PROTOCOLS, session_timeout_ms=session_ms,
                         rebalance_timeout_ms=rebalance_ms, client_id="c", **kw)


async def join_soon(co: Coordinator, *args: Any, **kw: Any) -> asyncio.Future:
    """A join started in the background, given time to reach the coordinator (where it waits
    for the rebalance it triggers or joins)."""
    task = asyncio.ensure_future(join(co, *args, **kw))
    await asyncio.sleep(0.01)
    return task


async def join_two(co: Coordinator) -> tuple[JoinResult, JoinResult]:
    first = await join(co)
    assert first.error is Err.NONE and first.generation_id == 1
    # The second member's join triggers a rebalance the first completes by rejoining.
    second_task = await join_soon(co)
    assert co.heartbeat("g", generation_id=1, member_id=first.member_id) \
        is Err.REBALANCE_IN_PROGRESS
    first_again = await join(co, first.member_id)
    return first_again, await second_task


def test_single_member_becomes_leader_and_stable_after_sync() -> None:
    async def scenario(co: Coordinator) -> None:
        joined = await join(co)
        assert joined.error is Err.NONE
        assert joined.leader == joined.member_id and joined.protocol_name == "range"
        assert [m.metadata for m in joined.members] == [b"range-meta"]
        assert co.describe("g").state == "CompletingRebalance"
        synced = await co.sync("g", generation_id=1, member_id=joined.member_id,
                               assignments={joined.member_id: b"all"})
        assert synced.error is Err.NONE and synced.assignment == b"all"
        assert co.describe("g").state == "Stable"
        assert co.heartbeat("g", generation_id=1, member_id=joined.member_id) is Err.NONE

    run(scenario)


def test_member_id_required_round_trip_for_v4_joins() -> None:
    async def scenario(co: Coordinator) -> None:
        first = await join(co, require_known_member_id=True)
        assert first.error is Err.MEMBER_ID_REQUIRED and first.member_id
        assert co.describe("g").members == []
        second = await join(co, first.member_id, require_known_member_id=True)
        assert second.error is Err.NONE and second.member_id == first.member_id

    run(scenario)


def test_leader_gets_all_metadata_followers_wait_for_its_assignment() -> None:
    async def scenario(co: Coordinator) -> None:
        a, b = await join_two(co)
        assert a.generation_id == b.generation_id == 2
        leader, follower = (a, b) if a.leader == a.member_id else (b, a)
        assert {m.member_id for m in leader.members} == {a.member_id, b.member_id}
        assert follower.members == []
        waiting = asyncio.ensure_future(co.sync("g", generation_id=2,
                                                member_id=follower.member_id, assignments={}))
        await asyncio.sleep(0.01)
        assert not waiting.done()
        plan = {leader.member_id: b"p0", follower.member_id: b"p1"}
        assert (await co.sync("g", generation_id=2, member_id=leader.member_id,
                              assignments=plan)).assignment == b"p0"
        assert (await waiting).assignment == b"p1"

    run(scenario)


def test_protocol_is_chosen_among_those_every_member_supports() -> None:
    async def scenario(co: Coordinator) -> None:
        first = await join(co)
        second = await join_soon(co, protocols=[("roundrobin", b"x")])
        again = await join(co, first.member_id)
        assert again.protocol_name == (await second).protocol_name == "roundrobin"
        refused = await join(co, protocols=[("cooperative-sticky", b"")])
        assert refused.error is Err.INCONSISTENT_GROUP_PROTOCOL

    run(scenario)


def test_stale_generation_and_unknown_member_are_refused() -> None:
    async def scenario(co: Coordinator) -> None:
        a, b = await join_two(co)
        assert co.heartbeat("g", generation_id=1, member_id=a.member_id) \
            is Err.ILLEGAL_GENERATION
        assert co.heartbeat("g", generation_id=2, member_id="nobody") is Err.UNKNOWN_MEMBER_ID
        assert (await co.sync("g", generation_id=1, member_id=a.member_id, assignments={})
                ).error is Err.ILLEGAL_GENERATION
        assert co.validate_commit("g", generation_id=1, member_id=a.member_id) \
            is Err.REBALANCE_IN_PROGRESS  # CompletingRebalance: sync first
        await asyncio.gather(
            co.sync("g", generation_id=2, member_id=a.leader, assignments={}),
            co.sync("g", generation_id=2,
                    member_id=b.member_id if a.leader == a.member_id else a.member_id,
                    assignments={}))
        assert co.validate_commit("g", generation_id=1, member_id=a.member_id) \
            is Err.ILLEGAL_GENERATION
        assert co.validate_commit("g", generation_id=2, member_id="x") is Err.UNKNOWN_MEMBER_ID
        assert co.validate_commit("g", generation_id=2, member_id=a.member_id) is Err.NONE
        assert co.validate_commit("g", generation_id=-1, member_id="") is Err.UNKNOWN_MEMBER_ID
        assert co.validate_commit("other", generation_id=-1, member_id="") is Err.NONE
        assert co.validate_commit("other", generation_id=3, member_id="m") \
            is Err.ILLEGAL_GENERATION

    run(scenario)


async def settle(co: Coordinator, joined: list[JoinResult]) -> None:
    leader = joined[0].leader
    plan = {j.member_id: j.member_id.encode() for j in joined}
    results = await asyncio.gather(*(
        co.sync("g", generation_id=j.generation_id, member_id=j.member_id,
                assignments=plan if j.member_id == leader else {}) for j in joined))
    assert all(r.error is Err.NONE for r in results)


def test_session_timeout_removes_silent_member_and_rebalances() -> None:
    async def scenario(co: Coordinator) -> None:
        a = await join(co, session_ms=300)
        await settle(co, [a])
        b_task = await join_soon(co, session_ms=300)
        a2 = await join(co, a.member_id, session_ms=300)
        b = await b_task
        await settle(co, [a2, b])
        # Only b heartbeats: a expires, and b is told to rejoin.
        for _ in range(40):
            await asyncio.sleep(0.05)
            if co.heartbeat("g", generation_id=2, member_id=b.member_id) is not Err.NONE:
                break
        assert co.heartbeat("g", generation_id=2, member_id=b.member_id) \
            is Err.REBALANCE_IN_PROGRESS
        alone = await join(co, b.member_id, session_ms=300)
        assert alone.generation_id == 3 and [m.member_id for m in alone.members] == [b.member_id]
        assert co.heartbeat("g", generation_id=3, member_id=a.member_id) is Err.UNKNOWN_MEMBER_ID

    run(scenario)


def test_rebalance_timeout_drops_members_that_do_not_rejoin() -> None:
    async def scenario(co: Coordinator) -> None:
        a, b = await join_two(co)
        await settle(co, [a, b])
        # a rejoins with new metadata (as a cooperative member after revoking); b never does.
        again = await join(co, a.member_id, protocols=[("range", b"owned-less")],
                           rebalance_ms=200)
        assert again.generation_id == 3 and [m.member_id for m in again.members] in (
            [a.member_id], [])
        assert co.describe("g").members[0].member_id == a.member_id
        assert len(co.describe("g").members) == 1

    run(scenario)


def test_cooperative_follow_up_rebalance_completes_when_members_rejoin_with_subsets() -> None:
    async def scenario(co: Coordinator) -> None:
        a, b = await join_two(co)
        await settle(co, [a, b])
        # Both rejoin with changed "owned partitions" in their metadata, in turn.
        first = await join_soon(co, a.member_id, protocols=[("range", b"a-owns-1")])
        second = await join(co, b.member_id, protocols=[("range", b"b-owns-0")])
        first_result = await first
        assert first_result.generation_id == second.generation_id == 3
        leader = first_result if first_result.leader == a.member_id else second
        assert sorted(m.metadata for m in leader.members) == [b"a-owns-1", b"b-owns-0"]

    run(scenario)


def test_leave_group_batch_removes_members_and_last_leaving_empties_group() -> None:
    async def scenario(co: Coordinator) -> None:
        a, b = await join_two(co)
        await settle(co, [a, b])
        assert co.leave("g", [(a.member_id, None), ("ghost", None)]) == [
            Err.NONE, Err.UNKNOWN_MEMBER_ID]
        assert co.describe("g").state == "PreparingRebalance"
        alone = await join(co, b.member_id)
        assert alone.generation_id == 3
        assert co.leave("g", [(b.member_id, None)]) == [Err.NONE]
        assert co.describe("g") is None  # empty: nothing kept in memory
        assert co.validate_commit("g", generation_id=-1, member_id="") is Err.NONE

    run(scenario)


def test_static_member_restart_keeps_assignment_without_rebalance() -> None:
    async def scenario(co: Coordinator) -> None:
        a = await join(co, instance_id="host-1")
        await settle(co, [a])
        restarted = await join(co, instance_id="host-1")
        assert restarted.error is Err.NONE and restarted.member_id != a.member_id
        assert restarted.generation_id == 1 and co.describe("g").state == "Stable"
        assert co.heartbeat("g", generation_id=1, member_id=a.member_id,
                            instance_id="host-1") is Err.FENCED_INSTANCE_ID
        synced = await co.sync("g", generation_id=1, member_id=restarted.member_id,
                               assignments={}, instance_id="host-1")
        assert synced.assignment == a.member_id.encode()

    run(scenario)


def test_invalid_session_timeout_and_group_id_are_refused() -> None:
    async def scenario(co: Coordinator) -> None:
        assert (await join(co, session_ms=10)).error is Err.INVALID_SESSION_TIMEOUT
        assert (await co.join("", member_id="", protocol_type="consumer", protocols=PROTOCOLS,
                              session_timeout_ms=5000)).error is Err.INVALID_GROUP_ID
        assert (await join(co, "made-up")).error is Err.UNKNOWN_MEMBER_ID

    run(scenario)


def test_every_state_change_is_published() -> None:
    seen: list[GroupView] = []

    async def scenario(co: Coordinator) -> None:
        co._on_change = seen.append
        a = await join(co)
        await settle(co, [a])
        co.leave("g", [(a.member_id, None)])

    run(scenario)
    states = [view.state for view in seen]
    assert states[0] == "PreparingRebalance" and "Stable" in states and states[-1] == "Empty"


def test_a_repeated_join_answers_the_earlier_one_instead_of_leaving_it_hanging() -> None:
    async def scenario(co: Coordinator) -> None:
        a, b = await join_two(co)
        await settle(co, [a, b])
        earlier = await join_soon(co, a.member_id, protocols=[("range", b"new")])
        again = asyncio.ensure_future(join(co, a.member_id, protocols=[("range", b"new")]))
        assert (await earlier).error is Err.REBALANCE_IN_PROGRESS
        await join(co, b.member_id)
        assert (await again).generation_id == 3

    run(scenario)


def test_a_group_held_for_deletion_refuses_joins_until_released_and_a_live_one_is_not_held(
        ) -> None:
    async def scenario(co: Coordinator) -> None:
        joined = await join(co)
        assert co.hold_empty("g") is False  # a member: DeleteGroups answers NON_EMPTY_GROUP
        assert co.leave("g", [(joined.member_id, None)]) == [Err.NONE]
        assert co.hold_empty("g") is True
        refused = await join(co)
        assert refused.error is Err.COORDINATOR_NOT_AVAILABLE  # retriable: the client asks again
        assert co.describe("g") is None  # the refused join left nothing behind
        co.release("g")
        assert (await join(co)).error is Err.NONE

    run(scenario)
