"""A replicator's side of the split of the moving links between the live replicators
(replication/transport/leases.py): which of them it holds now, renewed every quarter of the
lease, and whether it is the one of the live replicators that does the shared chores."""

from __future__ import annotations

from dataclasses import dataclass, field

from replication.transport.leases import Leases, ranked_first


@dataclass
class LinkLeases:
    """A replicator's side of the split: which of the moving links it holds now."""

    registry: Leases
    me: str
    ttl: float
    held: set[int] = field(default_factory=set)
    peers: list[str] = field(default_factory=list)  # the live replicators at the last beat
    valid_until: float = float("-inf")  # held leases lapse by then unless renewed
    next_tick: float = 0.0
    _ranked: dict[int, bool] = field(default_factory=dict)  # link -> ranked to this one
    _ranked_for: list[str] = field(default_factory=list)  # the peers _ranked was made with

    def tick(self, moving: set[int], now: float) -> set[int]:
        """Renew, take and give back leases, then beat; returns the links newly held, which
        the replicator plans at once (a dead peer's, say). Leases before the beat: a peer that
        stops beating has let its leases go by the time the others see it dead."""
        before = self.held
        if not self.peers:  # the first tick: who else is alive decides the split
            self.peers = self.registry.replicator_beat(self.me, self.ttl, 0)
        for _ in range(2):  # once more when the beat shows a peer came or went
            used = self.peers
            mine = {link for link in moving if self._mine(link)}
            self.held = self.registry.lease(self.me, mine, self.held - mine, self.ttl)
            self.peers = self.registry.replicator_beat(self.me, self.ttl, len(self.held))
            if self.peers == used:
                break
        self.valid_until, self.next_tick = now + self.ttl, now + self.ttl / 4
        return self.held - before

    def holds(self, links: set[int], now: float) -> set[int]:
        """Those of `links` this replicator may plan now: held, or ranked to it and free
        (a link that started moving since the last tick is taken at once, not a tick later)."""
        if now >= self.valid_until:
            return set()  # renewals failed (presence unreachable): another may hold them now
        claim = {link for link in links - self.held if self._mine(link)}
        if claim:
            self.held |= self.registry.lease(self.me, claim, (), self.ttl)
        return links & self.held

    def leads(self) -> bool:
        """Whether this replicator does the chores one of the live ones is enough for: the
        first ranked for a pseudo-link no real link has (ids start at 1)."""
        return not self.peers or ranked_first(0, self.peers) == self.me

    def close(self) -> None:
        """A clean stop: give every lease back and leave the registry, so the others take
        over at their next tick rather than a lease later."""
        self.registry.lease(self.me, (), self.held, self.ttl)
        self.registry.replicator_forget(self.me)
        self.held = set()

    def _mine(self, link: int) -> bool:
        # Ranks change only with the peers: kept between ticks (hashing every moving link at
        # every tick was most of the tick's CPU).
        if self._ranked_for != self.peers:
            self._ranked, self._ranked_for = {}, list(self.peers)
        mine = self._ranked.get(link)
        if mine is None:
            mine = self._ranked[link] = ranked_first(link, self.peers) == self.me
        return mine
