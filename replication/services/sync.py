"""Synchronous replicas (`-synchronous true`): a produce is acknowledged only once every replica
link in synchronous mode holds the produced messages.

A link configured synchronous is in one of two modes (ReplicaLink.mode):
- sync: producers wait for it. They re-read its replica partitions' ends when a gateway
  announces an applied batch of the link (replication/transport/acks.py) and every
  REPLICATION_SYNC_RECHECK_MS besides, so a lost notification costs a few milliseconds.
- async: producers do not wait. A link drops here by itself when its replica cluster has no
  live gateway, when a produce waited REPLICATION_SYNC_TIMEOUT_MS in vain, or when the replica
  took longer than REPLICATION_SYNC_LATENCY_MS to apply one; it returns to sync by itself
  once nothing is pending and a gateway of its cluster is live (the gateways' heartbeats
  check, workers/replication/gateway.py).

Every switch is a row (ModeSwitch), the link's `mode`, `mode_since` and `mode_reason` (shown
by `replica list`), and a "replica.mode" event to the tenants of both ends: never silent.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable, Sequence
from uuid import UUID

import structlog
from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from replication.compiled import PLACEHOLDER, Compiled
from replication.engine.replicator import pending
from replication.engine.store import UnknownTopic
from replication.events import publish_after_commit
from replication.models import (
    Gateway,
    ModeSwitch,
    ReplicaLink,
    ReplicaState,
    Stream,
    SyncMode,
    Topic,
    carried_topics,
)
from replication.stores import store_for
from replication.transport import transport

log = structlog.get_logger(__name__)
Ends = dict[int, int]  # partition -> the end (next offset) the replica must reach


def link_mode_switch(*, link: ReplicaLink, to: str, reason: str) -> bool:
    """Move the link to mode `to`, recording why; False when it was not in the other mode
    (another process switched it first, or it is no longer synchronous)."""
    other = SyncMode.ASYNC if to == SyncMode.SYNC else SyncMode.SYNC
    links = ReplicaLink.objects.filter(pk=link.pk, mode=other)
    if to == SyncMode.SYNC:
        links = links.filter(synchronous=True)
    now, reason = timezone.now(), reason[:255]
    with transaction.atomic():
        if not links.update(mode=to, mode_since=now, mode_reason=reason):
            return False
        ModeSwitch.objects.create(link_id=link.pk, from_mode=other, to_mode=to, reason=reason,
                                  at=now)
        publish_after_commit(
            tenant_ids={link.source.tenant_id, link.replica.tenant_id}, event="replica.mode",
            payload={"source": link.source_id, "replica": link.replica_id, "mode": to})
    link.mode, link.mode_since, link.mode_reason = to, now, reason
    log.info("replica_mode", link=link.pk, mode=to, reason=reason)
    return True


# --- the producer's side -----------------------------------------------------------------------


def replicas_await(*, stream: Stream, topic: str, offsets: Sequence[tuple[int, int]]) -> None:
    """Return once every synchronous-mode replica of `stream` holds these offsets of `topic`;
    links that cannot keep up drop to async on the way (the produce is then acknowledged)."""
    if not offsets or not _any_sync_link(stream.pk):
        return
    links = list(ReplicaLink.objects.agreed()
                 .filter(source=stream, paused=False, synchronous=True, mode=SyncMode.SYNC)
                 .select_related("source", "replica__cluster"))
    if not links:
        return
    served = clusters_served({link.replica.cluster.name for link in links})
    waiting = []
    for link in links:
        cluster = link.replica.cluster.name
        if cluster in served:
            waiting.append(link)
        else:
            link_mode_switch(link=link, to=SyncMode.ASYNC,
                             reason=f"no live gateway on cluster {cluster}")
    if waiting:
        _wake_now(stream.uuid)
        _judge(waiting, _await_applied(waiting, topic, _ends(offsets)))


@functools.cache
def _sync_link_sql() -> Compiled:
    return Compiled(ReplicaLink.objects.filter(
        source_id=PLACEHOLDER, synchronous=True, paused=False, mode=SyncMode.SYNC,
    ).values_list("pk").order_by()[:1])


def _any_sync_link(stream_id: int) -> bool:
    # Every produce asks; almost always the answer is no. A compiled query (~0.2 ms) rather
    # than building the agreed-links query below (~5 ms of CPU, a quarter of a produce).
    return bool(_sync_link_sql().run(stream_id))


def _ends(offsets: Sequence[tuple[int, int]]) -> Ends:
    ends: Ends = {}
    for partition, offset in offsets:
        ends[partition] = max(ends.get(partition, 0), offset + 1)
    return ends


def clusters_served(clusters: set[str]) -> set[str]:
    """The clusters among these with a live gateway now (presence, not the database's
    heartbeats, which lag by design)."""
    gateways = list(Gateway.objects.filter(enabled=True, cluster__name__in=clusters)
                    .values_list("cluster__name", "name"))
    try:
        live = transport().gateways.live(gateways)
    except Exception as error:  # no presence, no proof of a gateway: do not make producers wait
        log.warning("presence_unavailable", error=str(error))
        return set()
    return {cluster for cluster, _ in live}


def _wake_now(stream: UUID) -> None:
    # Not after commit, as stream_wake does: the store committed the messages already, and a
    # caller's transaction would hold the wake-up for as long as this producer waits.
    if not transaction.get_connection().in_atomic_block:
        return  # stream_wake's on_commit ran at once
    try:
        transport().wakeups.wake([str(stream)])
    except Exception as error:
        log.warning("wake_failed", stream=str(stream), error=str(error))


def _await_applied(links: list[ReplicaLink], topic: str, ends: Ends) -> dict[int, float]:
    """Per link that reached `ends` before the timeout, how long it took (ms)."""
    board = transport().acks.applied_board()
    started = time.monotonic()
    deadline = started + settings.REPLICATION_SYNC_TIMEOUT_MS / 1000
    recheck = settings.REPLICATION_SYNC_RECHECK_MS / 1000
    todo, took = {link.pk: link for link in links}, {}
    while True:
        keys = [str(pk) for pk in todo]
        seen = board.snapshot(keys)  # before reading: an apply after the read moves it
        for link in list(todo.values()):
            if _holds(link, topic, ends):
                took[link.pk] = (time.monotonic() - started) * 1000
                del todo[link.pk]
        left = deadline - time.monotonic()
        if not todo or left <= 0:
            return took
        if len(keys) == len(todo):  # else some finished: snapshot the rest and look again
            board.wait(keys, seen, min(left, recheck))


def _holds(link: ReplicaLink, topic: str, ends: Ends) -> bool:
    try:
        marks = store_for(link.replica.cluster).watermarks(link.replica.uuid, topic)
    except UnknownTopic:
        return False  # the replica's store has not received the topic yet
    except Exception as error:  # the replica's store is down: the timeout decides
        log.warning("sync_check_failed", link=link.pk, error=str(error))
        return False
    return all(marks.get(p, (0, 0))[1] >= end for p, end in ends.items())


def _judge(links: list[ReplicaLink], took: dict[int, float]) -> None:
    timeout, slow = settings.REPLICATION_SYNC_TIMEOUT_MS, settings.REPLICATION_SYNC_LATENCY_MS
    for link in links:
        ms = took.get(link.pk)
        if ms is None:
            link_mode_switch(link=link, to=SyncMode.ASYNC, reason=(
                f"the replica did not apply a produce within {timeout} ms"))
        elif ms > slow:
            link_mode_switch(link=link, to=SyncMode.ASYNC, reason=(
                f"the replica took {ms:.0f} ms to apply a produce, over the {slow} ms "
                "threshold"))


# --- the gateways' side: back to sync, or down to async without a gateway ----------------------


def links_sync_restore(*, clusters: Iterable[str]) -> int:
    """Synchronous links into these clusters (whose gateway calls this, so one is live) that
    are async and have caught up go back to sync. How many did."""
    links = (ReplicaLink.objects.agreed()
             .filter(synchronous=True, paused=False, mode=SyncMode.ASYNC,
                     state=ReplicaState.REPLICATING,  # not while autosetup's copy runs
                     replica__cluster__name__in=list(clusters))
             .select_related("source__cluster", "replica__cluster"))
    restored = 0
    for link in links:
        if _caught_up(link):
            restored += link_mode_switch(link=link, to=SyncMode.SYNC, reason=(
                f"caught up, with a live gateway on cluster {link.replica.cluster.name}"))
    return restored


def _caught_up(link: ReplicaLink) -> bool:
    topics = dict(Topic.objects.filter(stream_id=link.source_id)
                  .values_list("name", "origin_uuid"))
    try:
        backlog = pending(store_for(link.source.cluster), link.source.uuid,
                          store_for(link.replica.cluster), link.replica.uuid,
                          carried_topics(link.replica.uuid, topics))
    except Exception as error:  # a store down: not caught up as far as anyone can tell
        log.warning("sync_restore_check_failed", link=link.pk, error=str(error))
        return False
    return backlog.messages == 0


def links_sync_drop(*, live_clusters: set[str]) -> int:
    """Sync-mode links that producers can no longer wait for drop to async, saying why: their
    replica cluster has no live gateway, they were paused, or lost the agreement."""
    links = (ReplicaLink.objects.with_agreement().filter(mode=SyncMode.SYNC)
             .filter(~Q(replica__cluster__name__in=live_clusters) | Q(paused=True)
                     | Q(is_agreed=False) | Q(synchronous=False))
             .select_related("source", "replica__cluster"))
    dropped = 0
    for link in links:
        dropped += link_mode_switch(link=link, to=SyncMode.ASYNC, reason=_drop_reason(link))
    return dropped


def _drop_reason(link: ReplicaLink) -> str:
    if not link.synchronous:
        return "-synchronous set to false"
    if link.paused:
        return "the replica is paused"
    if not link.agreed:
        return "the replica no longer declares the source as its upstream"
    return f"no live gateway on cluster {link.replica.cluster.name}"


def link_sync_configured(*, link: ReplicaLink) -> None:
    """After add or edit: a link no longer synchronous leaves sync mode at once; a newly
    synchronous one starts async and is promoted as soon as it qualifies."""
    link = ReplicaLink.objects.with_agreement().select_related(
        "source__cluster", "replica__cluster").get(pk=link.pk)
    if link.mode == SyncMode.SYNC and not link.synchronous:
        link_mode_switch(link=link, to=SyncMode.ASYNC, reason=_drop_reason(link))
    elif (link.mode == SyncMode.ASYNC and link.synchronous and not link.paused and link.agreed
          and link.state == ReplicaState.REPLICATING
          and link.replica.cluster.name in clusters_served({link.replica.cluster.name})
          and _caught_up(link)):
        link_mode_switch(link=link, to=SyncMode.SYNC, reason=(
            f"-synchronous true, caught up, with a live gateway on cluster "
            f"{link.replica.cluster.name}"))
