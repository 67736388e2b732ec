"""The soak itself: topology, producers, the fault driver, convergence and the checker.
Runs on any Django database; bench/chaos/command.py and tests/workers/test_chaos.py give it
the processes and PostgreSQL servers."""

from __future__ import annotations

import heapq
import importlib.util
import io
import random
import statistics
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 4
TOPICS = {"sanfrancisco": ("sf0", "sf1"), "newyork": ("ny0", "ny1")}  # origin -> its topics
GATEWAYS = {"sanfrancisco": ("gw1", "gw2"), "newyork": ("gw1", "gw2"), "tokyo": ("gw1",)}
RESTARTED = "newyork"  # the cluster whose store runs on the private PostgreSQL
# The tests' fast clocks (tests/workers/conftest.py): a killed gateway reads down in 2 s and
# its unacknowledged batch is resent after 3 s, so a few minutes hold many faults. A gateway
# that misses an acknowledgement is skipped for 5 s rather than 30: on a loaded machine slow
# applies miss it too, and tokyo has a single gateway.
ENGINE_SETTINGS = {
    "STREAMGATE_ACK_TIMEOUT": "3",
    "STREAMGATE_SUSPECT_SECONDS": "5",
    "STREAMGATE_RETRY_SECONDS": "0.5",
    "STREAMGATE_SWEEP_SECONDS": "5",
    "STREAMGATE_GATEWAY_HEARTBEAT": "0.5",
    "STREAMGATE_GATEWAY_TTL": "2",
    "STREAMGATE_LINGER_MS": "10",
    "STREAMGATE_BATCH_MESSAGES": "500",
    "STREAMGATE_GATEWAY_CONCURRENCY": "2",  # fewer threads, fewer database connections
}
SOAK_SETTINGS = {k: ENGINE_SETTINGS[k] for k in (
    "STREAMGATE_SUSPECT_SECONDS", "STREAMGATE_BATCH_MESSAGES", "STREAMGATE_GATEWAY_CONCURRENCY")}
FAULT_KINDS = ("gateway kill -9", "PostgreSQL restart", "replica pause", "Spark catch-up",
               "replicator kill -9")
REPLICATORS = ("replicator-1", "replicator-2")  # two, so either may be killed
Key = tuple[str, str]  # (stream path, topic)
ANOMALIES = ("lost", "duplicates", "inconsistent", "reordered", "unreplicated")


class Engine(Protocol):
    """What the soak needs of the engine's processes (tests/workers/conftest.py's Engine)."""

    processes: dict[str, subprocess.Popen]

    def gateway(self, cluster: str, name: str) -> subprocess.Popen: ...

    def replicator(self, label: str = "replicator") -> subprocess.Popen: ...

    def stop(self, label: str, *, kill: bool = False) -> None: ...


class Restartable(Protocol):
    """A PostgreSQL server the soak may crash and start again."""

    def url(self, database: str) -> str: ...

    def start(self) -> None: ...

    def stop(self, mode: str = "fast") -> None: ...


@dataclass
class Options:
    seconds: float = 60.0  # of faults
    seed: int = field(default_factory=lambda: random.randrange(1 << 30))
    batch: int = 100  # records per produce call
    interval: float = 0.05  # between a producer's calls: at most 2,000 messages/s each
    fault_every: tuple[float, float] = (1.0, 3.0)  # seconds between two faults
    restart_every: float = 12.0  # at least this long between two PostgreSQL restarts
    spark: bool = True  # Spark catch-ups too, when workers.spark is built
    spark_every: float = 30.0  # at least this long between two (a JVM starts for each)
    converge_timeout: float = 120.0
    say: Callable[[str], None] = print


# --- the topology --------------------------------------------------------------------------------


@dataclass
class Topology:
    actor: Any
    streams: dict[str, Any]  # cluster -> its /mapr/<cluster>/activity
    links: list[tuple[str, str]]  # (source cluster, replica cluster)

    def pairs(self) -> Iterator[tuple[Any, Any, tuple[str, ...]]]:
        """(origin, a stream that must hold the origin's topics, those topics)."""
        for origin, topics in TOPICS.items():
            for cluster, stream in self.streams.items():
                if cluster != origin:
                    yield self.streams[origin], stream, topics


