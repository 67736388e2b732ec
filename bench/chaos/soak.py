"""The soak itself: options, the run (engine, producers, the fault driver, convergence) and the
checker's verdict. Runs on any Django database; bench/chaos/command.py and
tests/workers/test_chaos.py give it the processes and servers. The topology is in
topology.py, the producers in producers.py and entrances.py, the faults in faults.py, the
failover/failback cycle in failover.py."""

from __future__ import annotations

import ast
import random
import re
import shutil
import statistics
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from bench.chaos import availability
from bench.chaos.availability import Availability, Window
from bench.chaos.entrances import open_entrances
from bench.chaos.failover import Acknowledged, Cycle, acknowledged, check_failback
from bench.chaos.faults import (
    FAULT_KINDS,
    REPLICATORS,
    Driver,
    Engine,
    Restartable,
    Store,
)
from bench.chaos.hafaults import HaFaults
from bench.chaos.moves import Mover, add_groups, group_urls_wanted
from bench.chaos.options import Options
from bench.chaos.producers import Producer, Target
from bench.chaos.sparkfaults import jobs_active, spark_built
from bench.chaos.topology import (
    FAILED,
    GATEWAYS,
    PARTITIONS,
    RESTARTED,
    TOPICS,
    Topology,
    behind,
    build_topology,
    wait_live,
)
from bench.chaos.watchdog import DEADLINE, Watchdog

ROOT = Path(__file__).resolve().parents[2]
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
ANOMALIES = ("lost", "duplicates", "inconsistent", "reordered", "unreplicated")


@dataclass
class Result:
    seed: int
    seconds: float
    produced: int = 0
    acknowledged: int = 0
    refused: int = 0
    ways: dict[str, tuple[int, int]] = field(default_factory=dict)  # way -> (acked, refused)
    faults: Counter[str] = field(default_factory=Counter)
    spark: str = ""  # why no Spark catch-up ran, if none could
    jobs: Counter[str] = field(default_factory=Counter)
    kept_aside: int = 0  # by failbacks, in the divergence topics
    anomalies: Counter[str] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)
    checked: int = 0
    converge_seconds: float | None = None  # None: did not converge in time
    topology: Topology | None = field(default=None, repr=False)
    driver: Driver | None = field(default=None, repr=False)
    acked: Acknowledged | None = field(default=None, repr=False)
    acked_ids: set[bytes] = field(default_factory=set, repr=False)
    acked_twice: int = 0  # of the duplicates, those whose id was acknowledged
    resent: int = 0  # duplicates the Kafka client sent again under a new epoch (client_resent)
    availability: list[Availability] = field(default_factory=list)  # a row per producer
    windows: list[Window] = field(default_factory=list)  # each fault, injected to undone
    began: float = 0.0  # when faults began (time.monotonic())
    mover: Mover | None = field(default=None, repr=False)  # the partition moves, if any

    @property
    def misplaced(self) -> int:
        """Moves after which the stores' held flags disagree with the placement."""
        return self.mover.disagreements() if self.mover else 0

    @property
    def ok(self) -> bool:
        return (self.converge_seconds is not None and not sum(self.anomalies.values())
                and not self.misplaced)

    def table(self) -> str:
        converge = ("did not converge" if self.converge_seconds is None
                    else f"{self.converge_seconds:.1f} s")
        rows = [("faults injected for", f"{self.seconds:.0f} s (seed {self.seed})"),
                ("messages produced (sent)", f"{self.produced:,}"),
                ("acknowledged", f"{self.acknowledged:,}"),
                ("refused or unanswered (not acknowledged)", f"{self.refused:,}"),
                *((f"through {way}: acknowledged, not", f"{acked:,}, {refused:,}")
                  for way, (acked, refused) in self.ways.items()),
                *((f"faults: {kind}", self.injected(kind)) for kind in FAULT_KINDS),
                ("Spark jobs by outcome", ", ".join(f"{n} {state}" for state, n in
                                                     sorted(self.jobs.items())) or "none"),
                ("kept aside by failbacks (divergence topics)", f"{self.kept_aside:,}"),
                ("messages checked (all streams, and the failback's)", f"{self.checked:,}"),
                *((f"anomalies: {kind} (must be 0)", str(self.anomalies[kind]))
                  for kind in ANOMALIES),
                *((("moves: completed, retried, left", ", ".join(
                    str(sum(m.outcome == o for m in self.mover.moves))
                    for o in ("completed", "retried", "left"))),
                   ("moves: of replica partitions, alongside another move", ", ".join(
                       (str(sum(m.role == "replica" for m in self.mover.moves)),
                        str(self.mover.concurrent())))),
                   ("moves: held flags disagreeing with the placement (must be 0)",
                    str(self.misplaced))) if self.mover else ()),
                ("of the duplicates, acknowledged ones", str(self.acked_twice)),
                ("sent twice by librdkafka (a later epoch re-sent them: not the store's)",
                 f"{self.resent:,}"),
                ("time to converge (faults undone -> every replica = its origins)", converge)]
        lines = ["| measure | value |", "| --- | ---: |"]
        lines += [f"| {label} | {value} |" for label, value in rows]
        return "\n".join(lines)

    def availability_table(self) -> str:
        return availability.table(self.availability, self.longest_window, self.began)

    def availability_verdict(self) -> tuple[bool, str]:
        return availability.verdict(self.availability, self.longest_window)

    @property
    def longest_window(self) -> Window | None:
        return availability.longest_window(self.windows)

    def recovery_table(self) -> str:
        """Per fault kind, how many and the time to replication moving again, as a table for
        docs/benchmarks.md."""
        lines = [f"Faults for {self.seconds:.0f} s (seed {self.seed}); recovery: from the fault "
                 "to every replica topic it stopped moving again", "",
                 "| fault kind | injected | recovered | median | max |",
                 "| --- | ---: | ---: | ---: | ---: |"]
        for kind in FAULT_KINDS:
            took = self.driver.recovered.get(kind, []) if self.driver else []
            if not self.faults[kind] and not took:
                continue
            times = (f"{statistics.median(took):.1f} s | {max(took):.1f} s" if took
                     else "- | -")
            lines.append(f"| {kind} | {self.faults[kind]} | {len(took)} | {times} |")
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


