"""The fault driver: injects faults at random while the producers write, undoes each a moment
later (restart, resume, fail back), and times each kind from the fault to replication moving
again."""

from __future__ import annotations

import contextlib
import heapq
import random
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from bench.chaos.availability import Window
from bench.chaos.hafaults import HA_KINDS, HaFaults
from bench.chaos.sparkfaults import (
    catching_up,
    jobs_active,
    spark_app_running,
    spark_built,
    spark_catchup,
)
from bench.chaos.topology import (
    FAILED,
    GATEWAYS,
    PROMOTED,
    RESTARTED,
    Ends,
    Topology,
    held_by,
    held_through,
    origin_ends,
    recovery_since,
    replica_ends,
    stalled,
)
from bench.chaos.watchdog import DEADLINE, Watchdog

if TYPE_CHECKING:
    from bench.chaos.failover import Cycle
    from bench.chaos.moves import Mover
    from bench.chaos.options import Options

FAULT_KINDS = ("gateway kill -9", "PostgreSQL restart", "replica pause", "Spark catch-up",
               "replicator kill -9", "Redis restart", "portal kill -9", "Kafka listener kill -9",
               "Spark worker kill -9", "failover -force", "failback", "move", *HA_KINDS)
REPLICATORS = ("replicator-1", "replicator-2")  # two, so either may be killed
# How often each kind is drawn once every kind has run (the slow or rare ones are gated).
WEIGHTS = {"gateway kill -9": 3, "replica pause": 2, "replicator kill -9": 2,
           "Redis restart": 1, "portal kill -9": 1, "Kafka listener kill -9": 1, "move": 4,
           **dict.fromkeys(HA_KINDS, 2)}  # with --ha only
# The watchdog's deadline from a fault to replication moving again, where not DEADLINE: a
# catch-up's JVM takes 20-50 s to start on two busy cores before its link moves.
RECOVERY = {"Spark catch-up": 180.0, "Spark worker kill -9": 180.0}
SLOW = 3.0  # seconds: a driver step longer than this is said (it delays every undo due)
FAILBACK_ATTEMPTS = 5  # a store's pool may still be reconnecting after its restart


def drain_seconds() -> float:
    """A failback's drain may take all of STREAMGATE_FAILOVER_DRAIN_SECONDS on a busy machine."""
    from django.conf import settings

    return float(settings.FAILOVER_DRAIN_SECONDS)


class Engine(Protocol):
    """What the soak needs of the engine's processes (bench/chaos/command.py's Processes)."""

    processes: dict[str, subprocess.Popen]

    def gateway(self, cluster: str, name: str) -> subprocess.Popen: ...

    def replicator(self, label: str = "replicator") -> subprocess.Popen: ...

    def stop(self, label: str, *, kill: bool = False) -> None: ...

    def kill_all(self) -> None: ...


class Restartable(Protocol):
    """A server the soak may crash and start again (PostgreSQL, Redis)."""

    def start(self) -> None: ...

    def stop(self, mode: str = "fast") -> None: ...


class Store(Restartable, Protocol):
    """A PostgreSQL server holding message stores (bench/pgserver.py's PrivatePostgres)."""

    def url(self, database: str) -> str: ...


@dataclass(frozen=True)
class Entrance:
    """A process producers write through (a portal, a Kafka listener): killed -9 under them
    and started again on the same port."""

    label: str  # its label among the engine's processes
    restart: Callable[[], Any]


# --- the driver ----------------------------------------------------------------------------------


