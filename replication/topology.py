"""Topic-origin rules over the replication graph (DESIGN.md invariant 4). Pure functions.

Every stream ends up holding its own topics plus every topic of every stream upstream of it.
A topology is sound when, in every stream, each topic name has exactly one origin; multi-master
pairs and rings are then safe because origin UUIDs stop messages from flowing back.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from uuid import UUID

StreamId = int
Holdings = Mapping[StreamId, Mapping[str, UUID]]


@dataclass(frozen=True)
class OriginConflict:
    stream: StreamId
    topic: str
    origins: frozenset[UUID]


def arrivals(edges: Iterable[tuple[StreamId, StreamId]], holdings: Holdings) -> dict:
    """name -> origins, per stream, once topics have flowed along every edge (a fixed point)."""
    upstream_of: dict[StreamId, set[StreamId]] = defaultdict(set)
    for source, replica in edges:
        upstream_of[replica].add(source)
    streams = set(holdings) | set(upstream_of) | {s for ss in upstream_of.values() for s in ss}
    result: dict[StreamId, dict[str, set[UUID]]] = {
        s: {name: {origin} for name, origin in holdings.get(s, {}).items()} for s in streams
    }
    changed = True
    while changed:
        changed = False
        for replica, sources in upstream_of.items():
            into = result[replica]
            for source in sources:
                for name, origins in result[source].items():
                    known = into.setdefault(name, set())
                    if not origins <= known:
                        known |= origins
                        changed = True
    return result


def origin_conflicts(
    edges: Iterable[tuple[StreamId, StreamId]], holdings: Holdings
) -> list[OriginConflict]:
    return [
        OriginConflict(stream, name, frozenset(origins))
        for stream, topics in sorted(arrivals(edges, holdings).items())
        for name, origins in sorted(topics.items())
        if len(origins) > 1
    ]
