"""A gateway's applier: `batch_serve` applies one batch (or several consecutive ones of a
partition) and acknowledges it, for the gateway's own batch list (consumer.py) and for the
Celery task `apply_batch_task` (embedded mode, and any other sender) alike.

Consecutive batches of one partition waiting together in the list (the gateway was busy
while the replicator cut them) apply as one: one COPY pipe, one transaction, one wake-up, an
acknowledgement per batch. That is the apply of [first start, last end), which the trim rule
makes as safe as each batch one after the other.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import structlog

from replication.engine.store import Applied, Misordered
from replication.models import GatewayLink, ReplicaLink
from replication.services.apply import link_apply
from replication.services.wire import link_wire_refusal
from replication.transport import GatewayId, transport

log = structlog.get_logger(__name__)


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


class WireRefused(Exception):
    """The link asks for what the connections to its stores no longer give (wire.py)."""


def batch_serve(*, link_id: int, topic: str, partition: int, start: int, end: int,
                gateway: str = "", tickets: Sequence[str] = (), reply_to: str = "",
                link_of: Callable[[int], GatewayLink | None] = ReplicaLink.objects.gateway_link,
                ) -> int:
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
    woken = [str(moved.replica)] if moved and moved.feeds else []
    transport().acks.done(acks, reply_to, waited, woken)
    return applied.count


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
    """`ReplicaLinkQuerySet.gateway_link` for a gateway's threads, read once per links epoch
    (the value its last take saw, replication/transport/batchqueue.py) rather than once per
    batch: that query was a sixth of a gateway's CPU at 5,000 messages/s (docs/benchmarks-
    history.md). A link paused, removed or no longer agreed changes the epoch, so a batch
    taken after the change reads it again and applies nothing, as before."""

    def __init__(self) -> None:
        self.epoch: bytes | None = None
        self.links: dict[int, GatewayLink | None] = {}

    def seen(self, epoch: bytes | None) -> None:
        if epoch is None or epoch != self.epoch:
            self.links, self.epoch = {}, epoch

    def __call__(self, link_id: int) -> GatewayLink | None:
        links = self.links  # a take on another thread may start a new dict meanwhile
        if link_id not in links:
            links[link_id] = ReplicaLink.objects.gateway_link(link_id)
        return links[link_id]