def soak_user() -> Any:
    """An operator who is a member of a tenant: creates clusters and streams alike."""
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    call_command("createtenantuser", "--tenant", "chaos", "--username", "chaos", "--operator",
                 stdout=io.StringIO())
    return get_user_model().objects.get(username="chaos")


def build_topology(store_urls: dict[str, str]) -> Topology:
    from replication.services import (
        cluster_create,
        cluster_gateway_set,
        replica_add,
        stream_create,
        topic_create,
        upstream_add,
    )

    actor = soak_user()
    streams = {}
    for cluster, names in GATEWAYS.items():
        cluster_create(actor=actor, name=cluster,
                       store_url=store_urls.get(cluster, ""))
        cluster_gateway_set(actor=actor, dstcluster=cluster, gateways=" ".join(names))
        streams[cluster] = stream_create(actor=actor, path=f"/mapr/{cluster}/activity")
    for origin, topics in TOPICS.items():
        for topic in topics:
            topic_create(actor=actor, stream=streams[origin], name=topic, partitions=PARTITIONS)
    links = [("sanfrancisco", "newyork"), ("newyork", "sanfrancisco"), ("newyork", "tokyo")]
    for source, replica in links:
        replica_add(actor=actor, source=streams[source], replica=streams[replica])
        upstream_add(actor=actor, replica=streams[replica], source=streams[source])
    return Topology(actor, streams, links)


# --- producers -----------------------------------------------------------------------------------


