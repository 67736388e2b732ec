"""Each cluster's message store, opened once per process.

A cluster's store lives where its `store_url` says; when empty, beside the control database:
a PostgreSQL database `<control db>_store_<cluster>` on the same server in production, a
SQLite file under STREAMGATE_DATA_DIR in embedded mode.
"""

from __future__ import annotations

import re
import threading
from urllib.parse import urlencode
from uuid import UUID

from django.conf import settings
from django.db import connection

from replication import placement
from replication.engine.factory import create_database, open_store
from replication.engine.storebase import MessageStore
from replication.models import Cluster
from replication.storerouter import GroupRouter

_stores: dict[str, MessageStore] = {}
# By (cluster name, store URL as configured): working out the default URL reads the
# connection's settings, a few hundredths of a millisecond a gateway spent on every batch.
_by_cluster: dict[tuple[str, str], MessageStore] = {}
_lock = threading.Lock()


def default_store_url(cluster_name: str) -> str:
    safe = re.sub(r"[^a-z0-9_]", "_", cluster_name.lower())
    if connection.vendor != "postgresql":
        return f"sqlite:///{settings.DATA_DIR / 'stores' / f'{safe}.sqlite3'}"
    # The live connection's settings, not DATABASE_URL: under test they name the test database.
    params = connection.settings_dict
    auth = params["USER"] + (f":{params['PASSWORD']}" if params["PASSWORD"] else "")
    return f"postgresql://{auth}@{_hosts(params)}/{params['NAME']}_store_{safe}{_query(params)}"


# libpq's connection options a control-database URL may carry that its stores' URLs keep:
# above all target_session_attrs, so a store beside a replicated control database follows
# its primary too, and the timeouts that let a connection to a primary cut off by a network
# partition fail (and libpq try the next host) instead of waiting on TCP for minutes.
_LIBPQ_OPTIONS = ("target_session_attrs", "load_balance_hosts", "sslmode", "sslrootcert",
                  "connect_timeout", "keepalives", "keepalives_idle", "keepalives_interval",
                  "keepalives_count", "tcp_user_timeout")


def _hosts(params: dict) -> str:
    """host:port, or libpq's multi-host list (a replicated group: HOST "a,b,c" and PORT
    "p1,p2,p3" as django-environ parses postgresql://a:p1,b:p2,c:p3/...)."""
    hosts = (params["HOST"] or "127.0.0.1").split(",")
    ports = str(params["PORT"] or 5432).split(",")
    ports = ports * len(hosts) if len(ports) == 1 else ports
    return ",".join(f"{host}:{port}" for host, port in zip(hosts, ports, strict=True))


def _query(params: dict) -> str:
    options = params.get("OPTIONS") or {}
    kept = {k: options[k] for k in _LIBPQ_OPTIONS if k in options}
    return f"?{urlencode(kept)}" if kept else ""


def store_url(cluster: Cluster) -> str:
    return cluster.store_url or default_store_url(cluster.name)


def store_for(cluster: Cluster) -> MessageStore:
    """The cluster's store; with several store groups, the router over them (issue 33)."""
    view = placement.view_of(cluster.name)
    if view is not None:
        return view.router  # type: ignore[return-value]
    store = _by_cluster.get((cluster.name, cluster.store_url))
    if store is not None:
        return store
    store = open_url(store_url(cluster))
    _by_cluster[(cluster.name, cluster.store_url)] = store
    return store


def open_url(url: str) -> MessageStore:
    """The store at `url`, created if missing and opened once per process."""
    with _lock:
        store = _stores.get(url)
        if store is None:
            create_database(url)
            store = _stores[url] = open_store(
                url, wait=settings.STORE_WAIT_SECONDS, layout=settings.STORE_LAYOUT,
                fetch_cache=settings.FETCH_CACHE_BYTES)
    return store


def group_store(cluster: Cluster, url: str) -> MessageStore:
    """A store group's store: `url`, or blank for the cluster's own store as before groups."""
    return open_url(url or store_url(cluster))


def _open_group(cluster_store_url: str, url: str, name: str) -> MessageStore:
    return group_store(Cluster(name=name, store_url=cluster_store_url), url)


def _resolve_group(cluster_store_url: str, url: str, name: str) -> str:
    return url or store_url(Cluster(name=name, store_url=cluster_store_url))


def job_side(cluster: Cluster, stream: UUID) -> tuple[str, tuple[tuple[str, int, str], ...]]:
    """For a Spark job (which never imports Django): the stream's home store URL and the
    (topic, partition, URL) of each partition another store group holds (issue 33)."""
    view = placement.view_of(cluster.name)
    if view is None:
        return store_url(cluster), ()
    return view.urls[view.home], tuple(sorted(
        (topic, partition, view.urls[group]) for (s, topic), placed in view.where.items()
        if s == stream for partition, group in placed.items() if group != view.home))


placement.opener = _open_group
placement.resolver = _resolve_group
placement.router_factory = GroupRouter  # type: ignore[assignment]


def close_stores() -> None:
    with _lock:
        for store in _stores.values():
            store.close()
        _stores.clear()
        _by_cluster.clear()
    placement.forget()
