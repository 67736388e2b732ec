"""The replicator's batches in flight: per (link, topic, partition), up to REPLICATION_WINDOW
consecutive batches sent to one gateway, each known by the ticket its acknowledgement names,
and whether an acknowledgement leaves more of the partition to send than is in flight (the
last plan's high watermarks) or the partition can wait for its next wake-up."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from replication.engine.replicator import BatchSpec
from replication.presence import GatewayId

Key = tuple[int, str, int]  # (link id, topic, partition)


@dataclass
class InFlight:
    spec: BatchSpec
    gateway: GatewayId
    incarnation: str
    deadline: float
    ticket: str = ""


class Flights:
    """Mixed into the Replicator, whose fields these are."""

    inflight: dict[Key, list[InFlight]]
    tickets: dict[str, Key]
    highs: dict[int, dict[tuple[str, int], int]]

    def _land(self, key: Key, ticket: str, now: float | None = None) -> InFlight | None:
        """Forget the flight of `ticket`; returns it (None if it was not in flight)."""
        flights = self.inflight.get(key, [])
        landed = next((f for f in flights if f.ticket == ticket), None)
        flights = [f for f in flights if f.ticket != ticket]
        if not flights:
            self.inflight.pop(key, None)
            return landed
        self.inflight[key] = flights
        if now is not None:
            # The rest queued behind it at the same gateway: their time starts now, so a
            # window of batches on a slow (not dead) gateway is not taken for a timeout.
            for flight in flights:
                flight.deadline = max(flight.deadline, now + settings.REPLICATION_ACK_TIMEOUT)
        return landed

    def _more(self, key: Key, landed: InFlight | None) -> bool:
        """Whether the partition has more to send than is in flight, as far as the last plan
        knows. New data past it comes with a wake-up of the source stream (and the sweep)."""
        flights, highs = self.inflight.get(key), self.highs.get(key[0])
        sent = flights[-1].spec.end if flights else landed.spec.end if landed else None
        return sent is None or highs is None or highs.get(key[1:], 0) > sent

    def _abandon(self, key: Key) -> None:
        for flight in self.inflight.pop(key, ()):
            self.tickets.pop(flight.ticket, None)