def check_all(result: Result) -> None:
    """Every stream against each of its origins, with the acknowledged offsets, and
    sanfrancisco's acknowledged ids in its topics or kept aside by a failback; adds what it
    finds to `result`."""
    from replication.engine.checker import check_replica
    from replication.stores import store_for

    topology, acked = result.topology, result.acked
    assert topology is not None and acked is not None
    reports = []
    for origin, stream, topics in topology.pairs():
        copies = {"origin": (store_for(origin.cluster), origin.uuid),
                  "replica": (store_for(stream.cluster), stream.uuid)}
        reports.append((f"{stream.path} vs {origin.path}", check_replica(
            *copies["origin"], *copies["replica"], list(topics),
            acknowledged=acked.offsets[origin.cluster.name]), copies))
    # By id too: each acknowledged message of sanfrancisco's topics once, in them or kept aside.
    reports.append((f"{topology.streams[FAILED].path} and its divergence topics",
                    check_failback(topology, acked), {}))
    for where, report, copies in reports:
        result.checked += report.checked
        resent = [a for a in report.duplicates if client_resent(a, copies)]
        result.resent += len(resent)
        report.duplicates = [a for a in report.duplicates if a not in resent]
        result.acked_twice += sum(literal_id(a.detail) in result.acked_ids
                                  for a in report.duplicates)
        for kind in ANOMALIES:
            found = getattr(report, kind)
            result.anomalies[kind] += len(found)
            result.examples += [f"{where}: {a}{writers(a, copies)}" for a in found[:3]]
        result.examples += [f"{where}: re-sent by the client: {a}{writers(a, copies)}"
                            for a in resent[:1]]


def _copies_written(anomaly: Any, copies: dict[str, tuple[Any, Any]]
                    ) -> list[tuple[int, int, Any]] | None:
    """For a duplicate id on a batch store: (partition, offset, the stored batch holding it)
    of its first copy and of this one; None where the store keeps no batches."""
    store, stream = copies.get(anomaly.detail.split(":", 1)[0], (None, None))
    found = re.search(r"already at \((\d+), (\d+)\)", anomaly.detail)
    if not hasattr(store, "batch_holding") or found is None or anomaly.offset is None:
        return None
    where = ((int(found.group(1)), int(found.group(2))), (anomaly.partition, anomaly.offset))
    return [(p, o, store.batch_holding(stream, anomaly.topic, p, o)) for p, o in where]


def client_resent(anomaly: Any, copies: dict[str, tuple[Any, Any]]) -> bool:
    """A duplicate the Kafka client wrote twice: its second copy came from the same producer
    id under a later epoch. librdkafka bumps an idempotent producer's epoch when messages time
    out (or a request after a failed one is refused as out of order) and re-sends what it
    holds for retry, possibly written already, with sequences restarted at 0: no broker can tell
    it apart (librdkafka issue #4953; only transactions are exactly-once there). One under the
    same epoch and sequence would be the store's fault, and stays an anomaly."""
    written = _copies_written(anomaly, copies)
    if not written or any(b is None for _, _, b in written):
        return False
    (_, _, first), (_, _, second) = written
    return (first.producer_id == second.producer_id >= 0
            and second.epoch > first.epoch)


