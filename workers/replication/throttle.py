"""`-throttle true` on a replica link: token buckets the replicator takes from as it cuts the
link's batches (REPLICATION_THROTTLE_MESSAGES_PER_S and _BYTES_PER_S).

Each bucket holds one second's worth (the burst) and refills continuously. A batch is cut down
to what the buckets hold; when they hold less than a worthwhile batch (a tenth of a second's
worth, or the whole backlog of the partition if smaller) the link waits for a refill instead of
sending dribbles. Waiting is a timer in the replicator, never a sleep, so a throttled link
never delays another link's batches.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from django.conf import settings

from replication.engine.replicator import BatchSpec

QUANTUM_SECONDS = 0.1  # the smallest batch worth sending: this long's worth of the rate


@dataclass
class TokenBucket:
    rate: float  # tokens a second
    tokens: float
    stamp: float  # when tokens was last brought up to date

    @property
    def capacity(self) -> float:
        return self.rate  # a one-second burst

    def refill(self, now: float) -> None:
        self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now

    def wait(self, amount: float) -> float:
        """Seconds until the bucket holds `amount` (at most its capacity)."""
        return max(0.0, (min(amount, self.capacity) - self.tokens) / self.rate)


@dataclass
class Throttle:
    """One throttled link's limits."""

    messages: TokenBucket
    bytes: TokenBucket

    @classmethod
    def full(cls, now: float, *, messages_per_s: float, bytes_per_s: float) -> Throttle:
        return cls(TokenBucket(messages_per_s, messages_per_s, now),
                   TokenBucket(bytes_per_s, bytes_per_s, now))

    def grant(self, spec: BatchSpec, now: float) -> BatchSpec | None:
        """The batch cut to what the buckets allow, its tokens taken; None to wait (`wait`)."""
        self.messages.refill(now)
        self.bytes.refill(now)
        count, size = spec.end - spec.start, _per_message(spec)
        allowed = min(count, int(self.messages.tokens), int(self.bytes.tokens // size))
        if allowed < self._quantum(count, size):
            if not self._full():
                return None
            allowed = 1  # a message bigger than a second's bytes still goes, alone
        self.messages.tokens -= allowed
        self.bytes.tokens -= allowed * size
        return replace(spec, end=spec.start + allowed, size=allowed * size)

    def wait(self, spec: BatchSpec) -> float:
        """Seconds until `grant` would let a batch of `spec` go."""
        count, size = spec.end - spec.start, _per_message(spec)
        quantum = self._quantum(count, size)
        return max(self.messages.wait(quantum), self.bytes.wait(quantum * size), 0.001)

    def _quantum(self, count: int, size: int) -> int:
        by_bytes = int(self.bytes.rate * QUANTUM_SECONDS // size)
        return max(1, min(count, int(self.messages.rate * QUANTUM_SECONDS), by_bytes))

    def _full(self) -> bool:
        return (self.messages.tokens >= self.messages.capacity
                and self.bytes.tokens >= self.bytes.capacity)


def _per_message(spec: BatchSpec) -> int:
    """Average bytes per message (the plan's estimate), at least 1."""
    return max(1, spec.size // max(1, spec.end - spec.start))


@dataclass
class Throttles:
    """Each throttled link's buckets, and when the links waiting for tokens are planned
    again."""

    buckets: dict[int, Throttle] = field(default_factory=dict)
    waiting: dict[int, float] = field(default_factory=dict)  # link -> when tokens allow more
    # Read at each grant, not the replicator step's time: that was taken before the step
    # planned, so a bucket made with it would count as full from before the backlog it cuts.
    clock: Callable[[], float] = time.monotonic

    def grant(self, link_id: int, spec: BatchSpec) -> BatchSpec | None:
        now = self.clock()
        throttle = self.buckets.get(link_id)
        if throttle is None:
            throttle = self.buckets[link_id] = Throttle.full(
                now, messages_per_s=settings.REPLICATION_THROTTLE_MESSAGES_PER_S,
                bytes_per_s=settings.REPLICATION_THROTTLE_BYTES_PER_S)
        granted = throttle.grant(spec, now)
        if granted is None:
            at = now + throttle.wait(spec)
            self.waiting[link_id] = min(self.waiting.get(link_id, at), at)
        return granted

    def refilled(self, now: float) -> set[int]:
        """The throttled links whose buckets refilled enough, to plan again."""
        ready = {link_id for link_id, at in self.waiting.items() if at <= now}
        if ready:
            self.waiting = {i: at for i, at in self.waiting.items() if i not in ready}
        return ready

    def unthrottled(self, link_id: int) -> None:
        self.buckets.pop(link_id, None)  # starts full if throttled again

    def keep(self, moving: set[int]) -> None:
        self.buckets = {i: t for i, t in self.buckets.items() if i in moving}