@dataclass
class Driver:
    """Injects faults at random and undoes each a moment later (restart, resume)."""

    engine: Engine
    store: Restartable
    topology: Topology
    options: Options
    rng: random.Random
    redis: Restartable | None = None  # a private Redis to restart, if the run has one
    entrances: dict[str, Entrance] = field(default_factory=dict)  # fault kind -> its process
    cycle: Cycle | None = None  # the failover/failback cycle, if the run has one
    # A standalone Spark cluster (workers/spark/standalone.py) the catch-ups run on, if any.
    spark_cluster: Any = None
    faults: Counter[str] = field(default_factory=Counter)
    undo: list[tuple[float, int, Callable[[], None]]] = field(default_factory=list)
    paused: set[tuple[str, str]] = field(default_factory=set)
    down: set[str] = field(default_factory=set)  # "PostgreSQL", "Redis" while crashed
    next_restart: float = 0.0
    next_spark: float = 0.0
    next_failover: float = 0.0
    _seq: int = 0
    # Faults whose replication has not moved again yet: (kind, when, the replica clusters it
    # stopped, their replica topics' ends then).
    pending: list[tuple[str, float, set[str], Ends]] = field(default_factory=list)
    hit: set[str] = field(default_factory=set)  # the replica clusters the last fault stopped
    recovered: dict[str, list[float]] = field(default_factory=dict)  # kind -> seconds each
    next_look: float = 0.0
    # Deadlines for each step; this default one never fires (run_soak gives a started one).
    watchdog: Watchdog = field(default_factory=lambda: Watchdog(
        say=print, stop=lambda: None, exit=lambda code: None))
    windows: list[Window] = field(default_factory=list)  # each fault, injected to undone
    began: float = 0.0  # when faults began (time.monotonic())
    last_held: dict = field(default_factory=dict)  # what a catch-up held, and when last
    ha: HaFaults | None = None  # the replicated group's faults (--ha), which replace the restart
    mover: Mover | None = None  # partition moves between each cluster's store groups (moves.py)

    def say(self, text: str) -> None:
        """A line of the run's log, with its time into the faults (the availability table's
        stretches and the recovery table name the same times)."""
        self.options.say(f"  {time.monotonic() - self.began:6.1f} s  {text}")

    @contextlib.contextmanager
    def step(self, what: str, seconds: float = DEADLINE) -> Iterator[None]:
        """A step of the driver's one thread under the watchdog, said when it took over SLOW
        seconds: every undo due meanwhile (a killed portal's restart) waited for it, which
        the availability table's stretches then show."""
        started = time.monotonic()
        with self.watchdog.step(what, seconds):
            yield
        if (took := time.monotonic() - started) > SLOW:
            self.say(f"slow: {what} took {took:.1f} s")

    def later(self, delay: float, action: Callable[[], None], what: str, kind: str = "",
              seconds: float = DEADLINE) -> None:
        """Run `action` (`what` it does) in `delay` seconds; with `kind`, it undoes a fault of
        that kind injected now, whose window ends when it has run."""
        at = time.monotonic()

        def undo() -> None:
            with self.step(what, seconds):
                action()
            if kind:
                self.windows.append(Window(kind, at, time.monotonic()))

        self._seq += 1
        heapq.heappush(self.undo, (at + delay, self._seq, undo))

    def kinds(self) -> list[str]:
        """Every kind this run can inject, the slow ones last (run first: popped)."""
        kinds = sorted(self.kinds_possible | ({"PostgreSQL restart"} if self.ha is None else set()))
        self.rng.shuffle(kinds)
        if self.spark:  # early: the job's JVM takes a while to start, let it overlap faults
            kinds.append("Spark catch-up")
        if self.cycle:  # first: a failover waits for no Spark job to run
            kinds.append("failover -force")
        return kinds

    def run(self, seconds: float) -> None:
        """Faults for `seconds`, then on (up to as long again) until each kind has run."""
        self.began = time.monotonic()
        deadline = self.began + seconds
        self.next_restart = time.monotonic() + self.rng.uniform(2, 6)
        kinds = self.kinds()  # each at least once, then at random
        due = time.monotonic() + 1.0
        while (now := time.monotonic()) < deadline or (kinds and now < deadline + seconds):
            self.run_due()
            self.look()
            if time.monotonic() >= due:
                kind = self.spark_worker_due() or (kinds.pop() if kinds else self.pick())
                self.inject(kind)
                if not self.faults[kind] and kind != "Spark worker kill -9":
                    # Nothing to do now (its service down, the group healing): again later,
                    # and something else now (a group that never healed took every turn).
                    kinds.insert(0, kind)
                    self.inject(self.pick())
                due = time.monotonic() + self.rng.uniform(*self.options.fault_every)
            time.sleep(0.05)
        self.restore()

    def pick(self) -> str:
        kinds = [kind for kind, weight in WEIGHTS.items() for _ in range(weight)
                 if kind in self.kinds_possible]
        now = time.monotonic()
        if now >= self.next_restart and "PostgreSQL" not in self.down and self.ha is None:
            kinds.append("PostgreSQL restart")
        if self.spark and now >= self.next_spark:
            kinds.append("Spark catch-up")
        if self.cycle and now >= self.next_failover and not self.topology.failed_over:
            kinds.append("failover -force")
        return self.rng.choice(kinds)

    def spark_worker_due(self) -> str:
        """The Spark worker's kill, once, as soon as a catch-up runs executors on it."""
        if (self.spark_cluster is None or self.faults["Spark worker kill -9"]
                or not spark_app_running(self.spark_cluster)):
            return ""
        return "Spark worker kill -9"

    @property
    def kinds_possible(self) -> set[str]:
        return {"gateway kill -9", "replica pause", "replicator kill -9", *self.entrances,
                *(["Redis restart"] if self.redis else []), *(self.ha.kinds if self.ha else ()),
                *(["move"] if self.mover else [])}

    @property
    def spark(self) -> bool:
        return self.options.spark and spark_built()

    def inject(self, kind: str) -> None:
        before, self.hit = sum(self.faults.values()), set(GATEWAYS)
        actions: dict[str, Callable[[], None]] = {
            "gateway kill -9": self.kill_gateway, "replica pause": self.pause_replica,
            "PostgreSQL restart": self.restart_store, "replicator kill -9": self.kill_replicator,
            "Redis restart": self.restart_redis, "failover -force": self.fail_over,
            "Spark worker kill -9": self.kill_spark_worker,
            "Spark catch-up": lambda: spark_catchup(self), "move": self.move_partition,
            **(self.ha.actions(self) if self.ha else {})}
        # A failover first undoes the faults pending (each a step of its own).
        with self.step(f"inject {kind}", DEADLINE * (4 if kind == "failover -force" else 1)):
            actions.get(kind, lambda: self.kill_entrance(kind))()
        if sum(self.faults.values()) > before:
            self.started(kind)

    def started(self, kind: str, at: float | None = None) -> None:
        self.pending.append((kind, at or time.monotonic(), self.hit,
                             replica_ends(self.topology, self.stores_down)))

    @property
    def stores_down(self) -> frozenset[str]:
        return frozenset({RESTARTED} if "PostgreSQL" in self.down else ())

    def look(self, every: float = 0.25) -> None:
        """Faults after which every replica topic has moved on (or caught up): the time from
        the fault to replication moving again, per kind."""
        now = time.monotonic()
        if not self.pending or (every and now < self.next_look):
            return
        self.next_look = now + every
        down = self.stores_down
        with self.step("read the replica and origin topics' ends"):
            ends, origins = replica_ends(self.topology, down), origin_ends(self.topology, down)
            held = held_through(self.topology, catching_up()) if self.spark else frozenset()
            still = []
        self.last_held.update(dict.fromkeys(held, now))
        for kind, at, clusters, before in self.pending:
            stuck = stalled(before, ends, origins, clusters, held)
            if not stuck:
                self.recovered.setdefault(kind, []).append(now - at)
                continue
            still.append((kind, at, clusters, before))
            seconds = RECOVERY.get(kind, DEADLINE)
            if now - recovery_since(at, before, self.last_held) > seconds:
                self.watchdog.expire(
                    f"recovery from {kind} (injected {at - self.began:.1f} s into the faults): "
                    "replication moving again", seconds, at,
                    "replica topics not moving:\n" + "\n".join(f"  {s}" for s in stuck))
        self.pending = still

    def run_due(self) -> None:
        while self.undo and self.undo[0][0] <= time.monotonic():
            heapq.heappop(self.undo)[2]()

    def restore(self) -> None:
        while self.undo:
            heapq.heappop(self.undo)[2]()

    # --- the faults ------------------------------------------------------------------------------

    def kill_gateway(self) -> None:
        running = [(c, n) for c, names in GATEWAYS.items() for n in names
                   if f"gw-{c}-{n}" in self.engine.processes]
        if not running:
            return
        cluster, name = self.rng.choice(running)
        self.engine.stop(f"gw-{cluster}-{name}", kill=True)  # SIGKILL: no goodbye, no flush
        self.hit = {cluster}
        self.faults["gateway kill -9"] += 1
        self.say(f"kill -9 gateway {name} of {cluster}")
        self.later(self.rng.uniform(0.5, 4.0), lambda: self.engine.gateway(cluster, name),
                   f"restart gateway {name} of {cluster}", "gateway kill -9")

    def kill_replicator(self) -> None:
        running = [label for label in REPLICATORS if label in self.engine.processes]
        if len(running) < len(REPLICATORS) or "Redis" in self.down:
            return  # one is down already: the fault is a replicator dying with another live
        label = self.rng.choice(running)
        self.hit = held_by(self.engine.processes[label].pid, self.topology)
        self.engine.stop(label, kill=True)
        self.faults["replicator kill -9"] += 1
        self.say(f"kill -9 {label}")
        self.later(self.rng.uniform(0.5, 4.0), lambda: self.engine.replicator(label),
                   f"restart {label}", "replicator kill -9")

    def kill_entrance(self, kind: str) -> None:
        entrance = self.entrances[kind]
        if entrance.label not in self.engine.processes:
            return
        self.engine.stop(entrance.label, kill=True)  # mid-call: producers see no answer
        self.faults[kind] += 1
        self.say(f"kill -9 {entrance.label}")
        self.later(self.rng.uniform(0.5, 3.0), entrance.restart, f"restart {entrance.label}",
                   kind)

    def kill_spark_worker(self) -> None:
        """SIGKILL to the worker and its executors mid catch-up, as a node lost; Spark reruns
        their tasks on the worker started a moment later (in a thread: it registers slowly)."""
        cluster = self.spark_cluster
        cluster.kill_worker()
        self.faults["Spark worker kill -9"] += 1
        self.say("kill -9 the Spark worker (and its executors)")

        def register() -> None:
            """Until the master lists a fresh worker ALIVE: a start that times out on a loaded
            machine is killed and tried again (one left half-started offered no cores, and a
            catch-up waited on it). The watchdog bounds the whole."""
            from workers.spark.standalone import ClusterError

            with self.watchdog.step("the restarted Spark worker to register"):
                while True:
                    try:
                        return cluster.start_worker()
                    except ClusterError as error:
                        self.say(f"the Spark worker did not register: {error}; again")
                        cluster.kill_worker()

        restart = threading.Thread(target=register, name="spark-worker", daemon=True)
        self.later(self.rng.uniform(0.5, 3.0), restart.start, "restart the Spark worker",
                   "Spark worker kill -9")

    def move_partition(self, path: tuple[str, ...] = (), why: str = "") -> None:
        """A partition (or two at once) moved to its cluster's other store group, each in a
        thread (moves.py), while the driver goes on; none while the most moves run. `path`:
        sanfrancisco's partitions on those clusters, as a failover or failback (`why`)
        begins."""
        started = self.mover.start(path) if self.mover else []
        if not started:
            return
        self.hit = set(GATEWAYS)  # a replica partition's gateway, and the links it feeds
        self.faults["move"] += 1  # an injection, of one move or two
        for move in started:
            self.say(f"move {move.name} ({move.role}) from store group {move.source} to "
                     f"{move.target} (in a thread{', with another' if move.together else ''}"
                     f"{why})")
        if why:  # inject's own bookkeeping, for a move the failover cycle starts
            self.started("move")

    def pause_replica(self) -> None:
        from replication.services import replica_pause, replica_resume

        moving = [link for link in self.topology.moving_links() if link not in self.paused]
        if not moving or "Redis" in self.down:
            return
        source, replica = self.rng.choice(moving)
        streams, actor = self.topology.streams, self.topology.actor
        replica_pause(actor=actor, source=streams[source], replica=streams[replica])
        self.paused.add((source, replica))
        self.hit = {replica}
        self.faults["replica pause"] += 1
        self.say(f"pause {source} -> {replica}")

        def resume() -> None:
            replica_resume(actor=actor, source=streams[source], replica=streams[replica])
            self.paused.discard((source, replica))

        self.later(self.rng.uniform(1.0, 5.0), resume, f"resume {source} -> {replica}",
                   "replica pause")

    def crash(self, what: str, server: Restartable, mode: str, up: Callable[[], None],
              kind: str) -> None:
        """Stop `server` at once and start it again a moment later."""
        server.stop(mode)
        self.down.add(what)

        def start() -> None:
            server.start()
            self.down.discard(what)
            up()

        self.later(self.rng.uniform(0.5, 2.5), start, f"start {what} again", kind)

    def restart_store(self) -> None:
        if "PostgreSQL" in self.down:
            return

        def up() -> None:
            self.next_restart = time.monotonic() + self.options.restart_every

        # Connections cut mid-transaction.
        self.crash("PostgreSQL", self.store, "immediate", up, "PostgreSQL restart")
        self.faults["PostgreSQL restart"] += 1
        self.say(f"crash {RESTARTED}'s PostgreSQL")

    def restart_redis(self) -> None:
        if self.redis is None or "Redis" in self.down:
            return
        # kill -9 and no persistence: queued batches, presence, leases and wake-ups are lost.
        self.crash("Redis", self.redis, "kill", lambda: None, "Redis restart")
        self.faults["Redis restart"] += 1
        self.say("kill -9 Redis (restarted empty)")

    def fail_over(self) -> None:
        if self.cycle is None or self.topology.failed_over or jobs_active() or (
                self.ha and not self.ha.ready(self)):
            return
        self.restore()  # links resumed, servers and processes up: the services need them
        at = time.monotonic()
        with self.watchdog.step("failover -force of newyork from sanfrancisco"):
            self.cycle.fail_over()
        self.windows.append(Window("failover -force", at, time.monotonic()))
        self.faults["failover -force"] += 1
        self.say("failover -force of newyork from sanfrancisco")
        # newyork now the origin of sanfrancisco's topics: one of them moves under producers.
        self.move_partition((PROMOTED,), ", as newyork took over")
        self.later(self.rng.uniform(6.0, 12.0), self.fail_back, "failback of sanfrancisco",
                   seconds=FAILBACK_ATTEMPTS * (drain_seconds() + 2 * DEADLINE))

    def fail_back(self, attempts: int = FAILBACK_ATTEMPTS) -> None:
        assert self.cycle is not None
        at = time.monotonic()
        drain = drain_seconds()
        # Moves of sanfrancisco's partitions while the failback cuts them back and drains
        # newyork's copy into them: replica partitions until the switch back.
        self.move_partition((FAILED,), ", during the failback")
        for attempt in range(attempts):
            self.restore()
            try:
                with self.watchdog.step(f"failback attempt {attempt + 1} of sanfrancisco (drain "
                                        f"up to {drain:g} s, then switch)", drain + DEADLINE):
                    self.cycle.fail_back()
                break
            except Exception as error:  # a store's pool reconnecting after its restart
                self.say(f"failback attempt {attempt + 1} failed: {error}")
                if attempt == attempts - 1:
                    raise
                time.sleep(1.0)
        self.faults["failback"] += 1
        self.windows.append(Window("failback", at, time.monotonic()))
        self.hit = set(GATEWAYS)
        self.started("failback", at)
        self.next_failover = time.monotonic() + self.options.failover_every
        self.say(f"failback of sanfrancisco ({self.cycle.kept_aside} kept aside so "
                         "far)")
