"""Redis under Sentinel (bench/hagroup): the master killed -9 with its files; the engine's
client, Celery's broker transport, the channel layer and the cache, all given the one
sentinel:// REDIS_URL, reach the promoted replica with no manual step, and the old master,
started again, rejoins as a replica."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import redis
from channels_redis.pubsub import RedisPubSubChannelLayer
from kombu import Connection

from portal.cache import ReusingRedisCache
from replication.engine.redisurl import celery_broker, channel_host, redis_from_url

pytestmark = pytest.mark.slow


def _eventually(call: Callable[[], Any], timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except (redis.RedisError, OSError):
            assert time.monotonic() < deadline, "Redis did not come back through the sentinels"
            time.sleep(0.2)


def _channel_round_trip(url: str) -> dict:
    async def trip() -> dict:
        layer = RedisPubSubChannelLayer(hosts=[channel_host(url)], prefix=uuid.uuid4().hex)
        try:
            channel = await layer.new_channel()
            await layer.group_add("g", channel)
            await asyncio.sleep(0.2)
            await layer.group_send("g", {"type": "hello"})
            return await asyncio.wait_for(layer.receive(channel), 5)
        finally:
            await layer.flush()
    return asyncio.run(trip())


def _celery_round_trip(url: str) -> Any:
    broker, options = celery_broker(url)
    with Connection(broker, transport_options=options) as conn:
        queue = conn.SimpleQueue(f"q-{uuid.uuid4().hex}")
        queue.put({"task": "ping"})
        message = queue.get(timeout=5)
        message.ack()
        queue.close()
        return message.payload


def test_redis_master_killed_every_client_follows_the_sentinels(ha_group):
    url = ha_group.redis_url()
    client = redis_from_url(url, socket_connect_timeout=2, socket_timeout=2)
    client.set("before", "kept")
    assert client.wait(1, 2000) == 1  # on the replica before the master dies
    old = ha_group.redis_master()
    name = f"redis{[ha_group.ports.redis(i) for i in range(2)].index(old[1])}"
    ha_group.kill(name, wipe=True)
    died = time.monotonic()

    _eventually(lambda: client.set("after", "written"))
    print(f"first Redis write {time.monotonic() - died:.1f}s after the master died")
    assert ha_group.redis_master() != old
    assert client.get("before") == b"kept"
    assert _eventually(lambda: _celery_round_trip(url)) == {"task": "ping"}
    assert _eventually(lambda: _channel_round_trip(url))["type"] == "hello"
    cache = ReusingRedisCache([url], {"KEY_PREFIX": "t"})
    _eventually(lambda: cache.set("k", "v"))
    assert cache.get("k") == "v"

    ha_group.start(name)  # rejoins as a replica of the promoted one
    ha_group.wait_healthy(60)
    assert ha_group.redis_master() != old
