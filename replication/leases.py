"""Several replicators splitting the moving links: who is alive, and a lease per link.

Each replicator beats into presence (Redis in production, this process's memory in the
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
invariant 2; tests/workers/test_replicators.py sends such stale batches).
"""

from __future__ import annotations

import hashlib
import os
import socket
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import redis

if TYPE_CHECKING:
    from replication.presence import Presence

HISTORY_SECONDS = 3600  # a dead replicator stays listed (not alive) this long
WAKE_CHUNK = 1000  # streams per wake-up script call (Lua's unpack has a stack limit)

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
# Wake every live replicator: each has its own dirty set and one-slot signal list, so two
# replicators never take each other's wake-ups.
_WAKE = """
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], now, '+inf')
for _, id in ipairs(ids) do
  local dirty, signal = ARGV[1] .. 'dirty:' .. id, ARGV[1] .. 'signal:' .. id
  redis.call('SADD', dirty, unpack(ARGV, 3))
  redis.call('EXPIRE', dirty, ARGV[2])
  redis.call('LPUSH', signal, 1)
  redis.call('LTRIM', signal, 0, 0)
  redis.call('EXPIRE', signal, ARGV[2])
end
return #ids
"""


@dataclass(frozen=True)
class ReplicatorState:
    """One replicator as presence knows it."""

    id: str
    alive: bool
    heartbeat: float  # seconds since the epoch of its last beat
    links: int = 0  # links it held at that beat
    host: str = ""
    pid: int = 0


def ranked_first(link: int, replicators: Iterable[str]) -> str | None:
    """Rendezvous hashing: the replicator a link belongs to among those alive."""
    def score(replicator: str) -> bytes:
        return hashlib.blake2b(f"{replicator}/{link}".encode(), digest_size=8).digest()
    return max(replicators, key=score, default=None)


def _identity() -> dict[str, str]:
    return {"host": socket.gethostname(), "pid": str(os.getpid())}


class RedisLeases:
    """The replicator registry and link leases in Redis (mixed into RedisPresence)."""

    client: redis.Redis
    prefix: str

    def _scripts(self) -> dict[str, Any]:
        scripts = getattr(self, "_lease_scripts", None)
        if scripts is None:
            scripts = self._lease_scripts = {name: self.client.register_script(text) for name, text
                                             in (("beat", _BEAT), ("lease", _LEASE),
                                                 ("wake", _WAKE))}
        return scripts

    @property
    def _registry(self) -> str:
        return f"{self.prefix}sg:replicators"

    def _info(self, replicator: str) -> str:
        return f"{self.prefix}sg:replicator:{replicator}"

    def _lease_key(self, link: int) -> str:
        return f"{self.prefix}sg:lease:{link}"

    def replicator_beat(self, replicator: str, ttl: float, links: int) -> list[str]:
        fields = [*(v for kv in _identity().items() for v in kv), "links", str(links)]
        live = self._scripts()["beat"](keys=[self._registry, self._info(replicator)],
                                       args=[replicator, int(ttl * 1000), HISTORY_SECONDS, *fields])
        return sorted(v.decode() for v in live)

    def replicator_forget(self, replicator: str) -> None:
        self.client.zrem(self._registry, replicator)
        self.client.delete(self._info(replicator))

    def replicators(self) -> list[ReplicatorState]:
        entries = self.client.zrange(self._registry, 0, -1, withscores=True)
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
        held = self._scripts()["lease"](keys=keys, args=[replicator, int(ttl * 1000), len(want)])
        return {want[i - 1] for i in held}

    def lease_holders(self, links: Iterable[int]) -> dict[int, str]:
        links = list(links)
        if not links:
            return {}
        owners = self.client.mget([self._lease_key(link) for link in links])
        return {link: owner.decode() for link, owner in zip(links, owners, strict=True)
                if owner is not None}

    def _wake_replicators(self, streams: list[str], ttl: int, client: Any = None) -> None:
        """`client`: a pipeline to queue the wake-ups on (sent with the rest of it)."""
        for i in range(0, len(streams), WAKE_CHUNK):
            self._scripts()["wake"](keys=[self._registry],
                                    args=[f"{self.prefix}sg:", ttl, *streams[i:i + WAKE_CHUNK]],
                                    client=client)


@dataclass
class _Held:
    owner: str
    until: float


class LocalLeases:
    """The same in this process's memory (mixed into LocalPresence): the embedded default's
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

    def _live_replicators(self) -> list[str]:
        now = time.monotonic()
        with self._lease_lock:
            return [r for r, (until, _, _) in self._replicators.items() if until > now]


@dataclass
class LinkLeases:
    """A replicator's side of the split: which of the moving links it holds now."""

    presence: Presence
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
            self.peers = self.presence.replicator_beat(self.me, self.ttl, 0)
        for _ in range(2):  # once more when the beat shows a peer came or went
            used = self.peers
            mine = {link for link in moving if self._mine(link)}
            self.held = self.presence.lease(self.me, mine, self.held - mine, self.ttl)
            self.peers = self.presence.replicator_beat(self.me, self.ttl, len(self.held))
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
            self.held |= self.presence.lease(self.me, claim, (), self.ttl)
        return links & self.held

    def leads(self) -> bool:
        """Whether this replicator does the chores one of the live ones is enough for: the
        first ranked for a pseudo-link no real link has (ids start at 1)."""
        return not self.peers or ranked_first(0, self.peers) == self.me

    def close(self) -> None:
        """A clean stop: give every lease back and leave the registry, so the others take
        over at their next tick rather than a lease later."""
        self.presence.lease(self.me, (), self.held, self.ttl)
        self.presence.replicator_forget(self.me)
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


def replicator_rows(signals: Presence) -> list[dict[str, Any]]:
    """`replicator list` (and the overview's card, and /metrics): every replicator heard of
    in the last hour, the live ones first, with the links it held at its last beat."""
    now = time.time()
    states = sorted(signals.replicators(), key=lambda s: (not s.alive, s.host, s.pid, s.id))
    return [{"replicator": s.id, "host": s.host, "pid": s.pid, "alive": s.alive,
             "linksHeld": s.links if s.alive else 0, "lastHeartbeat": int(s.heartbeat * 1000),
             "heartbeatAge": round(max(now - s.heartbeat, 0.0), 3)} for s in states]
