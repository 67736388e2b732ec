"""Applying a batch of a replica link: copy [start, end) of one source partition to the
replica and advance the replica's cursor in one transaction of the replica's store. A gateway
does it for the replicator's batches (workers/replication/applier.py); a failover's drain does
it itself (replication/services/failover.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from django.conf import settings

from replication.counters import REPLICATED, count_traffic
from replication.engine.replicator import BatchSpec, apply_spec
from replication.engine.store import Applied, Misordered
from replication.models import GatewayLink, ReplicaLink
from replication.services.wakeups import stream_wake
from replication.stores import store_for

# Waits before a batch that arrived ahead of its partition's previous one is refused: with
# several batches of a partition in flight, the previous one is usually being applied by
# another thread at that moment, and waiting a few ms beats a refusal and a resend.
MISORDER_WAITS = (0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2)


def batch_apply(*, link_id: int, topic: str, partition: int, start: int, end: int) -> Applied:
    """A batch applied outside a gateway (a failover's drain): `link_apply` of the link as it
    is now. A link
    that lost its agreement or was paused since the batch was cut applies nothing, so pause
    stops at a batch boundary. New messages in a replica that is itself the source of a moving
    link (a chain's next hop, the way back of a multi-master pair) wake its replicator once
    the transaction commits (a gateway sends that wake-up with its acknowledgement instead)."""
    link = ReplicaLink.objects.gateway_link(link_id)
    if link is None:
        return Applied({})
    applied = link_apply(link, link_id=link_id, topic=topic, partition=partition, start=start,
                         end=end)
    if applied.count and link.feeds:
        stream_wake(stream=link.replica)
    return applied


def link_apply(link: GatewayLink, *, link_id: int, topic: str, partition: int, start: int,
               end: int) -> Applied:
    """Copy [start, end) of the source partition to the replica and advance the replica's
    cursor in one transaction of the replica's store, for a link the caller read
    (`ReplicaLinkQuerySet.gateway_link`); the caller sends any wake-up. No
    produceperm check: gateways publish to replicas with implicit authority (DESIGN.md
    invariant 6). Returns what was newly applied: messages (`count`) and their logical
    bytes, both 0 for a redelivered batch (the replica trims what it already holds)."""
    spec = BatchSpec(link.source, link.replica, topic, partition, start, end)
    source, replica = store_for(link.source_cluster), store_for(link.replica_cluster)

    def apply() -> Applied:
        return apply_spec(source, replica, spec, link=str(link_id),
                          max_bytes=settings.REPLICATION_BATCH_BYTES)

    applied = _apply_in_order(apply)
    # One count per batch (a usage figure of the replica's tenant), never per message.
    count_traffic(direction=REPLICATED, stream=link.replica, messages=applied.count,
                  nbytes=applied.bytes)
    return applied


def _apply_in_order(apply: Callable[[], Applied]) -> Applied:
    for wait in MISORDER_WAITS:
        try:
            return apply()
        except Misordered:
            time.sleep(wait)
    return apply()  # Misordered still: the previous batch is lost, not late; re-planned
