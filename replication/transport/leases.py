"""Several replicators splitting the moving links: who is alive, and a lease per link.

Each replicator beats into the registry (Redis in production, this process's memory in the
embedded default): an entry that expires `ttl` seconds after its last beat, with what it holds,
for `replicator list`, the overview page and /metrics. Each link goes to the live replicator
ranked first for it by rendezvous hashing (so adding or losing one moves only its share), and
that replicator takes a lease on it: a key naming it, expiring `ttl` after its last renewal.
A replicator plans and sends batches only for links it holds. One killed -9 stops renewing:
its entry and its leases expire together, and at their next tick (a quarter of `ttl`) the
others rank its links to themselves and take them.

The lease keeps two replicators from doing the same work; it is not what keeps replicas
correct. A replicator that lost its lease without knowing it (paused, cut off) and still sends
a batch changes nothing a gateway would not refuse anyway: every apply starts from the
replica partition's end, trims what the replica holds and refuses a gap (DESIGN.md,
invariant 2; tests/workers/test_replicators.py sends such stale batches). The replicator's
side of the split is workers/replication/leases.py.
"""

from __future__ import annotations

import hashlib
import os
import socket
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import redis

HISTORY_SECONDS = 3600  # a dead replicator stays listed (not alive) this long

# Beat: enter or refresh this replicator, forget those dead for an hour, return the live ones.
# Server time, so replicators on nodes with skewed clocks agree on who expired.
_BEAT = """
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[3]) * 1000)
redis.call('HSET', KEYS[2], 'heartbeat', now, unpack(ARGV, 4))
redis.call('EXPIRE', KEYS[2], ARGV[3])
return redis.call('ZRANGEBYSCORE', KEYS[1], now, '+inf')
"""
# Lease: KEYS are the wanted links' lease keys, then the ones to give back; ARGV[3] how many
# are wanted. Taken when free, renewed when ours, left alone when another's.
_LEASE = """
local held = {}
local wanted = tonumber(ARGV[3])
for i = 1, #KEYS do
  local owner = redis.call('GET', KEYS[i])
  if i <= wanted then
    if not owner then
      redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
      held[#held + 1] = i
    elseif owner == ARGV[1] then
      redis.call('PEXPIRE', KEYS[i], ARGV[2])
      held[#held + 1] = i
    end
  elseif owner == ARGV[1] then
    redis.call('DEL', KEYS[i])
  end
end
return held
"""
@dataclass(frozen=True)
class ReplicatorState:
    """One replicator as the registry knows it."""

    id: str
    alive: bool
    heartbeat: float  # seconds since the epoch of its last beat
    links: int = 0  # links it held at that beat
    host: str = ""
    pid: int = 0


class Leases(Protocol):
    def replicator_beat(self, replicator: str, ttl: float, links: int) -> list[str]:
        """Alive `ttl` seconds more, holding `links`; returns the live replicators' ids."""
        ...

    def replicator_forget(self, replicator: str) -> None: ...

    def replicators(self) -> list[ReplicatorState]:
        """Every replicator heard of in the last hour, alive or not."""
        ...

    def lease(self, replicator: str, want: Iterable[int], release: Iterable[int],
              ttl: float) -> set[int]:
        """Take or renew the leases of `want` (those no other replicator holds) for `ttl`
        seconds, give back `release`; returns the links of `want` now held."""
        ...

    def lease_holders(self, links: Iterable[int]) -> dict[int, str]:
        """Which replicator holds each of `links` now (those leased)."""
        ...


def ranked_first(link: int, replicators: Iterable[str]) -> str | None:
    """Rendezvous hashing: the replicator a link belongs to among those alive."""
    def score(replicator: str) -> bytes:
        return hashlib.blake2b(f"{replicator}/{link}".encode(), digest_size=8).digest()
    return max(replicators, key=score, default=None)


def _identity() -> dict[str, str]:
    return {"host": socket.gethostname(), "pid": str(os.getpid())}


