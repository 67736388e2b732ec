"""The replicator's batches in flight: per (link, topic, partition), up to REPLICATION_WINDOW
consecutive batches sent to one gateway, each known by the ticket its acknowledgement names,
and whether an acknowledgement leaves more of the partition to send than is in flight (the
last plan's high watermarks) or the partition can wait for its next wake-up."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.conf import settings

from replication.engine.replicator import BatchSpec
from replication.transport import GatewayId

Key = tuple[int, str, int]  # (link id, topic, partition)


@dataclass
class InFlight:
    spec: BatchSpec
    gateway: GatewayId
    incarnation: str
    deadline: float
    ticket: str = ""


@dataclass
class Flights:
    # Per partition, its batches in flight in offset order, all sent to one gateway.
    inflight: dict[Key, list[InFlight]] = field(default_factory=dict)
    tickets: dict[str, Key] = field(default_factory=dict)
    # Per link, the source's high watermark of each partition its last plan found lagging: an
    # acknowledgement re-plans the link only if that plan saw more than is in flight or applied.
    highs: dict[int, dict[tuple[str, int], int]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.inflight)

    def of(self, key: Key) -> list[InFlight]:
        return self.inflight.get(key, [])

    def add(self, key: Key, flight: InFlight) -> None:
        self.inflight.setdefault(key, []).append(flight)
        self.tickets[flight.ticket] = key

    def key_of(self, ticket: str) -> Key | None:
        """The partition of a ticket still in flight, which stops counting as one; None for
        a batch already given up (re-sent elsewhere: its apply was a no-op or harmless)."""
        return self.tickets.pop(ticket, None)

    def land(self, key: Key, ticket: str, now: float | None = None) -> InFlight | None:
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

    def more(self, key: Key, landed: InFlight | None) -> bool:
        """Whether the partition has more to send than is in flight, as far as the last plan
        knows. New data past it comes with a wake-up of the source stream (and the sweep)."""
        flights, highs = self.inflight.get(key), self.highs.get(key[0])
        sent = flights[-1].spec.end if flights else landed.spec.end if landed else None
        return sent is None or highs is None or highs.get(key[1:], 0) > sent

    def abandon(self, key: Key) -> None:
        for flight in self.inflight.pop(key, ()):
            self.tickets.pop(flight.ticket, None)

    def late(self, now: float) -> list[tuple[Key, InFlight]]:
        """Each partition with a flight past its deadline, and that flight."""
        found = ((key, next((f for f in flights if f.deadline <= now), None))
                 for key, flights in self.inflight.items())
        return [(key, flight) for key, flight in found if flight is not None]

    def deadlines(self) -> list[float]:
        return [f.deadline for flights in self.inflight.values() for f in flights]

    def keep(self, moving: set[int]) -> None:
        self.highs = {i: h for i, h in self.highs.items() if i in moving}
