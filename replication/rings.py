"""Capped rings of samples in Django's cache: the lag recorder's, one a replica link
(replication/lag_history.py), and the throughput recorder's, one a stream and one a cluster
(operations/throughput.py). A sample is a list of `fields` integers, kept packed (8 bytes
each).

On Redis (production) a ring is a list of packed samples: a recorder's pass appends every
ring's sample, trims it and renews its expiry in one script call that reads nothing back.
Reading and writing whole rings instead moved megabytes every few seconds: 500 links' rings
of 720 samples were 14 MB each way every 5 s, the largest part of an idle deployment's cost
(issue 33). On any other cache (the embedded default's in-process one) a ring is one packed
bytes value, read and written whole; each recorder is its rings' one writer (a beat entry runs
one at a time), so that needs no lock. A lost sample after a crash only leaves a gap.
"""

from __future__ import annotations

import array
import itertools
from collections.abc import Hashable, Iterable, Sequence

from django.core.cache import caches
from django.core.cache.backends.redis import RedisCache

Point = list[int]

# Each key's sample appended, the ring trimmed to its newest ARGV[1] and kept ARGV[2] seconds.
# A key an earlier version left as a string (a pickled ring) is replaced.
_APPEND = """
for i, key in ipairs(KEYS) do
  if redis.call('TYPE', key).ok ~= 'list' then redis.call('DEL', key) end
  redis.call('RPUSH', key, ARGV[i + 2])
  redis.call('LTRIM', key, -tonumber(ARGV[1]), -1)
  redis.call('EXPIRE', key, ARGV[2])
end
"""


def pack(points: Iterable[Point]) -> bytes:
    return array.array("q", itertools.chain.from_iterable(points)).tobytes()


class Rings:
    """The rings named `prefix` + an id, of samples of `fields` integers, each keeping its
    newest `most` for `keep_seconds`, in the cache the calling thread uses now."""

    def __init__(self, prefix: str, *, fields: int, most: int, keep_seconds: int) -> None:
        self.prefix, self.fields, self.most, self.keep = prefix, fields, most, keep_seconds
        self.cache = caches["default"]
        self.client = (self.cache._cache.get_client(write=True)
                       if isinstance(self.cache, RedisCache) else None)

    def key(self, ring: Hashable) -> str:
        return f"{self.prefix}{ring}"

    def _stored(self, ring: Hashable) -> str:
        return self.cache.make_and_validate_key(self.key(ring))

    def unpack(self, value: bytes) -> list[Point]:
        flat = array.array("q", value).tolist()
        return [flat[at:at + self.fields] for at in range(0, len(flat), self.fields)]

    def append(self, points: dict[Hashable, Point]) -> None:
        """One sample added to each ring named in `points`."""
        if self.client is not None:
            self.client.register_script(_APPEND)(
                keys=[self._stored(ring) for ring in points],
                args=[self.most, self.keep, *(pack([point]) for point in points.values())])
            return
        size = self.most * self.fields * 8
        held = self.cache.get_many([self.key(ring) for ring in points])
        self.cache.set_many({self.key(ring): (held.get(self.key(ring), b"") + pack([point]))[
            -size:] for ring, point in points.items()}, timeout=self.keep)

    def fill(self, rings: dict[Hashable, list[Point]]) -> None:
        """Whole rings written at once (the benchmarks' hour-old deployments)."""
        if self.client is None:
            self.cache.set_many({self.key(ring): pack(points) for ring, points in rings.items()},
                                timeout=self.keep)
            return
        pipe = self.client.pipeline(transaction=False)
        for ring, points in rings.items():
            pipe.delete(self._stored(ring))
            pipe.rpush(self._stored(ring), *(pack([point]) for point in points))
            pipe.expire(self._stored(ring), self.keep)
        pipe.execute()

    def read(self, rings: Sequence[Hashable], *, last: bool = False) -> dict[Hashable, list[Point]]:
        """Each ring's samples, oldest first (or only its last), for the rings that have one."""
        if self.client is None:
            held = self.cache.get_many([self.key(ring) for ring in rings])
            packed = {ring: held[self.key(ring)][-self.fields * 8 if last else 0:]
                      for ring in rings if held.get(self.key(ring))}
        else:
            pipe = self.client.pipeline(transaction=False)
            for ring in rings:
                pipe.lrange(self._stored(ring), -1 if last else 0, -1)
            packed = {ring: b"".join(samples)
                      for ring, samples in zip(rings, pipe.execute(), strict=True) if samples}
        return {ring: self.unpack(value) for ring, value in packed.items()}
