"""KIP-848's server-side assignors and the set arithmetic of assignments
(replication/groups/consumer.py runs the protocol)."""

from __future__ import annotations

import struct
from uuid import UUID

ASSIGNORS = ("uniform", "range")  # Kafka's server-side assignors; the first is the default
Assignment = dict[UUID, frozenset[int]]  # topic id -> partitions


def encode_assignment(assigned: Assignment, names: dict[UUID, str]) -> bytes:
    """Kafka's ConsumerProtocolAssignment v0 of `assigned`, topics by `names`."""
    out = [struct.pack(">hi", 0, len(assigned))]
    for tid, partitions in sorted(assigned.items(), key=lambda t: str(t[0])):
        name = names.get(tid, "").encode()
        out.append(struct.pack(f">h{len(name)}si{len(partitions)}i", len(name), name,
                               len(partitions), *sorted(partitions)))
    out.append(struct.pack(">i", -1))  # no user data
    return b"".join(out)


def uniform(count: int, takers: list[str], previous: dict[int, str]) -> dict[str, list[int]]:
    """Each taker gets count // n partitions, the first count % n one more; a partition stays
    where it was while its member is under its share."""
    n = len(takers)
    share = {m: count // n + (1 if i < count % n else 0) for i, m in enumerate(takers)}
    placed: dict[str, list[int]] = {m: [] for m in takers}
    loose = []
    for p in range(count):
        owner = previous.get(p)
        if owner in placed and len(placed[owner]) < share[owner]:
            placed[owner].append(p)
        else:
            loose.append(p)
    for p in loose:
        owner = min(takers, key=lambda m: (len(placed[m]) - share[m], takers.index(m)))
        placed[owner].append(p)
    return placed


def ranges(count: int, takers: list[str]) -> dict[str, list[int]]:
    n, placed, start = len(takers), {}, 0
    for i, m in enumerate(takers):
        size = count // n + (1 if i < count % n else 0)
        placed[m] = list(range(start, start + size))
        start += size
    return placed


def within(owned: Assignment, allowed: Assignment) -> bool:
    return all(ps <= allowed.get(tid, frozenset()) for tid, ps in owned.items())


def overlaps(a: Assignment, b: Assignment) -> bool:
    return any(ps & b.get(tid, frozenset()) for tid, ps in a.items())


def intersect(a: Assignment, b: Assignment) -> Assignment:
    out = {tid: ps & b.get(tid, frozenset()) for tid, ps in a.items()}
    return {tid: ps for tid, ps in out.items() if ps}


def minus(a: Assignment, b: Assignment) -> Assignment:
    out = {tid: ps - b.get(tid, frozenset()) for tid, ps in a.items()}
    return {tid: ps for tid, ps in out.items() if ps}


def union(a: Assignment, b: Assignment) -> Assignment:
    return {tid: a.get(tid, frozenset()) | b.get(tid, frozenset()) for tid in {*a, *b}}
