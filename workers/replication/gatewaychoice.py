"""How the replicator picks a destination cluster's gateway for a batch: the live ones (read
at most every LIVE_REFRESH seconds per cluster), round-robin, skipping those that missed an
acknowledgement (suspect) until they restart; a partition's batches in flight stay with the
gateway they went to, whose queue keeps them in order."""

from __future__ import annotations

from dataclasses import dataclass, field

from replication.services.gateway_status import gateways_configured
from replication.transport import GatewayId
from replication.transport.liveness import GatewayLiveness
from workers.replication.flights import InFlight

Chosen = tuple[GatewayId, str]  # a live gateway and its incarnation
GATEWAYS_REFRESH = 5.0  # seconds between reads of the configured gateways
# Seconds a read of the live gateways serves. A gateway's presence outlives it by its TTL
# (seconds) anyway, and a dead one is noticed by its missing acknowledgements (suspect).
LIVE_REFRESH = 0.5


@dataclass
class GatewayChoice:
    liveness: GatewayLiveness
    # Gateways that missed an acknowledgement -> (skipped until, their incarnation then).
    suspect: dict[GatewayId, tuple[float, str]] = field(default_factory=dict)
    rr: dict[str, int] = field(default_factory=dict)  # round-robin counter per cluster
    _gateways: dict[str, list[str]] = field(default_factory=dict)
    _gateways_read: float = float("-inf")
    _live: dict[str, tuple[float, list[Chosen]]] = field(default_factory=dict)  # (read at, live)

    def choose(self, cluster: str, now: float) -> Chosen | None:
        """The next live gateway of the cluster, round-robin; None when all are down."""
        live = self._live_gateways(cluster, now)
        if not live:
            return None
        turn = self.rr.get(cluster, 0)
        self.rr[cluster] = turn + 1
        return live[turn % len(live)]

    def sticky(self, flight: InFlight, now: float) -> Chosen | None:
        """The gateway a partition's flights went to, while it is live: its queue keeps the
        partition's batches in order. None once it is down or suspected."""
        chosen = (flight.gateway, flight.incarnation)
        return chosen if chosen in self._live_gateways(flight.gateway[0], now) else None

    def distrust(self, gateway: GatewayId, incarnation: str, until: float) -> None:
        """The gateway missed an acknowledgement: skipped until then, or until it restarts."""
        self.suspect[gateway] = (until, incarnation)

    def _live_gateways(self, cluster: str, now: float) -> list[Chosen]:
        if now - self._gateways_read > GATEWAYS_REFRESH:
            self._gateways, self._gateways_read, self._live = gateways_configured(), now, {}
        read, live = self._live.get(cluster, (float("-inf"), []))
        if now - read > LIVE_REFRESH:
            gateways = [(cluster, name) for name in self._gateways.get(cluster, ())]
            found = self.liveness.live(gateways)
            live = [(g, found[g]) for g in gateways if g in found]
            self._live[cluster] = (now, live)
        return [(g, incarnation) for g, incarnation in live
                if not self._suspected(g, incarnation, now)]

    def _suspected(self, gateway: GatewayId, incarnation: str, now: float) -> bool:
        until, then = self.suspect.get(gateway, (0.0, ""))
        # A restarted gateway (a new incarnation) is trusted again at once.
        return until > now and then == incarnation
