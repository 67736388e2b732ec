"""A gateway: a process consuming its own batch list (`sg:batches:<cluster>:<name>`,
consumer.py) and Celery queue (`gw.<cluster>.<name>`), applying the batches the replicator
sends it to the replicas of its cluster (applier.py), and heartbeating.

`manage.py rungateway --cluster C --name G` (or `streamgate gateway run -cluster C -name G`)
runs one. Its heartbeat is a Redis key with a short TTL (replication/transport/liveness.py): a
gateway that is killed, hung or cut off stops refreshing it and reads DOWN within the TTL. The
control database's `last_heartbeat` and the gateway's counters are written less often, for
the operators' pages; no decision reads them.
"""

from __future__ import annotations

import threading
import time
import uuid

import structlog
from celery.signals import worker_ready, worker_shutdown
from django.conf import settings
from django.db import connection

from replication.models import Gateway
from replication.services.gateway_status import gateway_flush, gateways_configured
from replication.transport import GatewayId, Transport, gateway_queue, transport
from workers.celery import app
from workers.replication.applier import tally
from workers.replication.consumer import BatchConsumer
from workers.replication.watch import PresenceWatch

log = structlog.get_logger(__name__)
DB_HEARTBEAT_SECONDS = 5.0


class GatewayRefused(Exception):
    """The gateway may not start; the message says what to configure."""


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


class Heartbeat:
    """Refreshes the presence key of each gateway every GATEWAY_HEARTBEAT_SECONDS, and the
    database row (with the tallied counters) every few seconds; after each beat, watches
    presence (PresenceWatch)."""

    def __init__(self, gateways: list[GatewayId] | None,
                 signals: Transport | None = None) -> None:
        self.fixed = gateways  # None: every configured gateway (embedded mode)
        self.transport = signals or transport()
        self.watcher = PresenceWatch(self.transport.gateways)
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
            self.transport.gateways.beat(gateway, settings.GATEWAY_PRESENCE_TTL, self.incarnation)
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
            self.transport.gateways.forget(gateway)
        self.flush(self.gateways(), heartbeat=False)
        self.watch(self.gateways(), serving=False)  # announces this one down at once


def run_gateway(cluster: str, name: str, *, loglevel: str = "INFO") -> None:
    """Serve the gateway's queue until stopped (SIGTERM finishes the batches in hand)."""
    gateway_check(cluster, name)
    heartbeat = Heartbeat([(cluster, name)])
    # The replicator's batches come on the gateway's own list; the Celery queue still takes
    # apply_batch_task from any other sender.
    batches = BatchConsumer((cluster, name), heartbeat.transport)

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
