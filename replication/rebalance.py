"""Which partitions to move so a cluster's store groups hold about the same bytes (issue 33),
and where a draining group's partitions go: plans only, no I/O
(replication/services/rebalance.py runs them with partition moves).

Rebalance: while the active groups are not within TOLERANCE of each other, move a partition
from the heaviest group (that has one smaller than its gap to the lightest) to the lightest,
the largest that does not overshoot half the gap (see _useful), counting each planned move at
once; a partition as large as the gap is never moved (it would only move the imbalance).
Drain: every partition of a draining group goes to the lightest active group at that moment,
largest first.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from uuid import UUID

TOLERANCE = 0.10  # groups within 10% of each other by bytes (the figure)


@dataclass(frozen=True)
class Part:
    stream: UUID
    topic: str
    partition: int
    nbytes: int
    group: str


@dataclass(frozen=True)
class Move:
    part: Part
    to: str


def balanced(loads: dict[str, int], tolerance: float = TOLERANCE) -> bool:
    """Within `tolerance` of each other: the lightest group at least (1 - tolerance) of the
    heaviest (an empty cluster, or one group, is balanced)."""
    if len(loads) < 2:
        return True
    heaviest, lightest = max(loads.values()), min(loads.values())
    return heaviest == 0 or lightest >= heaviest * (1 - tolerance)


def plan_rebalance(parts: Iterable[Part], active: Iterable[str], *,
                   tolerance: float = TOLERANCE, limit: int = 10_000) -> list[Move]:
    groups = list(active)
    loads = dict.fromkeys(groups, 0)
    on: dict[str, list[Part]] = {g: [] for g in groups}
    for part in parts:
        if part.group in loads:
            loads[part.group] += part.nbytes
            on[part.group].append(part)
    moves: list[Move] = []
    while len(moves) < limit and not balanced(loads, tolerance):
        light = min(groups, key=lambda g: (loads[g], g))
        found = _useful(groups, loads, on, light)
        if found is None:
            break  # no single move narrows a gap: as balanced as whole partitions allow
        heavy, part = found
        on[heavy].remove(part)
        on[light].append(part)
        loads[heavy] -= part.nbytes
        loads[light] += part.nbytes
        moves.append(Move(part, light))
    # A partition planned twice moves once, to where it ends; back home, not at all.
    final = {m.part: m.to for m in moves}
    return [Move(part, to) for part, to in final.items() if to != part.group]


def _useful(groups: list[str], loads: dict[str, int], on: dict[str, list[Part]],
            light: str) -> tuple[str, Part] | None:
    """From the heaviest group that has one, the partition to move to the lightest: the
    largest of at most half their gap (the heavy group stays the heavier, so moves converge
    from above), else the smallest under the whole gap (a partition as large as the gap would
    only move the imbalance)."""
    for heavy in sorted(groups, key=lambda g: (-loads[g], g)):
        gap = loads[heavy] - loads[light]
        halves = [p for p in on[heavy] if 0 < p.nbytes <= gap / 2]
        if halves:
            return heavy, max(halves, key=lambda p: (p.nbytes, p.topic, -p.partition))
        useful = [p for p in on[heavy] if 0 < p.nbytes < gap]
        if useful:
            return heavy, min(useful, key=lambda p: (p.nbytes, p.topic, p.partition))
    return None


def plan_drain(parts: Iterable[Part], draining: str, active: Iterable[str]) -> list[Move]:
    groups = [g for g in active if g != draining]
    if not groups:
        return []
    loads = dict.fromkeys(groups, 0)
    leaving = []
    for part in parts:
        if part.group == draining:
            leaving.append(part)
        elif part.group in loads:
            loads[part.group] += part.nbytes
    moves = []
    for part in sorted(leaving, key=lambda p: (-p.nbytes, str(p.stream), p.topic,
                                               p.partition)):
        to = min(groups, key=lambda g: (loads[g], g))
        loads[to] += part.nbytes
        moves.append(Move(part, to))
    return moves
