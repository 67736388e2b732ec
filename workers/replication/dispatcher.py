"""Where the replicator's planned batches go: the partition's window of flights (flights.py),
a live gateway of the destination (gatewaychoice.py, sticky while the partition has batches in
flight), the link's throttle (throttle.py), and the outbox the next wait sends in one round
trip. It holds these as separate objects, each with its own fields; the loop (loop.py) decides
what to plan and what a refusal or a timeout means for a link."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import structlog
from django.conf import settings

from replication.engine.replicator import Backlog, BatchSpec, cut_batches
from replication.models import MovingLink
from replication.transport import GatewayId
from replication.transport.liveness import GatewayLiveness
from workers.replication.flights import Flights, InFlight, Key
from workers.replication.gatewaychoice import Chosen, GatewayChoice
from workers.replication.throttle import Throttles

log = structlog.get_logger(__name__)
Outbox = list[tuple[GatewayId, dict[str, Any]]]


@dataclass
class Dispatcher:
    liveness: GatewayLiveness
    inbox: str  # where the gateways acknowledge
    flights: Flights = field(default_factory=Flights)
    throttles: Throttles = field(default_factory=Throttles)
    choice: GatewayChoice = field(init=False)
    # Batches cut this step, sent with the next wait (one round trip): see Replicator._wait.
    outbox: Outbox = field(default_factory=list)

    def __post_init__(self) -> None:
        self.choice = GatewayChoice(self.liveness)

    def window(self, link: MovingLink, lag: Backlog) -> list[BatchSpec]:
        """The partition's next batches, as many as its window of flights has room for. A
        partial batch only when nothing of the partition is in flight: it grows meanwhile."""
        flights = self.flights.of((link.id, lag.topic, lag.stats.partition))
        room = settings.REPLICATION_WINDOW - len(flights)
        if room <= 0:
            return []
        after = {lag.key: flights[-1].spec.end} if flights else None
        limits = (settings.REPLICATION_BATCH_MESSAGES, settings.REPLICATION_BATCH_BYTES)
        full = lag.step(*limits)
        specs = cut_batches(link.source, link.replica, [lag], after=after,
                            max_messages=limits[0], max_bytes=limits[1])[:room]
        if specs and specs[-1].end - specs[-1].start < full and (flights or len(specs) > 1):
            specs.pop()
        return specs

    def send(self, link: MovingLink, spec: BatchSpec, now: float) -> bool | None:
        """Dispatch one batch; False when the partition must wait (its flights' gateway went
        away, or the throttle), None when no gateway of the destination is live."""
        key = (link.id, spec.topic, spec.partition)
        flights = self.flights.of(key)
        if flights:
            chosen = self.choice.sticky(flights[0], now)
        else:
            chosen = self.choice.choose(link.replica_cluster.name, now)
            if chosen is None:
                return None
        granted = self.throttles.grant(link.id, spec) if link.throttle else spec
        if chosen is None or granted is None:
            return False  # the flights settle first, or a timer brings the link back
        self._dispatch(link, key, granted, chosen, now)
        return granted == spec  # cut by the throttle: the rest waits for tokens

    def _dispatch(self, link: MovingLink, key: Key, spec: BatchSpec, chosen: Chosen,
                  now: float) -> None:
        ticket = uuid.uuid4().hex
        timeout = settings.REPLICATION_ACK_TIMEOUT
        # Registered before sending: in embedded mode the batch applies inside the send.
        gateway, incarnation = chosen
        self.flights.add(key, InFlight(spec, gateway, incarnation, now + timeout, ticket))
        self.outbox.append((gateway, {
            "link": link.id, "topic": spec.topic, "partition": spec.partition,
            "start": spec.start, "end": spec.end, "ticket": ticket, "reply_to": self.inbox,
            # A batch still queued when its ack is long overdue was sent elsewhere already.
            "expires": time.time() + timeout * 3}))

    def take_outbox(self) -> Outbox:
        outbox, self.outbox = self.outbox, []
        return outbox

    def unsent(self, outbox: Outbox) -> list[int]:
        """The batches could not be sent (the broker is down): no longer in flight, they are
        sent again later (twice is harmless). Returns their links."""
        for _gateway, batch in outbox:
            key = self.flights.key_of(batch["ticket"])
            if key is not None:
                self.flights.land(key, batch["ticket"])
        return [batch["link"] for _gateway, batch in outbox]

    def expire(self, now: float) -> list[tuple[Key, InFlight]]:
        """Partitions with a batch not acknowledged in time: their flights are given up and
        the gateway counts as down for a while (if it applies them late, the trim makes that a
        no-op). Returns each partition and its late flight."""
        late = self.flights.late(now)
        for key, flight in late:
            self.flights.abandon(key)
            self.choice.distrust(flight.gateway, flight.incarnation,
                                 now + settings.REPLICATION_SUSPECT_SECONDS)
        return late

    def due(self) -> list[float]:
        """When the dispatcher needs the loop: flights' deadlines, throttled links' refills."""
        return [*self.flights.deadlines(), *self.throttles.waiting.values()]