class Producer(threading.Thread):
    """Produces numbered messages (an `id` header each, never reused: a call that failed may
    still have committed) round-robin over its stream's topics; keeps the acknowledged
    offsets."""

    def __init__(self, actor: Any, stream: Any, topics: tuple[str, ...], options: Options,
                 stop: threading.Event) -> None:
        self.cluster = stream.cluster.name
        super().__init__(name=f"producer-{self.cluster}", daemon=True)
        self.actor, self.stream, self.topics = actor, stream, topics
        self.options, self.halt = options, stop
        self.sent = self.refused = 0
        self.acked: dict[tuple[str, int], set[int]] = {}
        self.errors: Counter[str] = Counter()

    def run(self) -> None:
        from django.db import connections

        try:
            while not self.halt.is_set():
                self.produce_once()
                self.halt.wait(self.options.interval)
        finally:
            connections.close_all()

    def produce_once(self) -> None:
        from replication.engine.store import Record
        from replication.services.messages import messages_produce

        topic = self.topics[(self.sent // self.options.batch) % len(self.topics)]
        prefix = f"{self.cluster}/{topic}".encode()
        records = [Record(value=b"%s-%d:" % (prefix, n) + b"v" * 120, key=b"k%d" % (n % 101),
                          headers=(("id", b"%s-%d" % (prefix, n)),))
                   for n in range(self.sent, self.sent + self.options.batch)]
        self.sent += len(records)
        try:
            offsets = messages_produce(actor=self.actor, stream=self.stream, topic=topic,
                                       records=records)
        except Exception as error:  # the store restarting: not acknowledged, not retried
            self.refused += len(records)
            self.errors[type(error).__name__] += 1
            self.halt.wait(0.2)
            return
        for partition, offset in offsets:
            self.acked.setdefault((topic, partition), set()).add(offset)


# --- faults --------------------------------------------------------------------------------------


def spark_built() -> bool:
    return importlib.util.find_spec("workers.spark") is not None


def spark_catchup(driver: Driver) -> None:
    """HOOK: hand a replica link to the Spark catch-up job, as the replicator does with a
    large backlog (replication.services.engine.link_catchup_request): the Celery worker runs
    the job while the replicator leaves the link alone, then the link replicates on from the
    replica's end. Only called when `workers.spark` exists (else the soak prints "not
    built")."""
    from replication.models import Job, ReplicaLink
    from replication.services.engine import link_catchup_request

    source, replica = driver.rng.choice(driver.topology.links)
    streams = driver.topology.streams
    link = ReplicaLink.objects.get(source=streams[source], replica=streams[replica])
    before = Job.objects.count()
    # True also when a job of the link still runs: count only the jobs submitted here.
    if link_catchup_request(link_id=link.pk) and Job.objects.count() > before:
        driver.faults["Spark catch-up"] += 1
        driver.next_spark = time.monotonic() + driver.options.spark_every
        driver.options.say(f"  Spark catch-up of {source} -> {replica}")


def spark_jobs(timeout: float, say: Callable[[str], None]) -> Counter[str]:
    """Wait for the catch-up jobs to end; their states."""
    if not spark_built():
        return Counter()
    from replication.models import Job

    deadline = time.monotonic() + timeout
    while Job.objects.filter(state__in=Job.ACTIVE).exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    for job in Job.objects.exclude(error=""):
        say(f"  Spark job {job.pk} ({job.kind} {job.source_path} -> {job.destination_path}) "
            f"{job.state}: {job.error.strip().splitlines()[0][:300]}")
    return Counter(Job.objects.values_list("state", flat=True))


@dataclass
class Driver:
    """Injects faults at random and undoes each a moment later (restart, resume)."""

    engine: Engine
    store: Restartable
    topology: Topology
    options: Options
    rng: random.Random
    faults: Counter[str] = field(default_factory=Counter)
    undo: list[tuple[float, int, Callable[[], None]]] = field(default_factory=list)
    paused: set[tuple[str, str]] = field(default_factory=set)
    store_down: bool = False
    next_restart: float = 0.0
    next_spark: float = 0.0
    _seq: int = 0
    # Faults whose replication has not moved again yet: (kind, when, the replica clusters it
    # stopped, their replica topics' ends then).
    pending: list[tuple[str, float, set[str], dict[Key, dict[int, int] | None]]] = field(
        default_factory=list)
    hit: set[str] = field(default_factory=set)  # the replica clusters the last fault stopped
    recovered: dict[str, list[float]] = field(default_factory=dict)  # kind -> seconds each
    next_look: float = 0.0

    def later(self, delay: float, action: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self.undo, (time.monotonic() + delay, self._seq, action))

    def run(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        self.next_restart = time.monotonic() + self.rng.uniform(2, 6)
        # Each kind at least once, then at random.
        kinds = ["gateway kill -9", "replica pause", "PostgreSQL restart", "replicator kill -9"]
        self.rng.shuffle(kinds)
        if self.spark:  # first: the job's JVM takes a while to start, let it overlap faults
            kinds.append("Spark catch-up")
        due = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            self.run_due()
            self.look()
            if time.monotonic() >= due:
                self.inject(kinds.pop() if kinds else self.pick())
                due = time.monotonic() + self.rng.uniform(*self.options.fault_every)
            time.sleep(0.05)
        self.restore()

    def pick(self) -> str:
        kinds = ["gateway kill -9"] * 3 + ["replica pause"] * 2 + ["replicator kill -9"] * 2
        if time.monotonic() >= self.next_restart and not self.store_down:
            kinds.append("PostgreSQL restart")
        if self.spark and time.monotonic() >= self.next_spark:
            kinds.append("Spark catch-up")
        return self.rng.choice(kinds)

    @property
    def spark(self) -> bool:
        return self.options.spark and spark_built()

    def inject(self, kind: str) -> None:
        before, self.hit = sum(self.faults.values()), set(GATEWAYS)
        {"gateway kill -9": self.kill_gateway, "replica pause": self.pause_replica,
         "PostgreSQL restart": self.restart_store, "replicator kill -9": self.kill_replicator,
         "Spark catch-up": lambda: spark_catchup(self)}[kind]()
        if sum(self.faults.values()) > before:
            self.pending.append((kind, time.monotonic(), self.hit, replica_ends(self.topology)))

    def look(self, every: float = 0.25) -> None:
        """Faults after which every replica topic has moved on (or caught up): the time from
        the fault to replication moving again, per kind."""
        now = time.monotonic()
        if not self.pending or now < self.next_look:
            return
        self.next_look = now + every
        ends, origins = replica_ends(self.topology), origin_ends(self.topology)
        still = []
        for kind, at, clusters, before in self.pending:
            if moved(before, ends, origins, clusters):
                self.recovered.setdefault(kind, []).append(now - at)
            else:
                still.append((kind, at, clusters, before))
        self.pending = still

    def run_due(self) -> None:
        while self.undo and self.undo[0][0] <= time.monotonic():
            heapq.heappop(self.undo)[2]()

    def restore(self) -> None:
        while self.undo:
            heapq.heappop(self.undo)[2]()

    def kill_gateway(self) -> None:
        running = [(c, n) for c, names in GATEWAYS.items() for n in names
                   if f"gw-{c}-{n}" in self.engine.processes]
        if not running:
            return
        cluster, name = self.rng.choice(running)
        self.engine.stop(f"gw-{cluster}-{name}", kill=True)  # SIGKILL: no goodbye, no flush
        self.hit = {cluster}
        self.faults["gateway kill -9"] += 1
        self.options.say(f"  kill -9 gateway {name} of {cluster}")
        self.later(self.rng.uniform(0.5, 4.0), lambda: self.engine.gateway(cluster, name))

    def kill_replicator(self) -> None:
        running = [label for label in REPLICATORS if label in self.engine.processes]
        if len(running) < len(REPLICATORS):
            return  # one is down already: the fault is a replicator dying with another live
        label = self.rng.choice(running)
        self.hit = held_by(self.engine.processes[label].pid, self.topology)
        self.engine.stop(label, kill=True)
        self.faults["replicator kill -9"] += 1
        self.options.say(f"  kill -9 {label}")
        self.later(self.rng.uniform(0.5, 4.0), lambda: self.engine.replicator(label))

    def pause_replica(self) -> None:
        from replication.services import replica_pause, replica_resume

        moving = [link for link in self.topology.links if link not in self.paused]
        if not moving:
            return
        source, replica = self.rng.choice(moving)
        streams, actor = self.topology.streams, self.topology.actor
        replica_pause(actor=actor, source=streams[source], replica=streams[replica])
        self.paused.add((source, replica))
        self.hit = {replica}
        self.faults["replica pause"] += 1
        self.options.say(f"  pause {source} -> {replica}")

        def resume() -> None:
            replica_resume(actor=actor, source=streams[source], replica=streams[replica])
            self.paused.discard((source, replica))

        self.later(self.rng.uniform(1.0, 5.0), resume)

    def restart_store(self) -> None:
        if self.store_down:
            return
        self.store.stop("immediate")  # a crash: connections cut mid-transaction
        self.store_down = True
        self.faults["PostgreSQL restart"] += 1
        self.options.say(f"  crash {RESTARTED}'s PostgreSQL")

        def start() -> None:
            self.store.start()
            self.store_down = False
            self.next_restart = time.monotonic() + self.options.restart_every

        self.later(self.rng.uniform(0.5, 2.5), start)


# --- the soak ------------------------------------------------------------------------------------


@dataclass
class Result:
    seed: int
    seconds: float
    produced: int = 0
    acknowledged: int = 0
    refused: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    spark: str = ""  # why no Spark catch-up ran, if none could
    jobs: Counter[str] = field(default_factory=Counter)
    anomalies: Counter[str] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)
    checked: int = 0
    converge_seconds: float | None = None  # None: did not converge in time
    topology: Topology | None = field(default=None, repr=False)
    driver: Driver | None = field(default=None, repr=False)
    acked: dict[str, dict[tuple[str, int], set[int]]] = field(default_factory=dict, repr=False)

    @property
    def ok(self) -> bool:
        return self.converge_seconds is not None and not sum(self.anomalies.values())

    def table(self) -> str:
        converge = ("did not converge" if self.converge_seconds is None
                    else f"{self.converge_seconds:.1f} s")
        rows = [("faults injected for", f"{self.seconds:.0f} s (seed {self.seed})"),
                ("messages produced (sent)", f"{self.produced:,}"),
                ("acknowledged", f"{self.acknowledged:,}"),
                ("refused while the store was down (not acknowledged)", f"{self.refused:,}"),
                *((f"faults: {kind}", self.injected(kind)) for kind in FAULT_KINDS),
                ("Spark jobs by outcome", ", ".join(f"{n} {state}" for state, n in
                                                     sorted(self.jobs.items())) or "none"),
                ("messages checked (origin side, all streams)", f"{self.checked:,}"),
                *((f"anomalies: {kind} (must be 0)", str(self.anomalies[kind]))
                  for kind in ANOMALIES),
                ("time to converge (faults undone -> every replica = its origins)", converge)]
        lines = ["| measure | value |", "| --- | ---: |"]
        lines += [f"| {label} | {value} |" for label, value in rows]
        return "\n".join(lines)


    def injected(self, kind: str) -> str:
        """How many, and the time from the fault to replication moving again."""
        if kind == "Spark catch-up" and self.spark:
            return self.spark
        took = self.driver.recovered.get(kind, []) if self.driver else []
        count = f"{self.faults[kind]}"
        if not took:
            return count
        return (f"{count}; moving again after median {statistics.median(took):.1f} s, "
                f"max {max(took):.1f} s")


def replica_ends(topology: Topology) -> dict[Key, dict[int, int] | None]:
    return {(stream.path, topic): ends(stream, topic)
            for _origin, stream, topics in topology.pairs() for topic in topics}


def origin_ends(topology: Topology) -> dict[Key, dict[int, int] | None]:
    return {(stream.path, topic): ends(origin, topic)
            for origin, stream, topics in topology.pairs() for topic in topics}


def held_by(pid: int, topology: Topology) -> set[str]:
    """The replica clusters of the links the replicator process `pid` holds leases on."""
    from replication.models import ReplicaLink
    from replication.presence import presence

    signals = presence()
    ids = {s.id for s in signals.replicators() if s.pid == pid}
    links = dict(ReplicaLink.objects.filter(replica__path__in=[
        s.path for s in topology.streams.values()]).values_list("pk", "replica__cluster__name"))
    return {links[link] for link, owner in signals.lease_holders(links).items() if owner in ids}


def moved(before: dict[Key, dict[int, int] | None], now: dict[Key, dict[int, int] | None],
          origins: dict[Key, dict[int, int] | None], clusters: set[str]) -> bool:
    """Every replica topic of `clusters` advanced since `before`, or holds all its origin has
    (nothing stopped: moving at once)."""
    for key, ends_now in now.items():
        if key[0].split("/")[2] not in clusters:
            continue
        if ends_now is None:
            return False  # its store is down
        if ends_now == origins.get(key):
            continue
        then = before.get(key) or {}
        if sum(ends_now.values()) <= sum(then.values()):
            return False
    return True


def ends(stream: Any, topic: str) -> dict[int, int] | None:
    from replication.stores import store_for

    try:
        # A partition that never held a message may not exist on a replica yet.
        return {p: high for p, (_, high) in
                store_for(stream.cluster).watermarks(stream.uuid, topic).items() if high}
    except Exception:  # not heard of yet, or the restarted store's pool reconnecting
        return None


def behind(topology: Topology) -> list[str]:
    """Each (stream, topic) whose partitions' ends differ from its origin's, as text."""
    out = []
    for origin, stream, topics in topology.pairs():
        for topic in topics:
            want, have = ends(origin, topic), ends(stream, topic)
            if want is None or have != want:
                out.append(f"{stream.path}:{topic} at {have}, origin {origin.path} at {want}")
    return out


def wait_live(engine_gateways: list[tuple[str, str]], timeout: float = 60.0) -> None:
    from replication.presence import presence

    deadline = time.monotonic() + timeout
    while len(presence().live(engine_gateways)) < len(engine_gateways):
        if time.monotonic() > deadline:
            raise RuntimeError(f"gateways not live after {timeout:.0f} s")
        time.sleep(0.2)


def check_all(result: Result) -> None:
    """Every stream against each of its origins, with the acknowledged offsets; adds what
    it finds to `result`."""
    from replication.engine.checker import check_replica
    from replication.stores import store_for

    topology, acked = result.topology, result.acked
    assert topology is not None
    for origin, stream, topics in topology.pairs():
        report = check_replica(store_for(origin.cluster), origin.uuid,
                               store_for(stream.cluster), stream.uuid, list(topics),
                               acknowledged=acked[origin.cluster.name])
        result.checked += report.checked
        for kind in ANOMALIES:
            found = getattr(report, kind)
            result.anomalies[kind] += len(found)
            result.examples += [f"{stream.path} vs {origin.path}: {a}" for a in found[:3]]


def run_soak(engine: Engine, store: Restartable, options: Options,
             others: Restartable | None = None) -> Result:
    """Set up the topology, start the engine, produce under faults, converge, check. `store`
    holds newyork's message store and is crashed and restarted; `others`, if given, the other
    clusters' stores (else they sit beside the control database). The caller owns (and stops)
    the processes and the PostgreSQL servers."""
    from replication.stores import store_for

    say, rng, begun = options.say, random.Random(options.seed), time.monotonic()
    result = Result(options.seed, options.seconds)
    urls = {RESTARTED: store.url(f"{RESTARTED}_store")}
    if others:
        urls |= {c: others.url(f"{c}_store") for c in GATEWAYS if c != RESTARTED}
    result.topology = topology = build_topology(urls)
    for stream in topology.streams.values():
        store_for(stream.cluster)  # as cluster_create did: the stores exist before any gateway
    gateways = [(c, n) for c, names in GATEWAYS.items() for n in names]
    for cluster, name in gateways:
        engine.gateway(cluster, name)
    for label in REPLICATORS:
        engine.replicator(label)
    wait_live(gateways)
    say(f"engine up in {time.monotonic() - begun:.1f} s")
    if not spark_built():
        result.spark = "not built"
    elif not options.spark:
        result.spark = "off"
    if result.spark:
        say(f"Spark catch-up: {result.spark}")
    stop = threading.Event()
    producers = [Producer(topology.actor, topology.streams[c], topics, options, stop)
                 for c, topics in TOPICS.items()]
    for producer in producers:
        producer.start()
    say(f"producing to {len(TOPICS) * 2} topics x {PARTITIONS} partitions; faults for "
        f"{options.seconds:.0f} s (seed {options.seed})")
    driver = Driver(engine, store, topology, options, rng)
    try:
        driver.run(options.seconds)
    finally:
        stop.set()
        for producer in producers:
            producer.join(timeout=60)
        driver.restore()
    result.faults, result.driver = driver.faults, driver
    result.produced = sum(p.sent for p in producers)
    result.acknowledged = sum(len(s) for p in producers for s in p.acked.values())
    result.refused = sum(p.refused for p in producers)
    result.acked = {p.cluster: p.acked for p in producers}
    errors = sum((p.errors for p in producers), Counter())
    if errors:
        say(f"produce errors while faults ran: {dict(errors)}")
    started = time.monotonic()
    result.jobs = spark_jobs(options.converge_timeout, say)
    say(f"faults undone; jobs ended after {time.monotonic() - started:.1f} s")
    while lagging := behind(topology):
        driver.look()
        if time.monotonic() - started > options.converge_timeout:
            say("did not converge: " + "; ".join(lagging))
            break
        time.sleep(0.25)
    else:
        result.converge_seconds = time.monotonic() - started
    started = time.monotonic()
    check_all(result)
    say(f"checked in {time.monotonic() - started:.1f} s")
    return result


