"""The rebalance and drain plans (replication/rebalance.py): groups end within 10% of each
other by bytes whenever whole partitions allow it, no move is useless, a drain empties its
group onto the lightest groups."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from replication.rebalance import Part, balanced, plan_drain, plan_rebalance

S = uuid.UUID(int=1)


def loads_after(parts: list[Part], moves, groups) -> dict[str, int]:  # type: ignore[no-untyped-def]
    where = {(p.topic, p.partition): p.group for p in parts}
    where.update({(m.part.topic, m.part.partition): m.to for m in moves})
    loads = dict.fromkeys(groups, 0)
    for p in parts:
        loads[where[(p.topic, p.partition)]] += p.nbytes
    return loads


def test_a_new_empty_group_takes_about_half():
    parts = [Part(S, "t", i, 100, "s1") for i in range(10)]
    moves = plan_rebalance(parts, ["s1", "s2"])
    assert loads_after(parts, moves, ["s1", "s2"]) == {"s1": 500, "s2": 500}
    assert all(m.to == "s2" and m.part.group == "s1" for m in moves)


def test_balanced_groups_plan_nothing_and_one_huge_partition_is_left_alone():
    assert plan_rebalance([Part(S, "t", 0, 100, "s1"), Part(S, "t", 1, 95, "s2")],
                          ["s1", "s2"]) == []
    # Moving the only partition would only move the imbalance: never planned.
    assert plan_rebalance([Part(S, "t", 0, 1000, "s1")], ["s1", "s2"]) == []
    assert balanced({"s1": 0, "s2": 0}) and not balanced({"s1": 100, "s2": 89})


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 1000), st.sampled_from(["s1", "s2", "s3"])),
                min_size=1, max_size=60))
def test_every_move_narrows_the_gap_and_small_partitions_reach_the_tolerance(rows):
    groups = ["s1", "s2", "s3"]
    parts = [Part(S, "t", i, size, group) for i, (size, group) in enumerate(rows)]
    moves = plan_rebalance(parts, groups)
    after = loads_after(parts, moves, groups)
    assert sum(after.values()) == sum(p.nbytes for p in parts)
    before = loads_after(parts, [], groups)
    assert max(after.values()) - min(after.values()) <= max(before.values()) - min(
        before.values())
    assert len({(m.part.topic, m.part.partition) for m in moves}) == len(moves)
    assert all(m.to != m.part.group for m in moves)
    # Not balanced only when no partition is smaller than its group's gap to the lightest.
    if not balanced(after):
        lightest = min(after.values())
        where = {(p.topic, p.partition): p.group for p in parts}
        where.update({(m.part.topic, m.part.partition): m.to for m in moves})
        assert not [p for p in parts
                    if p.nbytes < after[where[(p.topic, p.partition)]] - lightest]


def test_a_drain_empties_its_group_onto_the_lightest_groups_largest_first():
    parts = [Part(S, "t", 0, 500, "s3"), Part(S, "t", 1, 300, "s3"), Part(S, "t", 2, 200, "s3"),
             Part(S, "u", 0, 400, "s1"), Part(S, "u", 1, 100, "s2")]
    moves = plan_drain(parts, "s3", ["s1", "s2", "s3"])
    assert [(m.part.partition, m.to) for m in moves] == [(0, "s2"), (1, "s1"), (2, "s2")]
    assert plan_drain(parts, "s3", ["s3"]) == []  # nowhere to go: refused by the service
