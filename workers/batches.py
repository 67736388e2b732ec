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
from collections.abc import Sequence
from typing import Any

import structlog
from django.conf import settings
from django.db import connection, connections

from operations.audit import enter_system
from replication.batchqueue import batch_expired
from replication.engine.store import Applied, Misordered
from replication.presence import GatewayId, Presence, presence
from replication.services.engine import gateway_link, link_apply
from replication.services.wire import link_wire_refusal
from workers.gateway import parse_gateway, tally

log = structlog.get_logger(__name__)
TAKE_WAIT = 1.0  # seconds a take blocks: how soon the consumer sees that it must stop


class WireRefused(Exception):
    """The link asks for what the connections to its stores no longer give (wire.py)."""


def batch_serve(*, link_id: int, topic: str, partition: int, start: int, end: int,
                gateway: str = "", tickets: Sequence[str] = (), reply_to: str = "") -> int:
    """Apply [start, end) of one partition to a replica, then acknowledge each ticket (the
    batches it covers) to the replicator with what happened. Safe to run any number of times,
    on any number of gateways at once: the replica keeps each message once."""
    result: dict[str, Any] = {"gateway": gateway.partition("/")[2], "link": link_id}
    link, applied = None, Applied({})
    try:
        refusal = link_wire_refusal(link_id=link_id)
        if refusal:  # -networkencryption true, and a store now allows plaintext
            raise WireRefused(refusal)
        link = gateway_link(link_id)
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


class BatchConsumer:
    """Takes the gateway's batches from its list while a thread is free for them, and applies
    them on GATEWAY_CONCURRENCY threads, oldest first."""

    def __init__(self, gateway: GatewayId, signals: Presence | None = None) -> None:
        self.gateway = gateway
        self.presence = signals or presence()
        self.jobs: queue.SimpleQueue[dict[str, Any] | None] = queue.SimpleQueue()
        self.busy = 0
        self.freed = threading.Condition()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._take, name="gateway-batches", daemon=True)]
        self.threads += [threading.Thread(target=self._apply, name=f"gateway-batch-{n}",
                                          daemon=True)
                         for n in range(settings.GATEWAY_CONCURRENCY)]

    def start(self) -> BatchConsumer:
        for thread in self.threads:
            thread.start()
        return self

    def close(self) -> None:
        """Stop taking batches and finish those in hand."""
        self.stop.set()
        self.threads[0].join(timeout=TAKE_WAIT + 5)
        for _ in self.threads[1:]:
            self.jobs.put(None)
        for thread in self.threads[1:]:
            thread.join(timeout=60)

    def _take(self) -> None:
        while not self.stop.is_set():
            with self.freed:
                # While every thread is busy the batches wait in the list, where consecutive
                # ones of a partition gather into one apply.
                if self.busy >= len(self.threads) - 1:
                    self.freed.wait(TAKE_WAIT)
                    continue
            try:
                batches = self.presence.take_batches(self.gateway, TAKE_WAIT)
            except Exception as error:  # Redis restarting: the replicator re-sends what is lost
                log.warning("batch_take_failed", error=str(error))
                self.stop.wait(0.5)
                continue
            fresh = [b for b in batches if not batch_expired(b)]
            for job in coalesce(fresh, settings.REPLICATION_BATCH_MESSAGES):
                with self.freed:
                    self.busy += 1
                self.jobs.put(job)

    def _apply(self) -> None:
        enter_system()  # changes made by a batch are the system's, as in a Celery task
        try:
            while (job := self.jobs.get()) is not None:
                self._run(job)
        finally:
            connections.close_all()

    def _run(self, job: dict[str, Any]) -> None:
        try:
            batch_serve(link_id=job["link"], topic=job["topic"], partition=job["partition"],
                        start=job["start"], end=job["end"], gateway="/".join(self.gateway),
                        tickets=job["tickets"], reply_to=job.get("reply_to", ""))
        except Exception:  # batch_serve acknowledges its own failures; this is Redis gone
            log.exception("batch_failed", link=job["link"])
        finally:
            # The thread keeps its control-database connection between batches (a pool
            # check-out costs a query), unless it broke: then it reconnects next time.
            if connection.errors_occurred:
                connection.close_if_unusable_or_obsolete()
            with self.freed:
                self.busy -= 1
                self.freed.notify()
