"""A gateway: a process consuming its own batch list (`sg:batches:<cluster>:<name>`,
workers/batches.py) and Celery queue (`gw.<cluster>.<name>`), applying the batches the
replicator sends it to the replicas of its cluster, and heartbeating.

`manage.py rungateway --cluster C --name G` (or `streamgate gateway run -cluster C -name G`)
runs one. Its heartbeat is a Redis key with a short TTL (replication/presence.py): a gateway that
is killed, hung or cut off stops refreshing it and reads DOWN within the TTL. The control
database's `last_heartbeat` and the gateway's counters are written less often, for the
operators' pages; no decision reads them.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter

import structlog
from django.conf import settings
from django.db import connection

from replication.models import Gateway
from replication.presence import GatewayId, Presence, gateway_queue, presence
from replication.services.engine import gateway_flush, gateways_configured
from replication.services.gateway_status import gateways_announce
from replication.services.sync import links_sync_drop, links_sync_restore

log = structlog.get_logger(__name__)
DB_HEARTBEAT_SECONDS = 5.0
WATCH_SECONDS = 5.0  # between full presence watches while the live gateways stay the same
Watched = tuple[list[GatewayId], set[GatewayId]]  # configured gateways, the live ones


class GatewayRefused(Exception):
    """The gateway may not start; the message says what to configure."""


class Tally:
    """Batches, messages, logical bytes and errors per gateway since the last flush, from the
    task threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[GatewayId, Counter] = {}

    def add(self, gateway: GatewayId, *, batches: int = 0, messages: int = 0, nbytes: int = 0,
            errors: int = 0) -> None:
        with self._lock:
            self._counts.setdefault(gateway, Counter()).update(
                batches=batches, messages=messages, nbytes=nbytes, errors=errors)

    def take(self, gateway: GatewayId) -> Counter:
        with self._lock:
            return self._counts.pop(gateway, Counter())


tally = Tally()


def parse_gateway(text: str) -> GatewayId:
    cluster, _, name = text.partition("/")
    return cluster, name


def gateway_check(cluster: str, name: str) -> Gateway:
    """The configured, enabled gateway row, or GatewayRefused saying how to configure it."""
    if not settings.REDIS_URL:
        raise GatewayRefused("gateways are separate processes only in production (REDIS_URL "
                             "set); in embedded mode 'make run' starts them in-process")
    gateway = Gateway.objects.filter(cluster__name=cluster, name=name).first()
    if gateway is None:
        configured = " ".join(gateways_configured().get(cluster, [])) or "none"
        raise GatewayRefused(
            f"gateway {name} is not configured for cluster {cluster} (configured: "
            f"{configured}): an operator adds it with 'streamgate cluster gateway set "
            f"-dstcluster {cluster} -gateways \"... {name}\"'")
    if not gateway.enabled:
        raise GatewayRefused(f"gateway {name} of cluster {cluster} is disabled: an operator "
                             "enables it in the admin site")
    return gateway


def gateways_watch(signals: Presence, serving: set[str]) -> Watched:
    """What follows from which gateways are live now: "gateway.status" events for the ones
    that came up or went down, synchronous links dropping to async where no gateway is left
    and, on the clusters in `serving` (the caller's, so live), returning to sync once caught
    up. Any process watching presence may call it; each change happens once. Returns the
    configured gateways and the live ones it saw."""
    configured = [(c, n) for c, names in gateways_configured().items() for n in names]
    live = set(signals.live(configured))
    gateways_announce(live=live)
    clusters = {cluster for cluster, _ in live}
    links_sync_drop(live_clusters=clusters)
    links_sync_restore(clusters=serving & clusters)
    return configured, live


def presence_watch(signals: Presence, serving: set[str] | None = None) -> Watched | None:
    """gateways_watch, for loops that must go on whatever it meets (a database restarting)."""
    try:
        return gateways_watch(signals, serving or set())
    except Exception as error:  # a beat or a plan must not fail for what only reports follow
        log.warning("gateway_watch_failed", error=str(error))
        return None


