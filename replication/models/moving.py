"""What the replicator and the gateways read of a link that moves data, as plain values rather
than model instances (`ReplicaLinkQuerySet.moving_links`, `.gateway_link`): the sweep reads
every moving link and a gateway its link for each links epoch, and building five model
instances a link was half of an idle replicator's CPU (1,000 links)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple
from uuid import UUID

from replication.models.streams import Cluster


@dataclass(frozen=True)
class MovingLink:
    """A link that moves data now: agreed both ways and not paused (DESIGN.md invariant 5)."""

    id: int
    source: UUID
    source_cluster: Cluster
    replica: UUID
    replica_cluster: Cluster
    topics: dict[str, UUID]  # the source's topics (name -> origin) that go to this replica
    throttle: bool = False  # `-throttle true`: the replicator limits its rate
    # Stream ids and their tenants, for the events the replicator publishes about the link.
    source_id: int = 0
    replica_id: int = 0
    tenants: frozenset[int] = frozenset()


class GatewayLink(NamedTuple):
    """What a gateway needs of a moving link to apply a batch."""

    source: UUID
    replica: UUID
    source_cluster: Cluster
    replica_cluster: Cluster
    feeds: bool  # the replica is the source of a moving link too: its replicator wants a wake
    synchronous: bool  # producers may be waiting for the replica (replication/services/sync.py)


def carried_topics(replica: UUID, topics: dict[str, UUID]) -> dict[str, UUID]:
    """Invariant 3: a topic never travels back to the stream it originates in."""
    return {name: origin for name, origin in topics.items() if origin != replica}
