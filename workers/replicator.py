"""The source side of replication: one long-running loop (`manage.py runreplicator`, or a
thread of `runembedded`) that cuts batches per (replica, topic, partition) and hands each to a
live gateway of the destination cluster, round-robin.

Why it is safe whatever happens: the loop keeps no progress of its own. Each plan starts
from the replica partitions' ends, a gateway's apply trims what the replica already holds and
refuses a batch that would leave a gap, so a batch sent twice, to two gateways, or applied
late by a gateway presumed dead, changes nothing (invariant 2). At most one batch per
(link, topic, partition) is in flight, so batches of a partition reach the gateways in order;
across partitions any number run in parallel.

What wakes it: produce and cursor commits (a wake-up per stream after commit), a gateway's
acknowledgement (the partition's next batch) and its apply (a wake-up for the replica stream,
whose own replicas must move on), the services that start a link moving (resume, replica and
upstream add, edit), a retry timer for links waiting for a gateway or newly moving, and a slow
sweep over every moving link in case a wake-up was lost. Idle, it blocks in one BLPOP and
reads the moving links' ids once a retry interval.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog
from django.conf import settings
from django.db import DatabaseError, InterfaceError, connections

from replication.engine.replicator import BatchSpec, plan_batches, sync_cursors
from replication.engine.store import CursorKey
from replication.services.engine import (
    MovingLink,
    gateways_configured,
    link_error,
    link_ids_moving,
    link_progress,
    link_waiting,
    links_moving,
)
from replication.stores import store_for
from workers.presence import GatewayId, Presence, gateway_queue
from workers.throttle import Throttle

log = structlog.get_logger(__name__)
Key = tuple[int, str, int]  # (link id, topic, partition)
MAX_FAILURES = 3  # consecutive refusals of a partition before backing off to the retry timer
GATEWAYS_REFRESH = 5.0  # seconds between reads of the configured gateways


@dataclass
class InFlight:
    spec: BatchSpec
    gateway: GatewayId
    incarnation: str
    deadline: float


@dataclass
class Replicator:
    presence: Presence
    clock: Callable[[], float] = time.monotonic
    inbox: str = field(default_factory=lambda: uuid.uuid4().hex)  # where gateways acknowledge
    inflight: dict[Key, InFlight] = field(default_factory=dict)
    tickets: dict[str, Key] = field(default_factory=dict)
    # Gateways that missed an acknowledgement -> (skipped until, their incarnation then).
    suspect: dict[GatewayId, tuple[float, str]] = field(default_factory=dict)
    rr: dict[str, int] = field(default_factory=dict)  # round-robin counter per cluster
    failures: dict[Key, int] = field(default_factory=dict)
    dirty_streams: set[str] = field(default_factory=set)
    dirty_links: set[int] = field(default_factory=set)
    retry: set[int] = field(default_factory=set)  # links to re-plan at next_retry
    progressed: set[int] = field(default_factory=set)
    # Per link, each consumer cursor as last copied to the replica (see sync_cursors).
    cursors: dict[int, dict[CursorKey, int]] = field(default_factory=dict)
    owed: set[int] = field(default_factory=set)  # links with cursors clamped to the replica end
    throttles: dict[int, Throttle] = field(default_factory=dict)  # per throttled link
    throttled: dict[int, float] = field(default_factory=dict)  # link -> when tokens allow more
    linger_until: float | None = None
    next_sweep: float = 0.0  # the first step sweeps: wake-ups may have been lost while down
    next_retry: float = 0.0
    # Resume, replica add, upstream add and replica edit wake the source stream; in case that
    # wake-up is lost, one query of the moving links' ids a retry interval finds new ones.
    moving: set[int] = field(default_factory=set)
    next_watch: float = 0.0
    next_progress_write: float = 0.0
    _gateways: dict[str, list[str]] = field(default_factory=dict)
    _gateways_read: float = float("-inf")
    # This step's live gateways per cluster, with their incarnations: one MGET per cluster.
    _live: dict[str, list[tuple[GatewayId, str]]] = field(default_factory=dict)

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.step()
            except (DatabaseError, InterfaceError) as error:
                # A restarted database: reconnect on the next step; nothing is lost, the
                # replica partitions say where to go on from.
                log.warning("replicator_db_error", error=str(error))
                connections.close_all()
                stop.wait(1.0)
            except Exception:
                log.exception("replicator_step_failed")
                stop.wait(1.0)

    def step(self) -> None:
        signals = self.presence.wait(self._timeout(), self.inbox)
        now = self.clock()
        self._live = {}
        self._on_acks(signals.acks)
        if signals.streams:
            self.dirty_streams |= signals.streams
            if self.linger_until is None:  # let a burst of produces gather into one batch
                self.linger_until = now + settings.REPLICATION_LINGER_MS / 1000
        self._expire(now)
        self._plan(now)
        self._write_progress(now)

    # --- timing ------------------------------------------------------------------------------

    def _timeout(self) -> float:
        now = self.clock()
        due = [self.next_sweep, self.next_watch]
        if self.retry:
            due.append(self.next_retry)
        if self.dirty_links:
            due.append(now)
        if self.linger_until is not None:
            due.append(self.linger_until)
        if self.progressed:
            due.append(self.next_progress_write)
        due += self.throttled.values()
        due += [flight.deadline for flight in self.inflight.values()]
        return min(max(min(due) - now, 0.0), settings.REPLICATION_SWEEP_SECONDS)

    # --- acknowledgements and timeouts ------------------------------------------------------

    def _on_acks(self, acks: list[dict]) -> None:
        for ack in acks:
            key = self.tickets.pop(ack.get("ticket", ""), None)
            if key is None:
                continue  # a batch already re-sent elsewhere: its apply was a no-op or harmless
            self.inflight.pop(key, None)
            link_id = key[0]
            if not ack.get("error"):
                self.failures.pop(key, None)
                self.progressed.add(link_id)
                self.dirty_links.add(link_id)  # the partition's next batch, if any
                continue
            self.failures[key] = failures = self.failures.get(key, 0) + 1
            if ack.get("misordered") and failures < MAX_FAILURES:
                self.dirty_links.add(link_id)  # the replica moved meanwhile: re-plan from it
                continue
            link_error(link_id=link_id, error=ack["error"], gateway=ack.get("gateway", ""))
            self.retry.add(link_id)  # back off rather than spin on a batch that keeps failing

    def _expire(self, now: float) -> None:
        for key, flight in list(self.inflight.items()):
            if flight.deadline > now:
                continue
            del self.inflight[key]
            self.tickets = {t: k for t, k in self.tickets.items() if k != key}
            # No acknowledgement in time: the gateway counts as down for a while, and the
            # batch goes to another (if the first applies it late, the trim makes that a no-op).
            self.suspect[flight.gateway] = (now + settings.REPLICATION_SUSPECT_SECONDS,
                                            flight.incarnation)
            cluster, name = flight.gateway
            log.warning("gateway_timeout", cluster=cluster, gateway=name, link=key[0])
            link_error(link_id=key[0], gateway=name, error=(
                f"gateway {name} on cluster {cluster} did not acknowledge batch "
                f"{flight.spec.topic}:{flight.spec.partition} [{flight.spec.start}, "
                f"{flight.spec.end}) within {settings.REPLICATION_ACK_TIMEOUT:g}s: sent to "
                "another gateway"))
            self.dirty_links.add(key[0])

    # --- planning and dispatch ---------------------------------------------------------------

    def _plan(self, now: float) -> None:
        sweep = now >= self.next_sweep
        lingered = self.linger_until is not None and now >= self.linger_until
        if self.retry and now >= self.next_retry:
            self.dirty_links |= self.retry
            self.retry = set()
            self.next_retry = now + settings.REPLICATION_RETRY_SECONDS
        self._refilled(now)
        if now >= self.next_watch:
            moving = link_ids_moving()
            self.dirty_links |= moving - self.moving
            self.moving = moving
            self.cursors = {i: c for i, c in self.cursors.items() if i in moving}
            self.owed &= moving
            self.throttles = {i: t for i, t in self.throttles.items() if i in moving}
            self.next_watch = now + settings.REPLICATION_RETRY_SECONDS
        if not (sweep or lingered or self.dirty_links):
            return
        streams = self.dirty_streams if lingered else set()
        if sweep:
            links = links_moving()
            self.next_sweep = now + settings.REPLICATION_SWEEP_SECONDS
        else:
            links = links_moving(sources=streams, ids=self.dirty_links)
        if lingered or sweep:
            self.dirty_streams, self.linger_until = set(), None
        self.dirty_links = set()
        for link in links:
            # Cursors change only with a wake-up of the source stream (a commit), or wait for
            # data (owed); a pump on a gateway's acknowledgement alone skips reading them.
            cursors = sweep or str(link.source) in streams or link.id in self.owed
            self._pump(link, now, cursors=cursors or link.id not in self.cursors)

    def _pump(self, link: MovingLink, now: float, *, cursors: bool = True) -> None:
        try:
            specs = plan_batches(
                store_for(link.source_cluster), link.source, store_for(link.replica_cluster),
                link.replica, link.topics, max_messages=settings.REPLICATION_BATCH_MESSAGES,
                max_bytes=settings.REPLICATION_BATCH_BYTES,
            )
        except Exception as error:  # a store that is down: say so on the link, retry later
            log.warning("plan_failed", link=link.id, error=str(error))
            link_error(link_id=link.id, error=f"cannot plan batches: {error}")
            self.retry.add(link.id)
            return
        if cursors:
            self._sync_cursors(link)
        if not link.throttle:
            self.throttles.pop(link.id, None)  # unthrottled since: starts full if set again
        for spec in _first_per_partition(specs):
            key = (link.id, spec.topic, spec.partition)
            if key in self.inflight:
                continue  # one batch per partition in flight keeps the partition in order
            chosen = self._choose(link.replica_cluster.name, now)
            if chosen is None:
                link_waiting(link_ids=[link.id], cluster=link.replica_cluster.name)
                self.retry.add(link.id)
                return
            granted = self._throttle(link, spec, now) if link.throttle else spec
            if granted is not None:  # else a timer brings the link back, other links go on
                self._dispatch(link, key, granted, chosen, now)

    def _throttle(self, link: MovingLink, spec: BatchSpec, now: float) -> BatchSpec | None:
        throttle = self.throttles.get(link.id)
        if throttle is None:
            throttle = self.throttles[link.id] = Throttle.full(
                now, messages_per_s=settings.REPLICATION_THROTTLE_MESSAGES_PER_S,
                bytes_per_s=settings.REPLICATION_THROTTLE_BYTES_PER_S)
        granted = throttle.grant(spec, now)
        if granted is None:
            at = now + throttle.wait(spec)
            self.throttled[link.id] = min(self.throttled.get(link.id, at), at)
        return granted

    def _refilled(self, now: float) -> None:
        """Throttled links whose buckets refilled enough are planned again."""
        ready = {link_id for link_id, at in self.throttled.items() if at <= now}
        if ready:
            self.dirty_links |= ready
            self.throttled = {i: at for i, at in self.throttled.items() if i not in ready}

    def _sync_cursors(self, link: MovingLink) -> None:
        # Here rather than in a gateway: cursors change without new data (a consumer commits
        # after the replica caught up), and only the source side hears of that (a wake-up).
        synced = self.cursors.setdefault(link.id, {})
        try:
            owed = sync_cursors(store_for(link.source_cluster), link.source,
                                store_for(link.replica_cluster), link.replica, link.topics, synced)
        except Exception as error:  # retried on the next pump; data keeps moving meanwhile
            log.warning("cursor_sync_failed", link=link.id, error=str(error))
            owed = 1
        if owed:
            self.owed.add(link.id)
        else:
            self.owed.discard(link.id)

    def _choose(self, cluster: str, now: float) -> tuple[GatewayId, str] | None:
        """The next live gateway of the cluster, round-robin; None when all are down."""
        if now - self._gateways_read > GATEWAYS_REFRESH:
            self._gateways, self._gateways_read = gateways_configured(), now
        if cluster not in self._live:
            gateways = [(cluster, name) for name in self._gateways.get(cluster, ())]
            live = self.presence.live(gateways)
            self._live[cluster] = [(g, live[g]) for g in gateways
                                   if g in live and not self._suspected(g, live[g], now)]
        live = self._live[cluster]
        if not live:
            return None
        turn = self.rr.get(cluster, 0)
        self.rr[cluster] = turn + 1
        return live[turn % len(live)]

    def _suspected(self, gateway: GatewayId, incarnation: str, now: float) -> bool:
        until, then = self.suspect.get(gateway, (0.0, ""))
        # A restarted gateway (a new incarnation) is trusted again at once.
        return until > now and then == incarnation

    def _dispatch(self, link: MovingLink, key: Key, spec: BatchSpec,
                  chosen: tuple[GatewayId, str], now: float) -> None:
        from workers.tasks import apply_batch_task

        ticket = uuid.uuid4().hex
        timeout = settings.REPLICATION_ACK_TIMEOUT
        # Registered before sending: in embedded mode the task runs (and acknowledges) inside
        # apply_async.
        gateway, incarnation = chosen
        self.inflight[key] = InFlight(spec, gateway, incarnation, now + timeout)
        self.tickets[ticket] = key
        try:
            apply_batch_task.apply_async(
                args=(link.id, spec.topic, spec.partition, spec.start, spec.end),
                kwargs={"gateway": "/".join(gateway), "ticket": ticket, "reply_to": self.inbox},
                queue=gateway_queue(*gateway),
                # A batch still queued when its ack is long overdue was sent elsewhere already.
                expires=timeout * 3,
            )
        except Exception as error:  # the broker is down: nothing was sent
            self.inflight.pop(key, None)
            self.tickets.pop(ticket, None)
            link_error(link_id=link.id, error=f"cannot send a batch: {error}")
            self.retry.add(link.id)

    def _write_progress(self, now: float) -> None:
        # At most one write a second for every link that moved, not one per batch.
        if self.progressed and now >= self.next_progress_write:
            link_progress(link_ids=self.progressed)
            self.progressed = set()
            self.next_progress_write = now + 1.0


def _first_per_partition(specs: list[BatchSpec]) -> list[BatchSpec]:
    firsts: dict[tuple[str, int], BatchSpec] = {}
    for spec in specs:
        firsts.setdefault(spec.key, spec)
    return list(firsts.values())


def start_replicator_thread(presence: Presence) -> tuple[threading.Thread, threading.Event]:
    """Embedded mode: the replicator as a daemon thread of the serving process."""
    stop = threading.Event()
    thread = threading.Thread(target=Replicator(presence).run, args=(stop,),
                              name="replicator", daemon=True)
    thread.start()
    return thread, stop
