"""How replication's processes signal each other, as a few small protocols, each with a Redis
implementation (production, DESIGN.md: Redis for gateway presence) and a local one (the
embedded default, where the replicator and the gateways share one process):

- gateway liveness (liveness.py): which gateways are live, and which process each is;
- leases (leases.py): the live replicators and which of them holds each moving link;
- wake-ups (wakeups.py): a stream has new data, or its links or cursors changed;
- the batch queue (batchqueue.py): the replicator's batches to a gateway, and the links epoch;
- acknowledgements (acks.py): a gateway's results to the replicator that sent the batches,
  and "applied" to the producers waiting for synchronous replicas;
- the inbox (inbox.py): what a replicator waits on, wake-ups and acknowledgements together.

`transport()` hands callers the set for this process.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from django.conf import settings

from replication.transport.acks import Acknowledgements, LocalAcks, RedisAcks
from replication.transport.batchqueue import BatchQueue, LocalBatches, RedisBatches
from replication.transport.client import namespace, redis_client
from replication.transport.inbox import Inbox, LocalInbox, RedisInbox
from replication.transport.leases import Leases, LocalLeases, RedisLeases
from replication.transport.liveness import GatewayId, GatewayLiveness, LocalLiveness, RedisLiveness
from replication.transport.mailbox import LocalMailbox, Signals
from replication.transport.wakeups import LocalWakeUps, RedisWakeUps, WakeUps

__all__ = ["GatewayId", "Signals", "Transport", "gateway_queue", "local_transport",
           "redis_transport", "transport"]


@dataclass(frozen=True)
class Transport:
    gateways: GatewayLiveness
    leases: Leases
    wakeups: WakeUps
    batches: BatchQueue
    acks: Acknowledgements
    inbox: Inbox


def redis_transport(url: str, prefix: str) -> Transport:
    client = redis_client(url)
    leases, batches = RedisLeases(client, prefix), RedisBatches(client, prefix)
    wakeups = RedisWakeUps(leases)
    return Transport(RedisLiveness(client, prefix), leases, wakeups, batches,
                     RedisAcks(client, prefix, wakeups), RedisInbox(client, prefix, batches))


def local_transport() -> Transport:
    """This process's memory: a fresh set (one for the process, or one for a test)."""
    leases, mailbox, batches = LocalLeases(), LocalMailbox(), LocalBatches()
    wakeups = LocalWakeUps(leases, mailbox)
    return Transport(LocalLiveness(), leases, wakeups, batches, LocalAcks(mailbox, wakeups),
                     LocalInbox(mailbox, batches))


_local = local_transport()


@cache
def _redis(url: str, prefix: str) -> Transport:
    return redis_transport(url, prefix)


def transport() -> Transport:
    """Redis when REDIS_URL is set (production, tests), this process's memory otherwise."""
    if settings.REDIS_URL:
        return _redis(settings.REDIS_URL, namespace())
    return _local


def gateway_queue(cluster: str, name: str) -> str:
    """The Celery queue a gateway consumes beside its batch list (batchqueue.py):
    apply_batch_task sent to that one gateway by any other sender."""
    return f"{namespace()}gw.{cluster}.{name}"
