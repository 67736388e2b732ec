"""What follows from which gateways are live: "gateway.status" events, and synchronous links
dropping to async where no gateway is left (and back once caught up). The gateways' heartbeat
(gateway.py) and one of the live replicators (loop.py) watch."""

from __future__ import annotations

import time

import structlog

from replication.services.gateway_status import gateways_announce, gateways_configured
from replication.services.sync import links_sync_drop, links_sync_restore
from replication.transport import GatewayId
from replication.transport.liveness import GatewayLiveness

log = structlog.get_logger(__name__)
WATCH_SECONDS = 5.0  # between full presence watches while the live gateways stay the same
Watched = tuple[list[GatewayId], set[GatewayId]]  # configured gateways, the live ones


def gateways_watch(liveness: GatewayLiveness, serving: set[str]) -> Watched:
    """What follows from which gateways are live now: "gateway.status" events for the ones
    that came up or went down, synchronous links dropping to async where no gateway is left
    and, on the clusters in `serving` (the caller's, so live), returning to sync once caught
    up. Any process watching presence may call it; each change happens once. Returns the
    configured gateways and the live ones it saw."""
    configured = [(c, n) for c, names in gateways_configured().items() for n in names]
    live = set(liveness.live(configured))
    gateways_announce(live=live)
    clusters = {cluster for cluster, _ in live}
    links_sync_drop(live_clusters=clusters)
    links_sync_restore(clusters=serving & clusters)
    return configured, live


def presence_watch(liveness: GatewayLiveness,
                   serving: set[str] | None = None) -> Watched | None:
    """gateways_watch, for loops that must go on whatever it meets (a database restarting)."""
    try:
        return gateways_watch(liveness, serving or set())
    except Exception as error:  # a beat or a plan must not fail for what only reports follow
        log.warning("gateway_watch_failed", error=str(error))
        return None


class PresenceWatch:
    """presence_watch when it may find something: when forced, every WATCH_SECONDS (a
    synchronous link that caught up returns to sync then), and whenever the live gateways
    differ from those the last watch saw, which costs one MGET. Its queries were a quarter of
    a gateway's CPU at 5,000 messages/s when every beat ran them (docs/benchmarks-history.md)."""

    def __init__(self, liveness: GatewayLiveness) -> None:
        self.liveness = liveness
        self.seen: Watched | None = None
        self.next = 0.0

    def __call__(self, serving: set[str] | None = None, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now < self.next and self.seen is not None:
            configured, live = self.seen
            try:
                if set(self.liveness.live(configured)) == live:
                    return
            except Exception as error:  # Redis restarting: the full watch says the same
                log.warning("gateway_watch_failed", error=str(error))
                return
        self.seen = presence_watch(self.liveness, serving)
        self.next = now + WATCH_SECONDS