def writers(anomaly: Any, copies: dict[str, tuple[Any, Any]]) -> str:
    """A duplicate's copies as written on a batch store: producer id, epoch, sequence."""
    written = _copies_written(anomaly, copies)
    if written is None:
        return ""
    return " [" + "; ".join(
        "?" if b is None else f"{p}@{o}: producer {b.producer_id} epoch {b.epoch} seq "
        f"{b.base_sequence + o - b.base_offset} (batch {b.base_offset}-{b.last_offset})"
        for p, o, b in written) + "]"


def literal_id(detail: str) -> bytes | None:
    """The id an anomaly's text names (`id b'...'`), if any."""
    found = re.search(r"id (b'[^']*')", detail)
    return ast.literal_eval(found.group(1)) if found else None


def start_engine(engine: Engine, topology: Topology, say: Callable[[str], None]) -> None:
    from replication.stores import store_for

    begun = time.monotonic()
    for stream in topology.streams.values():
        store_for(stream.cluster)  # as cluster_create did: the stores exist before any gateway
    gateways = [(c, n) for c, names in GATEWAYS.items() for n in names]
    for cluster, name in gateways:
        engine.gateway(cluster, name)
    for label in REPLICATORS:
        engine.replicator(label)
    wait_live(gateways, timeout=180)  # start-up is not under test: a busy machine is slow
    say(f"engine up in {time.monotonic() - begun:.1f} s")


def run_soak(engine: Engine, store: Store, options: Options,
             others: Store | None = None, *, redis: Restartable | None = None,
             spark_cluster: object = None, ha: HaFaults | None = None) -> Result:
    """Set up the topology, start the engine, produce under faults, converge, check. `store`
    (a PrivatePostgres) holds newyork's message store and is crashed and restarted; `others`,
    if given, the other clusters' stores (else they sit beside the control database); `redis`,
    if given, the Redis every process uses, killed and restarted empty; `spark_cluster`, if
    given, the standalone Spark cluster the Celery worker submits catch-ups to, whose worker
    is killed mid-job; `ha`, if given, the replicated group's faults (bench/chaos/hafaults.py:
    `store` is then the group, never restarted whole). The caller owns (and stops) the
    processes and the servers."""
    say = options.say
    result = Result(options.seed, options.seconds)
    urls = {RESTARTED: store.url(f"{RESTARTED}_store")}
    if others:
        urls |= {c: others.url(f"{c}_store") for c in GATEWAYS if c != RESTARTED}
    if options.moves:  # each cluster's second store group, on the server not restarted
        urls |= group_urls_wanted(store, others)
    watchdog, own = options.watchdog, options.watchdog is None
    if watchdog is None:  # the tests: stop the engine, and the main thread's next step raises
        watchdog = Watchdog(say=say, stop=engine.kill_all, exit=lambda code: None).start()
    watchdog.databases = [("control database", control_url()),
                          *((f"{c}'s store", url) for c, url in urls.items())]
    watchdog.processes = lambda: {label: p.pid for label, p in list(engine.processes.items())}
    try:
        return soak(engine, store, options, watchdog, result, urls, redis=redis,
                    spark_cluster=spark_cluster, ha=ha)
    finally:
        if own:
            watchdog.close()


def soak(engine: Engine, store: Store, options: Options, watchdog: Watchdog, result: Result,
         urls: dict[str, str], *, redis: Restartable | None, spark_cluster: object,
         ha: HaFaults | None = None) -> Result:
    say = options.say
    with watchdog.step("set up the topology"):
        result.topology = topology = build_topology(urls)
        moved = add_groups(topology, urls) if options.moves else []
    with watchdog.step("start the engine (every gateway live)", 2 * DEADLINE):
        start_engine(engine, topology, say)
    result.spark = "" if spark_built() else "not built"
    result.spark = result.spark or ("" if options.spark else "off")
    if result.spark:
        say(f"Spark catch-up: {result.spark}")
    stop = threading.Event()
    producers = [Producer(c, Target(topology.streams[c]), topics, options, stop,
                          actor=topology.actor) for c, topics in TOPICS.items()]
    with watchdog.step("start the portal and the Kafka listener", 2 * DEADLINE):
        through, entrances = open_entrances(engine, topology, options,  # type: ignore[arg-type]
                                            stop)
    producers += through
    cycle = Cycle(topology, producers) if options.failover else None
    for producer in producers:
        producer.start()
    say(f"producing to {len(TOPICS) * 2} topics x {PARTITIONS} partitions through "
        f"{', '.join(sorted({p.way for p in producers}))}; faults for {options.seconds:.0f} s "
        f"(seed {options.seed})")
    driver = Driver(engine, store, topology, options, random.Random(options.seed), redis=redis,
                    entrances=entrances, cycle=cycle, spark_cluster=spark_cluster,
                    watchdog=watchdog, ha=ha)
    if options.moves:
        result.mover = driver.mover = Mover(topology, driver.rng, driver.say, tuple(moved))
    try:
        driver.run(options.seconds)
    finally:
        stop.set()
        stop_producers(producers, driver)
        driver.restore()
        if driver.mover is not None:
            with watchdog.step("the last partition move to end", 4 * DEADLINE):
                driver.mover.join(4 * DEADLINE)
    tally(result, driver, producers, cycle)
    with watchdog.step("wait for the Spark jobs and every replica to equal its origins",
                       2 * options.converge_timeout + DEADLINE):
        converge(result, driver, options)
    started = time.monotonic()
    with watchdog.step("check every stream against its origins", 15 * DEADLINE):
        check_all(result)
    say(f"checked in {time.monotonic() - started:.1f} s")
    return result


