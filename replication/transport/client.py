"""The Redis connection every transport of a process shares, and the key namespace that keeps
deployments (and test runs) sharing one Redis apart."""

from __future__ import annotations

from functools import cache

import redis
from django.conf import settings

from replication.engine.redisurl import redis_from_url


def namespace() -> str:
    return settings.STREAMGATE_NAMESPACE


@cache
def redis_client(url: str) -> redis.Redis:
    # A connect timeout, so a produce never hangs on an unreachable Redis (it logs and goes on);
    # no read timeout, which would cut the replicator's long BLMPOP.
    return redis_from_url(url, health_check_interval=30, socket_connect_timeout=2)


# Seconds a wake-up, an acknowledgement or a gateway's batch list outlives its last push: a
# replicator down that long re-plans everything anyway, a gateway gone that long is gone.
SIGNAL_TTL = 300
