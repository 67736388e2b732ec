"""The source side of replication: one long-running loop (`manage.py runreplicator`, or a
thread of `runembedded`) that cuts batches per (replica, topic, partition) and hands each to a
live gateway of the destination cluster, round-robin.

Why it is safe whatever happens: the loop keeps no progress of its own. Each plan starts
from the replica partitions' ends (as last read, or as acknowledged since: a hint, forgotten
at any refusal, timeout, hand-off, lease change, link change and sweep), a gateway's apply
trims what the replica already holds and refuses a batch that would leave a gap, so a batch
sent twice, to two gateways, or applied late by a gateway presumed dead, changes nothing
(invariant 2). Up to REPLICATION_WINDOW batches of a (link, topic, partition) are in flight,
consecutive and all to one gateway, whose batch list (replication/transport/batchqueue.py; a step's
batches go in one pipeline) hands them out in order; one that still arrives before its
predecessor is applied waits a moment at the gateway, then is refused, and the replicator
forgets the partition's flights and re-plans from the replica's end. A partial batch (the tail
of a backlog) goes only when nothing of its partition is in flight, so under steady load
batches grow while the previous one travels instead of multiplying. Across partitions any
number run in parallel.

What wakes it: produce and cursor commits (a wake-up per stream after commit; a cursor
commit's is marked, CURSORS_CHANGED, and only it makes the plan copy cursors), a gateway's
acknowledgement (the partition's next batch, when the last plan saw more than is in flight)
and its apply to a replica that feeds a moving link of its own (a wake-up for the replica
stream), a change to a stream's links (resume, pause, replica and
upstream add, edit, a new topic: a marked wake-up, replication.services.wakeups.LINKS_CHANGED),
a retry timer for links waiting for a gateway or newly moving, and a slow sweep over every
moving link in case a wake-up was lost. Links are cached between wake-ups (linkcache.py);
progress events for the browser come from what the plans read (lagevents.py). Idle, it blocks
in one BLMPOP (replication/transport/inbox.py).

The loop owns only what a loop needs: what woke it, which links to plan and when, and the
replica ends as last seen. Where a planned batch goes (flights, gateway choice, throttle) is
the Dispatcher's (dispatcher.py); consumer cursors are CursorCopies' (cursors.py).

Any number run at once (`streamgate replicator run` on several nodes): each plans only the
links it holds a lease on, and the live ones split the moving links between them
(leases.py, replication/transport/leases.py); one that dies has its links taken by the others
within its lease.
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

from replication.engine.replicator import Backlog, backlog
from replication.models import MovingLink, ReplicaLink
from replication.services.jobs import catchup_request
from replication.services.linknotes import link_error, link_progress, link_waiting
from replication.services.wakeups import CURSORS_CHANGED, LINKS_CHANGED
from replication.stores import store_for
from replication.transport import Signals, Transport
from workers.replication.cursors import CursorCopies
from workers.replication.dispatcher import Dispatcher, Outbox
from workers.replication.flights import Key
from workers.replication.lagevents import LagEvents
from workers.replication.leases import LinkLeases
from workers.replication.linkcache import LinkCache, SweepMarks
from workers.replication.watch import PresenceWatch

log = structlog.get_logger(__name__)
MAX_FAILURES = 3  # consecutive refusals of a partition before backing off to the retry timer


@dataclass
class Replicator:
    transport: Transport
    clock: Callable[[], float] = time.monotonic
    inbox: str = field(default_factory=lambda: uuid.uuid4().hex)  # where gateways acknowledge
    failures: dict[Key, int] = field(default_factory=dict)
    dirty_streams: set[str] = field(default_factory=set)
    cursor_streams: set[str] = field(default_factory=set)  # of those, cursors were committed
    dirty_links: set[int] = field(default_factory=set)
    retry: set[int] = field(default_factory=set)  # links to re-plan at next_retry
    progressed: set[int] = field(default_factory=set)
    # Per link, the replica's next offset per partition as last read or acknowledged: a plan
    # reads only the source while these hold (engine/replicator.py _positions). Forgotten on
    # any doubt: a refusal, a timeout, a catch-up job, a lease taken over, the sweep.
    positions: dict[int, dict[tuple[str, int], int]] = field(default_factory=dict)
    linger_until: float | None = None
    next_sweep: float = 0.0  # the first step sweeps: wake-ups may have been lost while down
    next_retry: float = 0.0
    # Resume, replica add, upstream add and replica edit wake the source stream; in case that
    # wake-up is lost, one query of the moving links' ids a retry interval finds new ones.
    moving: set[int] = field(default_factory=set)
    next_watch: float = 0.0
    next_progress_write: float = 0.0
    handed_off: set[int] = field(default_factory=set)  # links a catch-up job is copying
    cache: LinkCache = field(default_factory=LinkCache)
    sweep_marks: SweepMarks = field(default_factory=SweepMarks)
    lag_events: LagEvents = field(default_factory=LagEvents)
    cursors: CursorCopies = field(default_factory=CursorCopies)
    dispatcher: Dispatcher = field(init=False)
    leases: LinkLeases = field(init=False)
    watcher: PresenceWatch = field(init=False)

    def __post_init__(self) -> None:
        self.dispatcher = Dispatcher(self.transport.gateways, self.inbox)
        self.leases = LinkLeases(self.transport.leases, self.inbox,
                                 settings.REPLICATOR_LEASE_SECONDS)
        self.watcher = PresenceWatch(self.transport.gateways)

    def run(self, stop: threading.Event) -> None:
        try:
            self._loop(stop)
        finally:
            try:
                self.leases.close()
            except Exception as error:  # Redis gone too: the leases expire by themselves
                log.warning("replicator_lease_release_failed", error=str(error))

    def _loop(self, stop: threading.Event) -> None:
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
        signals = self._wait()
        now = self.clock()
        self._on_acks(signals.acks, now)
        if signals.streams:
            self._on_wake(signals.streams, now)
        self._expire(now)
        self._plan(now)
        self._write_progress(now)

    def _on_wake(self, streams: set[str], now: float) -> None:
        marked = {s.removeprefix(LINKS_CHANGED) for s in streams if s.startswith(LINKS_CHANGED)}
        self.cache.changed |= marked
        for link_id in self.cache.of_sources(marked):
            self.positions.pop(link_id, None)  # paused, resumed or edited: read the replica
        self.cursor_streams |= {s.removeprefix(CURSORS_CHANGED) for s in streams
                                if s.startswith(CURSORS_CHANGED)}
        self.dirty_streams |= {s.removeprefix(LINKS_CHANGED).removeprefix(CURSORS_CHANGED)
                               for s in streams}
        if self.linger_until is None:
            # With batches in flight, a burst of produces gathers into the next batch while
            # they travel; with none, the first message goes at once (lag).
            linger = settings.REPLICATION_LINGER_MS / 1000 if self.dispatcher.flights else 0.0
            self.linger_until = now + linger

    # --- timing ------------------------------------------------------------------------------

    def _timeout(self) -> float:
        now = self.clock()
        due = [self.next_sweep, self.next_watch, self.leases.next_tick]
        if self.retry or self.handed_off:
            due.append(self.next_retry)
        if self.dirty_links:
            due.append(now)
        if self.linger_until is not None:
            due.append(self.linger_until)
        if self.progressed:
            due.append(self.next_progress_write)
        if (lag_round := self.lag_events.due()) is not None:
            due.append(lag_round)
        due += self.dispatcher.due()
        return min(max(min(due) - now, 0.0), settings.REPLICATION_SWEEP_SECONDS)

    # --- acknowledgements and timeouts ------------------------------------------------------

    def _on_acks(self, acks: list[dict], now: float) -> None:
        flights = self.dispatcher.flights
        for ack in acks:
            key = flights.key_of(ack.get("ticket", ""))
            if key is None:
                continue  # a batch already re-sent elsewhere: its apply was a no-op or harmless
            link_id = key[0]
            if not ack.get("error"):
                landed = flights.land(key, ack["ticket"], now)
                self.failures.pop(key, None)
                self.progressed.add(link_id)
                self.lag_events.moved(link_id, now)
                if landed is not None:
                    self.lag_events.applied(link_id, key[1:], landed.spec.end)
                    known = self.positions.get(link_id)
                    if known is not None:
                        known[key[1:]] = max(known.get(key[1:], 0), landed.spec.end)
                if flights.more(key, landed) or link_id in self.cursors.owed:
                    self.dirty_links.add(link_id)  # the partition's next batch
                continue
            # The later batches of the partition start past what this one would have brought:
            # they will be refused too. Forget them all and re-plan from the replica's end
            # (any of them still applied meanwhile is trimmed from the resent ones).
            flights.abandon(key)
            self.positions.pop(link_id, None)
            self.failures[key] = failures = self.failures.get(key, 0) + 1
            if ack.get("misordered") and failures < MAX_FAILURES:
                self.dirty_links.add(link_id)  # the replica moved meanwhile: re-plan from it
                continue
            link_error(link_id=link_id, error=ack["error"], gateway=ack.get("gateway", ""))
            self.retry.add(link_id)  # back off rather than spin on a batch that keeps failing

    def _expire(self, now: float) -> None:
        for key, late in self.dispatcher.expire(now):
            # No acknowledgement in time: the batches go to another gateway.
            self.positions.pop(key[0], None)
            cluster, name = late.gateway
            log.warning("gateway_timeout", cluster=cluster, gateway=name, link=key[0])
            link_error(link_id=key[0], gateway=name, error=(
                f"gateway {name} on cluster {cluster} did not acknowledge batch "
                f"{late.spec.topic}:{late.spec.partition} [{late.spec.start}, "
                f"{late.spec.end}) within {settings.REPLICATION_ACK_TIMEOUT:g}s: sent to "
                "another gateway"))
            self.dirty_links.add(key[0])

    def _watch(self, now: float) -> None:
        moving = ReplicaLink.objects.moving_ids()
        self.dirty_links |= moving - self.moving
        self.cache.keep(moving)
        self.moving = moving
        self.cursors.keep(moving)
        self.dispatcher.flights.keep(moving)
        self.positions = {i: p for i, p in self.positions.items() if i in moving}
        self.dispatcher.throttles.keep(moving)
        self.lag_events.keep(moving)
        # Gateways that died with no other gateway left to notice: announce them down and drop
        # their synchronous links to async now, not at the next produce or gateway start. One
        # replicator of the live ones does it (its queries were a seventh of a replicator's CPU).
        if self.leases.leads():
            self.watcher()
        self.next_watch = now + settings.REPLICATION_RETRY_SECONDS

    def _lease_tick(self, now: float) -> None:
        try:
            taken = self.leases.tick(self.moving, now)
        except Exception as error:  # presence unreachable: held leases lapse on their own
            log.warning("replicator_lease_failed", error=str(error))
            self.leases.next_tick = now + 1.0
            return
        if taken:
            log.info("replicator_links_taken", links=sorted(taken))
        self.dirty_links |= taken  # a dead peer's links move on now, not at the next sweep
        for link_id in taken:
            self.positions.pop(link_id, None)  # the peer moved the replicas meanwhile
        self.lag_events.keep(self.moving & self.leases.held)

    # --- planning ----------------------------------------------------------------------------

    def _plan(self, now: float) -> None:
        sweep = now >= self.next_sweep
        lingered = self.linger_until is not None and now >= self.linger_until
        if (self.retry or self.handed_off) and now >= self.next_retry:
            self.dirty_links |= self.retry | self.handed_off
            self.retry, self.handed_off = set(), set()
            self.next_retry = now + settings.REPLICATION_RETRY_SECONDS
        self.dirty_links |= self.dispatcher.throttles.refilled(now)
        if now >= self.next_watch:
            self._watch(now)
        if now >= self.leases.next_tick:
            self._lease_tick(now)
        if not (sweep or lingered or self.dirty_links):
            return
        streams = self.dirty_streams if lingered else set()
        cursor_streams = self.cursor_streams if lingered else set()
        if sweep:
            self.cache.reload(now)
            self.positions = {}
            self.next_sweep = now + settings.REPLICATION_SWEEP_SECONDS
        else:
            self.cache.refresh(streams, self.dirty_links, now)
        if lingered or sweep:
            self.dirty_streams, self.cursor_streams, self.linger_until = set(), set(), None
        for link in self._due(streams, sweep):
            # Cursors change only with a cursor commit's wake-up of the source stream, or
            # wait for data (owed); a pump on new data or an acknowledgement skips them.
            asked = sweep or str(link.source) in cursor_streams
            self._pump(link, now, cursors=self.cursors.due(link.id, asked))

    def _due(self, streams: set[str], sweep: bool) -> list[MovingLink]:
        """The cached links to plan now; a link handed to a catch-up job waits for the retry
        tick or a wake-up of its source stream."""
        links, dirty = self.cache.links, self.dirty_links
        ids = set(links) if sweep else dirty | self.cache.of_sources(streams)
        self.dirty_links = set()
        ids = self._held(ids & set(links))
        due = [links[i] for i in sorted(ids) if i in links]
        if sweep:
            due = self.sweep_marks.changed(due, always=dirty | self.cursors.owed)
        return [link for link in due
                if link.id not in self.handed_off or sweep or str(link.source) in streams]

    def _held(self, ids: set[int]) -> set[int]:
        """The links among `ids` this replicator holds a lease on (another plans the rest)."""
        try:
            return self.leases.holds(ids, self.clock())
        except Exception as error:  # presence unreachable: plan what is held still
            log.warning("replicator_lease_failed", error=str(error))
            return ids & self.leases.held if self.clock() < self.leases.valid_until else set()

    def _pump(self, link: MovingLink, now: float, *, cursors: bool = True) -> None:
        try:
            lagging = backlog(store_for(link.source_cluster), link.source,
                              store_for(link.replica_cluster), link.replica, link.topics,
                              self.positions.setdefault(link.id, {}))
        except Exception as error:  # a store that is down: say so on the link, retry later
            log.warning("plan_failed", link=link.id, error=str(error))
            link_error(link_id=link.id, error=f"cannot plan batches: {error}")
            self.retry.add(link.id)
            return
        self.lag_events.note(link, lagging, now)
        self.dispatcher.flights.highs[link.id] = {lag.key: lag.stats.high for lag in lagging}
        if cursors:
            self.cursors.sync(link)
        self.handed_off.discard(link.id)
        if lagging and self._hand_off(link, lagging, now):
            return
        if not link.throttle:
            self.dispatcher.throttles.unthrottled(link.id)
        queues = [self.dispatcher.window(link, lag) for lag in lagging]
        # Round by round across partitions, so a gateway's queue interleaves them and a batch
        # waiting at the gateway for its predecessor never holds up another partition's.
        while queues := [q for q in queues if q]:
            for queue in queues:
                sent = self.dispatcher.send(link, queue.pop(0), now)
                if sent is None:  # no gateway is live: the link waits for the retry timer
                    link_waiting(link_ids=[link.id], cluster=link.replica_cluster.name)
                    self.retry.add(link.id)
                    return
                if not sent:
                    queue.clear()

    def _hand_off(self, link: MovingLink, lagging: list[Backlog], now: float) -> bool:
        """A backlog past REPLICATION_CATCHUP_THRESHOLD on some partition goes to the bulk
        catch-up job when it takes it (replication.services.jobs)."""
        threshold = getattr(settings, "REPLICATION_CATCHUP_THRESHOLD", 0)
        if not threshold or max(lag.messages for lag in lagging) <= threshold:
            return False
        try:
            taken = catchup_request(link_id=link.id)
        except Exception as error:  # the job cannot be asked: copy the usual way meanwhile
            log.warning("catchup_request_failed", link=link.id, error=str(error))
            return False
        if taken:
            self.handed_off.add(link.id)
            self.positions.pop(link.id, None)  # the job moves the replica
            if self.next_retry <= now:  # asked again at the next tick, not at once
                self.next_retry = now + settings.REPLICATION_RETRY_SECONDS
        return taken

    # --- sending -----------------------------------------------------------------------------

    def _wait(self) -> Signals:
        """The next signals, the batches cut since the last wait sent in the same round trip
        (a step that sends batches takes one round trip to Redis, not two; in embedded mode
        they apply in the send, and their acknowledgements are there at once)."""
        outbox = self.dispatcher.take_outbox()
        try:
            return self.transport.inbox.wait(self._timeout(), self.inbox, sending=outbox)
        except Exception as error:
            self._unsent(outbox, error)
            raise

    def _unsent(self, outbox: Outbox, error: Exception) -> None:
        # The broker is down: the batches are sent again later (twice is harmless).
        for link_id in self.dispatcher.unsent(outbox):
            link_error(link_id=link_id, error=f"cannot send a batch: {error}")
            self.retry.add(link_id)

    # --- progress ---------------------------------------------------------------------------

    def _write_progress(self, now: float) -> None:
        # At most one write a second for every link that moved, not one per batch; the same
        # for the lag events, on a clock of their own.
        if self.progressed and now >= self.next_progress_write:
            link_progress(link_ids=self.progressed)
            self.progressed = set()
            self.next_progress_write = now + 1.0
        self.lag_events.publish(now)


def start_replicator_thread(signals: Transport) -> tuple[threading.Thread, threading.Event]:
    """Embedded mode: the replicator as a daemon thread of the serving process."""
    stop = threading.Event()
    thread = threading.Thread(target=Replicator(signals).run, args=(stop,),
                              name="replicator", daemon=True)
    thread.start()
    return thread, stop
