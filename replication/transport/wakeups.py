"""Wake-ups: a stream has new data (or its links or cursors changed), and every live
replicator hears of it. In Redis a wake-up adds the stream to each live replicator's
`sg:dirty:<id>` set and pushes its one-slot `sg:signal:<id>` list (mailbox.py), so a thousand
produces between two of its rounds wake it once; sets and lists rather than pub/sub, so a
wake-up sent while a replicator restarts is still there when it comes back (or expires, and
its start-up sweep covers it)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from replication.transport.client import SIGNAL_TTL
from replication.transport.leases import LocalLeases, RedisLeases
from replication.transport.mailbox import LocalMailbox

WAKE_CHUNK = 1000  # streams per wake-up script call (Lua's unpack has a stack limit)
# Wake every live replicator (the registry, leases.py): each has its own dirty set and
# one-slot signal list, so two replicators never take each other's wake-ups.
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


class WakeUps(Protocol):
    def wake(self, streams: Iterable[str]) -> None: ...


class RedisWakeUps:
    def __init__(self, leases: RedisLeases) -> None:
        self.registry, self.prefix = leases.registry, leases.prefix
        self._wake = leases.client.register_script(_WAKE)

    def wake(self, streams: Iterable[str]) -> None:
        self.queue(None, list(streams))

    def queue(self, pipe: Any, streams: list[str]) -> None:
        """`pipe`: a pipeline to queue the wake-ups on (sent with the rest of it); None sends
        them at once."""
        for i in range(0, len(streams), WAKE_CHUNK):
            self._wake(keys=[self.registry],
                       args=[f"{self.prefix}sg:", SIGNAL_TTL, *streams[i:i + WAKE_CHUNK]],
                       client=pipe)


class LocalWakeUps:
    def __init__(self, leases: LocalLeases, mailbox: LocalMailbox) -> None:
        self.leases, self.mailbox = leases, mailbox

    def wake(self, streams: Iterable[str]) -> None:
        self.mailbox.wake(self.leases.live_replicators(), set(streams))
