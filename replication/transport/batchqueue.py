"""The replicator's batches to a gateway: a plain Redis list per gateway,
`sg:batches:<cluster>:<name>`, which the gateway pops directly (workers/replication/consumer.py).

Why not a Celery task per batch: building, publishing, consuming and tracing a task message
was about 0.3 of the replicator's CPU per batch and as much again of the gateway's
(docs/benchmarks-history.md, issue 15). A batch here is a few fields of JSON, pushed in one
pipeline with every other batch of the replicator's step.

Nothing about delivery rests on the list: a batch popped by a gateway that dies before it
acknowledges is sent again to another gateway once its acknowledgement is overdue (workers/
replication/dispatcher.py), and applying a batch twice changes nothing (the apply trims under the
partition's lock). The list expires when nobody pushes to it for SIGNAL_TTL seconds (a gateway
gone for good), and a batch carries its own expiry: one still queued when its acknowledgement
is long overdue was sent elsewhere already, and the gateway drops it.

Each take also reads the links epoch (`sg:links:epoch`), a random value set afresh on every
change of a link, an upstream, a topic or a cluster (replication/linkwatch.py): a
gateway trusts the links it read for as long as the epoch it sees stays the same, rather than
reading its link for every batch. The epoch is read after the pop, so a change committed
before a batch was taken is seen before that batch applies; a Redis that lost the key (a
restart) gets a new value, which no gateway has seen.

Embedded mode has no gateway processes: the gateways live in the replicator's process, and
`LocalBatches` hands each batch to the applier the workers registered (`local_delivery`),
which applies it there and then.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple, Protocol

import redis

from replication.transport.client import SIGNAL_TTL
from replication.transport.liveness import GatewayId

Sent = Iterable[tuple[GatewayId, dict[str, Any]]]  # batches, each with its gateway
TAKE_AT_MOST = 64  # batches a gateway takes from its list at once


class Taken(NamedTuple):
    batches: list[dict[str, Any]]
    links_epoch: bytes


def batch_expired(batch: dict[str, Any], now: float | None = None) -> bool:
    return batch.get("expires", float("inf")) <= (time.time() if now is None else now)


class BatchQueue(Protocol):
    def send(self, batches: Sent) -> None:
        """Queue each batch for its gateway."""
        ...

    def links_changed(self) -> None:
        """A link, upstream, topic or cluster changed: gateways read their links again."""
        ...


class RedisBatches:
    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self.client, self.prefix = client, prefix

    def batch_queue(self, gateway: GatewayId) -> str:
        return f"{self.prefix}sg:batches:{gateway[0]}:{gateway[1]}"

    def send(self, batches: Sent) -> None:
        """Queue each batch on its gateway's list, all in one round trip."""
        pipe = self.client.pipeline(transaction=False)
        self.queue(pipe, batches)
        pipe.execute()

    def queue(self, pipe: Any, batches: Sent) -> None:
        """`send` on a pipeline the caller executes (the replicator's wait)."""
        keys = set()
        for gateway, batch in batches:
            keys.add(key := self.batch_queue(gateway))
            pipe.rpush(key, json.dumps(batch, separators=(",", ":")))
        for key in keys:
            pipe.expire(key, SIGNAL_TTL)

    def links_changed(self) -> None:
        self.client.set(self._links_epoch(), uuid.uuid4().hex)

    def _links_epoch(self) -> str:
        return f"{self.prefix}sg:links:epoch"

    def take(self, gateway: GatewayId, timeout: float,
                     at_most: int = TAKE_AT_MOST) -> Taken:
        """The batches queued for `gateway`, oldest first, waiting up to `timeout` seconds for
        the first (none when none came), and the links epoch after them; one round trip."""
        epoch = self._links_epoch()
        pipe = self.client.pipeline(transaction=False)
        pipe.blmpop(max(timeout, 0.01), 1, self.batch_queue(gateway), direction="LEFT",
                    count=at_most)
        pipe.set(epoch, uuid.uuid4().hex, nx=True).get(epoch)
        popped, _, links_epoch = pipe.execute()
        return Taken([json.loads(raw) for raw in popped[1]] if popped else [], links_epoch)


_delivery: list[Callable[[list[tuple[GatewayId, dict[str, Any]]]], None]] = []


def local_delivery(apply: Callable[[list[tuple[GatewayId, dict[str, Any]]]], None]) -> None:
    """The workers' in-process applier of batches (registered in their AppConfig.ready)."""
    _delivery[:] = [apply]


class LocalBatches:
    """Embedded mode: each batch applies in this process as it is sent."""

    def send(self, batches: Sent) -> None:
        batches = list(batches)
        if batches:
            _delivery[0](batches)

    def links_changed(self) -> None:
        pass  # embedded gateways read their link for every batch