class PresenceWatch:
    """presence_watch when it may find something: when forced, every WATCH_SECONDS (a
    synchronous link that caught up returns to sync then), and whenever the live gateways
    differ from those the last watch saw, which costs one MGET. Its queries were a quarter of
    a gateway's CPU at 5,000 messages/s when every beat ran them (docs/benchmarks-history.md)."""

    def __init__(self, signals: Presence) -> None:
        self.presence = signals
        self.seen: Watched | None = None
        self.next = 0.0

    def __call__(self, serving: set[str] | None = None, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now < self.next and self.seen is not None:
            configured, live = self.seen
            try:
                if set(self.presence.live(configured)) == live:
                    return
            except Exception as error:  # Redis restarting: the full watch says the same
                log.warning("gateway_watch_failed", error=str(error))
                return
        self.seen = presence_watch(self.presence, serving)
        self.next = now + WATCH_SECONDS


class Heartbeat:
    """Refreshes the presence key of each gateway every GATEWAY_HEARTBEAT_SECONDS, and the
    database row (with the tallied counters) every few seconds; after each beat, watches
    presence (PresenceWatch)."""

    def __init__(self, gateways: list[GatewayId] | None, signals: Presence | None = None) -> None:
        self.fixed = gateways  # None: every configured gateway (embedded mode)
        self.presence = signals or presence()
        self.watcher = PresenceWatch(self.presence)
        self.stop = threading.Event()
        self.incarnation = uuid.uuid4().hex
        self.thread = threading.Thread(target=self._loop, name="gateway-heartbeat", daemon=True)

    def start(self) -> Heartbeat:
        self.beat(database=True)
        self.thread.start()
        return self

    def gateways(self) -> list[GatewayId]:
        if self.fixed is not None:
            return self.fixed
        return [(c, n) for c, names in gateways_configured().items() for n in names]

    def beat(self, *, database: bool) -> None:
        gateways = self.gateways()
        for gateway in gateways:
            self.presence.beat(gateway, settings.GATEWAY_PRESENCE_TTL, self.incarnation)
        if database:
            self.flush(gateways, heartbeat=True)
        self.watch(gateways, force=database)

    def watch(self, gateways: list[GatewayId], *, serving: bool = True,
              force: bool = True) -> None:
        self.watcher({c for c, _ in gateways} if serving else None, force=force)

    def flush(self, gateways: list[GatewayId], *, heartbeat: bool) -> None:
        for cluster, name in gateways:
            counts = tally.take((cluster, name))
            gateway_flush(cluster=cluster, name=name, heartbeat=heartbeat, **counts)

    def _loop(self) -> None:
        next_db = time.monotonic() + DB_HEARTBEAT_SECONDS
        while not self.stop.wait(settings.GATEWAY_HEARTBEAT_SECONDS):
            due = time.monotonic() >= next_db
            try:
                self.beat(database=due)
            except Exception as error:  # Redis or the database restarting: beat again later
                log.warning("heartbeat_failed", error=str(error))
                connection.close()
            if due:
                next_db = time.monotonic() + DB_HEARTBEAT_SECONDS

    def close(self) -> None:
        """A clean stop reads DOWN at once rather than a TTL later."""
        self.stop.set()
        self.thread.join(timeout=5)
        for gateway in self.gateways():
            self.presence.forget(gateway)
        self.flush(self.gateways(), heartbeat=False)
        self.watch(self.gateways(), serving=False)  # announces this one down at once


def run_gateway(cluster: str, name: str, *, loglevel: str = "INFO") -> None:
    """Serve the gateway's queue until stopped (SIGTERM finishes the batches in hand)."""
    from celery.signals import worker_ready, worker_shutdown

    from workers.batches import BatchConsumer
    from workers.celery import app

    gateway_check(cluster, name)
    heartbeat = Heartbeat([(cluster, name)])
    # The replicator's batches come on the gateway's own list; the Celery queue still takes
    # apply_batch_task from any other sender.
    batches = BatchConsumer((cluster, name), heartbeat.presence)

    def ready(**_: object) -> None:
        batches.start()
        heartbeat.start()

    def shutdown(**_: object) -> None:
        batches.close()
        heartbeat.close()

    # Live only once the worker consumes its queues, and down as soon as it stops.
    worker_ready.connect(ready, weak=False)
    worker_shutdown.connect(shutdown, weak=False)
    app.worker_main([
        "worker", "-Q", gateway_queue(cluster, name), "-n", f"{name}@{cluster}",
        "--pool", "threads", "--concurrency", str(settings.GATEWAY_CONCURRENCY),
        "--without-heartbeat", "--without-gossip", "--without-mingle", "--loglevel", loglevel,
    ])
