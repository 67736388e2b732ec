"""REDIS_URL as a plain server (redis://host:port/db) or as Redis Sentinel's group
(sentinel://host:port,host:port,.../master-name/db): every Redis client of a process (the
engine's transports, Celery's broker, the channel layer, Django's cache) finds the master
through the sentinels, and follows it when they fail it over."""

from __future__ import annotations

from typing import Any, NamedTuple
from urllib.parse import unquote, urlsplit

import redis
from redis.sentinel import Sentinel


class SentinelURL(NamedTuple):
    sentinels: list[tuple[str, int]]
    master: str
    db: int
    password: str | None


def parse_sentinel(url: str) -> SentinelURL | None:
    """The sentinels, master name and database of a sentinel:// URL; None for any other URL.
    ValueError naming the expected form when it is malformed."""
    if not url.startswith("sentinel://"):
        return None
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")
    password = unquote(netloc[0].partition(":")[2]) or None if netloc[0] else None
    path = [p for p in parts.path.split("/") if p]
    try:
        hosts = [_host_port(h) for h in netloc[2].split(",") if h]
        if not hosts or len(path) not in (1, 2):
            raise ValueError
        return SentinelURL(hosts, path[0], int(path[1]) if len(path) == 2 else 0, password)
    except ValueError:
        raise ValueError(f"bad Redis Sentinel URL {url!r}: use "
                         "sentinel://host:port,host:port/master-name/db") from None


def _host_port(text: str) -> tuple[str, int]:
    host, colon, port = text.rpartition(":")
    return (host, int(port)) if colon else (text, 26379)


def redis_from_url(url: str, **kwargs: Any) -> redis.Redis:
    """redis.Redis.from_url, or the master a sentinel URL's sentinels name (re-asked on every
    new connection, so a failover costs a reconnect)."""
    found = parse_sentinel(url)
    if found is None:
        return redis.Redis.from_url(url, **kwargs)
    return _sentinel(found, kwargs).master_for(found.master, db=found.db,
                                               password=found.password, **kwargs)


def sentinel_pool(url: str, **kwargs: Any) -> redis.ConnectionPool:
    """A connection pool to the sentinels' master (Django's cache builds its clients on it)."""
    found = parse_sentinel(url)
    assert found is not None
    return redis.sentinel.SentinelConnectionPool(
        found.master, _sentinel(found, kwargs), db=found.db, password=found.password, **kwargs)


def _sentinel(found: SentinelURL, kwargs: dict[str, Any]) -> Sentinel:
    timeout = kwargs.get("socket_connect_timeout", 2)
    return Sentinel(found.sentinels, sentinel_kwargs={"socket_timeout": timeout,
                                                      "socket_connect_timeout": timeout})


def celery_broker(url: str) -> tuple[str, dict[str, Any]]:
    """Celery's broker URL and transport options: kombu's sentinel transport takes each
    sentinel as a URL of its own, separated by ';', and the master's name as an option."""
    found = parse_sentinel(url)
    if found is None:
        return url, {}
    auth = f":{found.password}@" if found.password else ""
    urls = ";".join(f"sentinel://{auth}{h}:{p}/{found.db}" for h, p in found.sentinels)
    return urls, {"master_name": found.master}


def channel_host(url: str) -> str | dict[str, Any]:
    """A channels-redis `hosts` entry: the URL, or its sentinels and master name."""
    found = parse_sentinel(url)
    if found is None:
        return url
    return {"sentinels": found.sentinels, "master_name": found.master, "db": found.db,
            "password": found.password}


def address(url: str) -> str:
    """Where Redis is, for messages, never its password: host:port, or the sentinels'
    master."""
    found = parse_sentinel(url)
    if found is None:
        parts = urlsplit(url)
        return f"{parts.hostname}:{parts.port or 6379}"
    return f"master {found.master} of sentinels " + ",".join(f"{h}:{p}" for h, p in
                                                            found.sentinels)