class RedisLeases:
    """The replicator registry and link leases in Redis."""

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self.client, self.prefix = client, prefix
        # The live replicators, whose wake-ups replication/transport/wakeups.py sends.
        self.registry = f"{prefix}sg:replicators"
        self._beat = client.register_script(_BEAT)
        self._lease = client.register_script(_LEASE)

    def _info(self, replicator: str) -> str:
        return f"{self.prefix}sg:replicator:{replicator}"

    def _lease_key(self, link: int) -> str:
        return f"{self.prefix}sg:lease:{link}"

    def replicator_beat(self, replicator: str, ttl: float, links: int) -> list[str]:
        fields = [*(v for kv in _identity().items() for v in kv), "links", str(links)]
        live = self._beat(keys=[self.registry, self._info(replicator)],
                                       args=[replicator, int(ttl * 1000), HISTORY_SECONDS, *fields])
        return sorted(v.decode() for v in live)

    def replicator_forget(self, replicator: str) -> None:
        self.client.zrem(self.registry, replicator)
        self.client.delete(self._info(replicator))

    def replicators(self) -> list[ReplicatorState]:
        entries = self.client.zrange(self.registry, 0, -1, withscores=True)
        seconds, micros = self.client.time()
        now = seconds * 1000 + micros // 1000
        pipe = self.client.pipeline(transaction=False)
        for member, _ in entries:
            pipe.hgetall(self._info(member.decode()))
        found = []
        for (member, until), info in zip(entries, pipe.execute(), strict=True):
            info = {k.decode(): v.decode() for k, v in info.items()}
            found.append(ReplicatorState(
                member.decode(), until > now, int(info.get("heartbeat", 0)) / 1000,
                int(info.get("links", 0)), info.get("host", ""), int(info.get("pid", 0))))
        return found

    def lease(self, replicator: str, want: Iterable[int], release: Iterable[int],
              ttl: float) -> set[int]:
        want, release = list(want), list(release)
        if not want and not release:
            return set()
        keys = [self._lease_key(link) for link in (*want, *release)]
        held = self._lease(keys=keys, args=[replicator, int(ttl * 1000), len(want)])
        return {want[i - 1] for i in held}

    def lease_holders(self, links: Iterable[int]) -> dict[int, str]:
        links = list(links)
        if not links:
            return {}
        owners = self.client.mget([self._lease_key(link) for link in links])
        return {link: owner.decode() for link, owner in zip(links, owners, strict=True)
                if owner is not None}


@dataclass
class _Held:
    owner: str
    until: float


class LocalLeases:
    """The same in this process's memory: the embedded default's
    one replicator thread, or several Replicator objects of one test."""

    def __init__(self) -> None:
        # Per replicator: (alive until, on the monotonic clock; last beat, epoch; links held).
        self._replicators: dict[str, tuple[float, float, int]] = {}
        self._leases: dict[int, _Held] = {}
        self._lease_lock = threading.Lock()

    def replicator_beat(self, replicator: str, ttl: float, links: int) -> list[str]:
        now = time.monotonic()
        with self._lease_lock:
            self._replicators[replicator] = (now + ttl, time.time(), links)
            self._replicators = {r: entry for r, entry in self._replicators.items()
                                 if entry[0] > now - HISTORY_SECONDS}
            return sorted(r for r, (until, _, _) in self._replicators.items() if until > now)

    def replicator_forget(self, replicator: str) -> None:
        with self._lease_lock:
            self._replicators.pop(replicator, None)

    def replicators(self) -> list[ReplicatorState]:
        now, identity = time.monotonic(), _identity()
        with self._lease_lock:
            return [ReplicatorState(r, until > now, beat, links, identity["host"],
                                    int(identity["pid"]))
                    for r, (until, beat, links) in sorted(self._replicators.items())]

    def lease(self, replicator: str, want: Iterable[int], release: Iterable[int],
              ttl: float) -> set[int]:
        now, held = time.monotonic(), set()
        with self._lease_lock:
            for link in want:
                current = self._leases.get(link)
                if current is None or current.until <= now or current.owner == replicator:
                    self._leases[link] = _Held(replicator, now + ttl)
                    held.add(link)
            for link in release:
                current = self._leases.get(link)
                if current is not None and current.owner == replicator:
                    del self._leases[link]
        return held

    def lease_holders(self, links: Iterable[int]) -> dict[int, str]:
        now = time.monotonic()
        with self._lease_lock:
            held = {link: self._leases.get(link) for link in links}
        return {link: h.owner for link, h in held.items() if h is not None and h.until > now}

    def live_replicators(self) -> list[str]:
        now = time.monotonic()
        with self._lease_lock:
            return [r for r, (until, _, _) in self._replicators.items() if until > now]


def replicator_rows(leases: Leases) -> list[dict[str, Any]]:
    """`replicator list` (and the overview's card, and /metrics): every replicator heard of
    in the last hour, the live ones first, with the links it held at its last beat."""
    now = time.time()
    states = sorted(leases.replicators(), key=lambda s: (not s.alive, s.host, s.pid, s.id))
    return [{"replicator": s.id, "host": s.host, "pid": s.pid, "alive": s.alive,
             "linksHeld": s.links if s.alive else 0, "lastHeartbeat": int(s.heartbeat * 1000),
             "heartbeatAge": round(max(now - s.heartbeat, 0.0), 3)} for s in states]
