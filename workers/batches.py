"""A gateway's batches: applying one (`batch_serve`, which the Celery task `apply_batch_task`
runs too) and consuming the gateway's own batch list (`BatchConsumer`,
replication/batchqueue.py), where the replicator sends them.

Consecutive batches of one partition waiting together in the list (the gateway was busy
while the replicator cut them) apply as one: one COPY pipe, one transaction, one wake-up, an
acknowledgement per batch. That is the apply of [first start, last end), which the trim rule
makes as safe as each batch one after the other.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any

import structlog
from django.conf import settings
from django.db import connection, connections

from operations.audit import enter_system
from replication.batchqueue import batch_expired
from replication.engine.store import Applied, Misordered
from replication.presence import GatewayId, Presence, presence
from replication.services.engine import GatewayLink, gateway_link, link_apply
from replication.services.wire import link_wire_refusal
from workers.gateway import parse_gateway, tally

log = structlog.get_logger(__name__)
TAKE_WAIT = 1.0  # seconds a take blocks: how soon the consumer sees that it must stop


class WireRefused(Exception):
    """The link asks for what the connections to its stores no longer give (wire.py)."""


def batch_serve(*, link_id: int, topic: str, partition: int, start: int, end: int,
                gateway: str = "", tickets: Sequence[str] = (), reply_to: str = "",
                link_of: Callable[[int], GatewayLink | None] = gateway_link) -> int:
    """Apply [start, end) of one partition to a replica, then acknowledge each ticket (the
    batches it covers) to the replicator with what happened. Safe to run any number of times,
    on any number of gateways at once: the replica keeps each message once. `link_of` reads
    the link (a LinkBook remembers it between batches)."""
    result: dict[str, Any] = {"gateway": gateway.partition("/")[2], "link": link_id}
    link, applied = None, Applied({})
    try:
        refusal = link_wire_refusal(link_id=link_id)
        if refusal:  # -networkencryption true, and a store now allows plaintext
            raise WireRefused(refusal)
        link = link_of(link_id)
        if link is not None:  # else paused or no longer agreed since the batch was cut
            applied = link_apply(link, link_id=link_id, topic=topic, partition=partition,
                                 start=start, end=end)
    except Misordered as error:  # the replica is not where the plan thought: re-plan
        applied, result["error"], result["misordered"] = Applied({}), str(error), True
    except Exception as error:
        log.warning("apply_failed", link=link_id, topic=topic, partition=partition,
                    error=str(error))
        applied, result["error"] = Applied({}), f"{type(error).__name__}: {error}"
    if gateway:
        tally.add(parse_gateway(gateway), batches=1, messages=applied.count,
                  nbytes=applied.bytes,
                  errors=int("error" in result and "misordered" not in result))
    # Coalesced batches: the messages are counted once, on the last acknowledgement.
    acks = [{**result, "ticket": ticket, "applied": applied.count if n == len(tickets) else 0}
            for n, ticket in enumerate(tickets, start=1)]
    # Producers waiting for a synchronous replica re-read its ends on `applied` (replication/
    # services/sync.py); they re-check on a timer too, so a lost notification only slows them.
    # The replica's own replicas (a chain, the way back of a multi-master pair) move on.
    moved = link if applied.count and link is not None else None
    waited = [link_id] if moved and moved.synchronous else []
    presence().done(acks, reply_to, waited, [str(moved.replica)] if moved and moved.feeds else [])
    return applied.count


def send_eagerly(outbox: list[tuple[GatewayId, dict]]) -> None:
    """Embedded mode (no Redis): the gateways live in this process and Celery runs its tasks
    eagerly, so each batch applies here and now."""
    from workers.tasks import apply_batch_task

    for gateway, batch in outbox:
        apply_batch_task.apply_async(
            args=(batch["link"], batch["topic"], batch["partition"], batch["start"],
                  batch["end"]),
            kwargs={"gateway": "/".join(gateway), "ticket": batch["ticket"],
                    "reply_to": batch["reply_to"]})


def coalesce(batches: list[dict[str, Any]], max_messages: int) -> list[dict[str, Any]]:
    """The batches as jobs, in order: a batch that starts where an earlier job of its partition
    (and sender) ends joins it, up to `max_messages` a job."""
    jobs: list[dict[str, Any]] = []
    last: dict[tuple, dict[str, Any]] = {}
    for batch in batches:
        key = (batch["link"], batch["topic"], batch["partition"], batch.get("reply_to", ""))
        job = last.get(key)
        if (job is not None and job["end"] == batch["start"]
                and batch["end"] - job["start"] <= max_messages):
            job["end"] = batch["end"]
            job["tickets"].append(batch["ticket"])
            continue
        last[key] = job = {**batch, "tickets": [batch["ticket"]]}
        jobs.append(job)
    return jobs


class LinkBook:
    """`gateway_link` for a gateway's threads, read once per links epoch (the value its last
    take saw, replication/batchqueue.py) rather than once per batch: that query was a sixth of
    a gateway's CPU at 5,000 messages/s (docs/benchmarks-history.md). A link paused, removed
    or no longer agreed changes the epoch, so a batch taken after the change reads it again
    and applies nothing, as before."""

    def __init__(self) -> None:
        self.epoch: bytes | None = None
        self.links: dict[int, GatewayLink | None] = {}

    def seen(self, epoch: bytes | None) -> None:
        if epoch is None or epoch != self.epoch:
            self.links, self.epoch = {}, epoch

    def __call__(self, link_id: int) -> GatewayLink | None:
        links = self.links  # a take on another thread may start a new dict meanwhile
        if link_id not in links:
            links[link_id] = gateway_link(link_id)
        return links[link_id]


class BatchConsumer:
    """Takes the gateway's batches from its list and applies them on GATEWAY_CONCURRENCY
    threads, oldest first. A free thread takes for itself, one at a time (an idle gateway costs
    one round trip a TAKE_WAIT, not one a thread), and applies the first job of its take; the
    rest go to the threads waiting for them. Batches that come meanwhile wait in the list,
    where consecutive ones of a partition gather into one apply. Nothing passes from thread to
    thread for a take of one job (the usual one under steady load): each such hand-off was
    a thread wake-up a batch."""

    def __init__(self, gateway: GatewayId, signals: Presence | None = None) -> None:
        self.gateway = gateway
        self.presence = signals or presence()
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
            batches, epoch = self.presence.take_batches(self.gateway, TAKE_WAIT)
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
