"""A gateway's batch list (replication/transport/batchqueue.py), where the replicator sends
its batches: taken oldest first and applied (applier.py) on GATEWAY_CONCURRENCY threads."""

from __future__ import annotations

import queue
import threading
from typing import Any

import structlog
from django.conf import settings
from django.db import connection, connections

from operations.audit import enter_system
from replication.transport import GatewayId, Transport, transport
from replication.transport.batchqueue import RedisBatches, batch_expired
from workers.replication.applier import LinkBook, batch_serve, coalesce

log = structlog.get_logger(__name__)
TAKE_WAIT = 1.0  # seconds a take blocks: how soon the consumer sees that it must stop


class BatchConsumer:
    """Takes the gateway's batches from its list and applies them on GATEWAY_CONCURRENCY
    threads, oldest first. A free thread takes for itself, one at a time (an idle gateway costs
    one round trip a TAKE_WAIT, not one a thread), and applies the first job of its take; the
    rest go to the threads waiting for them. Batches that come meanwhile wait in the list,
    where consecutive ones of a partition gather into one apply. Nothing passes from thread to
    thread for a take of one job (the usual one under steady load): each such hand-off was
    a thread wake-up a batch."""

    def __init__(self, gateway: GatewayId, signals: Transport | None = None) -> None:
        batches = (signals or transport()).batches
        # Gateways are processes of their own only with Redis (gateway_check); embedded ones
        # apply each batch as it is sent.
        assert isinstance(batches, RedisBatches)
        self.gateway, self.batches = gateway, batches
        self.links = LinkBook()
        self.pending: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()  # left by takes
        self.taking = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._serve, name=f"gateway-batch-{n}",
                                         daemon=True)
                        for n in range(settings.GATEWAY_CONCURRENCY)]

    def start(self) -> BatchConsumer:
        for thread in self.threads:
            thread.start()
        return self

    def close(self) -> None:
        """Stop taking batches and finish those in hand."""
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=TAKE_WAIT + 60)

    def _serve(self) -> None:
        enter_system()  # changes made by a batch are the system's, as in a Celery task
        try:
            while not self.stop.is_set():
                job = self._next()
                if job is not None:
                    self._run(job)
            while (job := self._pending()) is not None:  # what was taken is applied
                self._run(job)
        finally:
            connections.close_all()

    def _next(self) -> dict[str, Any] | None:
        if not self.taking.acquire(blocking=False):  # another thread is taking
            try:
                return self.pending.get(timeout=TAKE_WAIT)
            except queue.Empty:
                return None
        try:
            job = self._pending()
            if job is not None:
                return job
            jobs = self._take()
        finally:
            self.taking.release()
        for job in jobs[1:]:
            self.pending.put(job)
        return jobs[0] if jobs else None

    def _pending(self) -> dict[str, Any] | None:
        try:
            return self.pending.get_nowait()
        except queue.Empty:
            return None

    def _take(self) -> list[dict[str, Any]]:
        try:
            batches, epoch = self.batches.take(self.gateway, TAKE_WAIT)
        except Exception as error:  # Redis restarting: the replicator re-sends what is lost
            log.warning("batch_take_failed", error=str(error))
            self.links.seen(None)
            self.stop.wait(0.5)
            return []
        self.links.seen(epoch)
        return coalesce([b for b in batches if not batch_expired(b)],
                        settings.REPLICATION_BATCH_MESSAGES)

    def _run(self, job: dict[str, Any]) -> None:
        try:
            batch_serve(link_id=job["link"], topic=job["topic"], partition=job["partition"],
                        start=job["start"], end=job["end"], gateway="/".join(self.gateway),
                        tickets=job["tickets"], reply_to=job.get("reply_to", ""),
                        link_of=self.links)
        except Exception:  # batch_serve acknowledges its own failures; this is Redis gone
            log.exception("batch_failed", link=job["link"])
        finally:
            # The thread keeps its control-database connection between batches (a pool
            # check-out costs a query), unless it broke: then it reconnects next time.
            if connection.errors_occurred:
                connection.close_if_unusable_or_obsolete()