def spark_state(cluster: Any) -> str:
    """The standalone master's view after a job failed (its workers and applications), and
    where the master's, workers' and executors' logs were kept for a look."""
    kept = tempfile.mkdtemp(prefix="sgchaos-spark-")
    shutil.copytree(cluster.root, kept, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("local", "*.jar"))
    try:
        state = cluster.state()
    except (OSError, ValueError) as error:
        return f"  the Spark master did not answer ({error}); its logs are in {kept}"
    workers = [f"{w['id']} {w['state']} cores {w['coresused']}/{w['cores']}"
               for w in state["workers"]]
    apps = [f"{a['id']} {a['state']} cores {a['cores']}" for a in state["activeapps"]]
    return f"  Spark master: workers {workers}; active applications {apps}; logs in {kept}"


def spark_jobs(timeout: float, say: Callable[[str], None]) -> Counter[str]:
    """Wait for the catch-up jobs to end; their states."""
    if not spark_built():
        return Counter()
    from replication.models import Job

    deadline = time.monotonic() + timeout
    while jobs_active() and time.monotonic() < deadline:
        time.sleep(0.5)
    for job in Job.objects.exclude(error=""):
        say(f"  Spark job {job.pk} ({job.kind} {job.source_path} -> {job.destination_path}) "
            f"{job.state}: {job.error.strip().splitlines()[0][:300]}")
    return Counter(Job.objects.values_list("state", flat=True))


def control_url() -> str:
    """The control database as a libpq URL, for the watchdog's own connection."""
    from django.db import connection

    params = connection.settings_dict
    auth = quote(params["USER"]) + (f":{quote(params['PASSWORD'])}" if params.get("PASSWORD")
                                    else "")
    return (f"postgresql://{auth}@{params['HOST'] or '127.0.0.1'}:{params['PORT'] or 5432}/"
            f"{params['NAME']}")


def stop_producers(producers: list[Producer], driver: Driver) -> None:
    """Wait for the producers to end their last call (the Kafka producer flushes for up to
    90 s), measuring the faults' recovery meanwhile."""
    with driver.watchdog.step("stop the producers (the Kafka producer flushes up to 90 s)",
                              90 + 2 * DEADLINE):
        for producer in producers:
            while producer.is_alive():
                producer.join(timeout=0.25)
                driver.look()


def tally(result: Result, driver: Driver, producers: list[Producer], cycle: Cycle | None) -> None:
    assert result.topology is not None
    result.faults, result.driver = driver.faults, driver
    result.windows, result.began = driver.windows, driver.began
    result.availability = availability.measure(producers, driver.began)
    result.produced = sum(p.sent for p in producers)
    result.acknowledged = sum(len(p.acks) for p in producers)
    result.refused = sum(p.refused for p in producers)
    for producer in producers:
        acked, refused = result.ways.get(producer.way, (0, 0))
        result.ways[producer.way] = (acked + len(producer.acks), refused + producer.refused)
    cuts = cycle.cuts if cycle else []
    result.kept_aside = cycle.kept_aside if cycle else 0
    result.acked = acknowledged((a for p in producers for a in p.acks), result.topology, cuts)
    result.acked_ids = {a.id for p in producers for a in p.acks}
    errors = sum((p.errors for p in producers), Counter())
    if errors:
        driver.options.say(f"produce errors while faults ran: {dict(errors)}")


def converge(result: Result, driver: Driver, options: Options) -> None:
    """Wait for the Spark jobs to end and every replica to equal its origins."""
    assert result.topology is not None
    started = time.monotonic()
    result.jobs = spark_jobs(options.converge_timeout, options.say)
    if result.jobs.get("FAILED") and driver.spark_cluster is not None:
        options.say(spark_state(driver.spark_cluster))
    options.say(f"faults undone; jobs ended after {time.monotonic() - started:.1f} s")
    while lagging := behind(result.topology):
        driver.look()
        if time.monotonic() - started > options.converge_timeout:
            options.say("did not converge: " + "; ".join(lagging))
            return
        time.sleep(0.25)
    result.converge_seconds = time.monotonic() - started
    driver.look(every=0)  # faults of the last seconds: replication caught up, so moving
