"""Which Kafka listeners are live: presence as the gateways keep it (replication/transport/).

Each listener beats every KAFKA_HEARTBEAT_SECONDS into one Redis sorted set per scope (the
cluster it serves, or every cluster), its entry scored with the time it expires; the live
ones are the entries not yet expired. A listener that is killed stops beating and drops out a
TTL later; one that stops cleanly removes itself at once. Embedded mode (no Redis) keeps the
set in process memory, which the listener's thread and the portal share there.

The listeners write (broker/nodes.py beats for each one); the pages that tell users where to
connect read, through `live_listeners`, without importing the listener.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import astuple, dataclass

from django.conf import settings

from replication.transport.client import namespace, redis_client


@dataclass(frozen=True, order=True)
class Node:
    """A listener as clients reach it: its broker id and advertised address."""

    node_id: int
    host: str
    port: int


_local: dict[str, dict[Node, float]] = {}
_local_lock = threading.Lock()


def _scope_key(scope: str) -> str:
    return f"{namespace()}sg:kafka:{scope}"


def _key(cluster: str | None) -> str:
    return _scope_key(cluster or "*")


def beat(node: Node, cluster: str | None, ttl: float) -> list[Node]:
    """Refresh the entry of `node`, serving `cluster` (None: every cluster), for `ttl` seconds;
    the live nodes of its scope."""
    now = time.time()
    if not settings.REDIS_URL:
        with _local_lock:
            entries = _local.setdefault(_key(cluster), {})
            entries[node] = now + ttl
            return sorted(n for n, until in entries.items() if until > now)
    key, member = _key(cluster), json.dumps(astuple(node))
    pipe = redis_client(settings.REDIS_URL).pipeline(transaction=False)
    pipe.zadd(key, {member: now + ttl}).zremrangebyscore(key, "-inf", now)
    pipe.expire(key, int(ttl * 10) + 1).zrangebyscore(key, now, "+inf")
    members = pipe.execute()[-1]
    return sorted(Node(*json.loads(m)) for m in members)


def live_listeners(scopes: list[str]) -> dict[str, list[Node]]:
    """The live listeners of each scope (a cluster name, or "*" for those serving every
    cluster), for the pages that tell users where to connect."""
    now = time.time()
    if not settings.REDIS_URL:
        with _local_lock:
            return {scope: sorted(n for n, until in _local.get(_scope_key(scope), {}).items()
                                  if until > now) for scope in scopes}
    pipe = redis_client(settings.REDIS_URL).pipeline(transaction=False)
    for scope in scopes:
        pipe.zrangebyscore(_scope_key(scope), now, "+inf")
    found = pipe.execute()
    return {scope: sorted(Node(*json.loads(m)) for m in members)
            for scope, members in zip(scopes, found, strict=True)}


def leave(node: Node, cluster: str | None) -> None:
    """Remove the entry of `node` at once (a listener stopping cleanly)."""
    if not settings.REDIS_URL:
        with _local_lock:
            _local.get(_key(cluster), {}).pop(node, None)
        return
    redis_client(settings.REDIS_URL).zrem(_key(cluster), json.dumps(astuple(node)))
