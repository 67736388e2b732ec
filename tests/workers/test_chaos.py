"""The chaos soak, short (bench/chaos/; `make chaos` runs it for minutes): two multi-master
streams and a secondary, producers writing all along (through the services, a portal process
over REST and an idempotent librdkafka producer through a Kafka listener), gateways,
replicators, the portal and the listener killed with SIGKILL and restarted, newyork's
PostgreSQL crashed and restarted, replicas paused and resumed, a forced failover of newyork
from sanfrancisco and its failback, partitions moved between their cluster's two store groups
(origin and replica ones, two at once too); then every stream must equal its origins
(invariants 1-3) with every acknowledged message in place, once, in the primary or kept aside,
and each move placed and held in one group only.

No Spark catch-up here: its JVM takes 20-50 s to start on these two cores and the link waits
for the job, which would double the test's time; `make chaos` runs it. No Redis restart
either: the tests share one Redis (`make chaos` runs on a Redis of its own)."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from uuid import uuid4

import psycopg
import pytest
import redis
from django.conf import settings
from django.db import connection

from bench.chaos import (
    ANOMALIES,
    FAILED,
    FAULT_KINDS,
    SOAK_SETTINGS,
    Options,
    Processes,
    Result,
    check_all,
    run_soak,
)
from bench.chaos.availability import Availability, Window, longest_stretch, table, verdict
from bench.chaos.command import forget_unacked, report
from bench.chaos.soak import client_resent, control_url, writers
from bench.chaos.watchdog import Watchdog, WatchdogExpired
from bench.pgserver import BusyServer, PrivatePostgres, wait_for_free_connections
from replication.engine import open_store
from replication.engine.checker import check_replica
from replication.engine.recordbatch import encode_batch
from replication.engine.store import Record
from replication.services.failback import DIVERGED_SUFFIX, HEADER
from replication.stores import close_stores, store_for, store_url
from workers.celery import app

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

FAULT_SECONDS = 45.0


@pytest.fixture
def job_worker(engine, tmp_path) -> Iterator[None]:
    """A Celery worker for the Spark catch-up jobs, as conftest's celery_worker starts one but
    logging to a file (Spark writes much to stderr: an unread pipe would stall the worker),
    on a queue under the engine's namespace (whose Redis keys the engine fixture removes)."""
    queue = f"{engine.namespace}jobs"
    worker = Processes({**engine.env, "CELERY_QUEUE": queue}, tmp_path)
    previous = app.conf.task_default_queue
    app.conf.task_default_queue = queue
    worker.celery_worker()
    try:
        yield
    finally:
        app.conf.task_default_queue = previous
        worker.close()
        # Kombu also keeps `_kombu.binding_permanent.<queue>`, which the engine fixture's
        # patterns miss, and the killed gateways' tasks in its `unacked` hash.
        client = redis.Redis.from_url(settings.REDIS_URL)
        forget_unacked(client, engine.namespace)  # the killed gateways' tasks
        keys = list(client.scan_iter(f"_kombu.binding*{engine.namespace}*"))
        if keys:
            client.delete(*keys)


@pytest.fixture
def other_stores(private_postgres) -> Iterator[PrivatePostgres]:
    """A second server of the test's own for the clusters whose store is not restarted: the
    engine's store pools stay off the shared server, which other suites also fill."""
    with PrivatePostgres(durable=False) as server:
        yield server


NEEDED_CONNECTIONS = 40  # the engine's processes on the control database, with headroom


def wait_for_connections() -> None:
    """The control database's server is shared with other suites and benchmarks: a plain
    failure when it stays full, rather than `too many clients` from deep in the engine."""
    try:
        wait_for_free_connections(connection, NEEDED_CONNECTIONS)
    except BusyServer as error:
        pytest.fail(str(error))


@pytest.fixture
def soak(engine, job_worker, private_postgres, other_stores) -> Iterator[Result]:
    engine.env.update(SOAK_SETTINGS)  # on top of the tests' fast clocks (bench/chaos/soak.py)
    wait_for_connections()
    said: list[str] = []
    try:
        result = run_soak(engine, private_postgres,
                          Options(seconds=FAULT_SECONDS, converge_timeout=75.0, spark=False,
                                  failover_every=FAULT_SECONDS, say=said.append), other_stores)
        print("\n".join(said))
        print(result.table())
        yield result
    finally:
        close_stores()  # this process's pools, before their servers stop
        for label in list(engine.processes):  # the soak is over: no graceful stop to wait for
            engine.stop(label, kill=True)


def test_every_stream_equals_its_origins_after_a_soak_of_faults(soak, engine):
    assert soak.converge_seconds is not None, soak.table()
    assert sum(soak.anomalies.values()) == 0, "\n".join([soak.table(), *soak.examples[:20]])
    for kind in (*FAULT_KINDS[:3], "replicator kill -9", "portal kill -9",
                 "Kafka listener kill -9", "failover -force", "failback", "move"):
        assert soak.faults[kind] >= 1, soak.table()  # each, while producers wrote
    # Partitions moved between their cluster's two store groups while faults ran, two at once
    # too: sanfrancisco's on newyork (the failover path) first, sanfrancisco's own while the
    # failback drains into them (replica partitions then); each move ended placed on one
    # group, held there and only there.
    moves = soak.mover.moves
    assert len(moves) >= soak.faults["move"] and soak.misplaced == 0, soak.mover.table()
    assert all(m.outcome in ("completed", "retried", "left") for m in moves), soak.mover.table()
    assert any(m.outcome != "left" for m in moves), soak.mover.table()
    assert {m.cluster for m in moves[:2]} == {"newyork"}, soak.mover.table()
    # The opening pair overlapped (a later move may have started beside them too).
    assert {m.topic for m in moves[:2]} <= {"sf0", "sf1"} and 1 in moves[0].together
    assert any(m.role == "replica" and m.cluster == FAILED for m in moves), soak.mover.table()
    assert all(acked > 0 for acked, _ in soak.ways.values()) and len(soak.ways) == 4
    # Replication moved again after each killed replicator: the other took its links.
    assert len(soak.driver.recovered["replicator kill -9"]) == soak.faults["replicator kill -9"]
    assert soak.acknowledged > 5_000 and soak.acknowledged + soak.refused == soak.produced
    # Each origin's topics are read once per stream that must hold them (two each).
    assert soak.checked >= 2 * soak.acknowledged

    # What faults cost each interface: a row per producer, sent and acknowledged counted.
    table = soak.availability_table()
    for interface in ("services (sanfrancisco)", "services (newyork)", "REST (portal)",
                      "CLI (portal)", "Kafka (idempotent)"):
        [row] = [r for r in soak.availability if r.interface == interface]
        assert 0 < row.acknowledged <= row.attempts and 0 <= row.stretch < 2 * FAULT_SECONDS
        assert re.search(rf"^\| {re.escape(interface)} \| {row.attempts:,} \| "
                         rf"{row.acknowledged:,} \| {row.share:.2f} \|", table, re.M), table
    assert "longest fault window: " in table and soak.longest_window is not None
    # The portal and the Kafka listener each started again on a port of its own.
    for label in ("portal", "kafka"):
        assert "address already in use" not in engine.log(label), engine.log(label)[-2000:]
    assert soak.availability_verdict()[1].startswith("AVAILABILITY: ")
    recovery = soak.recovery_table()
    assert re.search(r"^\| gateway kill -9 \| \d+ \| \d+ \| [\d.]+ s \| [\d.]+ s \|$", recovery,
                     re.M), recovery

    # The same check on the same data finds a message taken out of the secondary's store: a
    # soak whose replicas lost anything would not pass.
    tokyo = soak.topology.streams["tokyo"]
    with psycopg.connect(store_url(tokyo.cluster), autocommit=True) as conn:
        [(removed,)] = conn.execute(  # a batch store loses the whole batch holding offset 3
            "DELETE FROM batches WHERE ctid = (SELECT ctid FROM batches WHERE base_offset <= 3 "
            "AND last_offset >= 3 AND pid IN (SELECT id FROM partitions WHERE held) LIMIT 1) "
            "RETURNING records").fetchall()  # of a partition this group holds (moves.py)
    # And a message of sanfrancisco's both in its topic and in the divergence topic: twice.
    keep_twice(soak.topology.streams[FAILED])
    recheck = Result(soak.seed, soak.seconds, topology=soak.topology, acked=soak.acked)
    check_all(recheck)
    # Each of its acknowledged messages (those a killed call wrote unanswered are not).
    assert 1 <= recheck.anomalies["lost"] <= removed, recheck.examples
    assert set(recheck.anomalies) <= set(ANOMALIES)
    assert recheck.anomalies["duplicates"] == 1, recheck.examples


def keep_twice(stream) -> None:  # type: ignore[no-untyped-def]
    """Append a copy of sf0's first message to `sf0.diverged`, as a failback keeping aside a
    message it had not cut would."""
    store = store_for(stream.cluster)
    [first] = store.read(stream.uuid, "sf0", 0, 0, limit=1)
    store.ensure_topic(stream.uuid, f"sf0{DIVERGED_SUFFIX}", 4)
    store.append(stream.uuid, f"sf0{DIVERGED_SUFFIX}", [Record(
        value=first.value, key=first.key, headers=(*first.headers, (f"{HEADER}offset", b"0")),
        partition=0)], origin=stream.uuid, producer=None)


HOLDER = """
import sys, time, psycopg
conn = psycopg.connect(sys.argv[1])
conn.execute("SELECT n FROM chaos_watchdog_probe WHERE id = 1 FOR SHARE")
print("backend", conn.info.backend_pid, flush=True)
time.sleep(120)
"""


def test_a_step_past_its_deadline_names_the_blocked_query_and_its_blocker_and_stops_the_soak(
        tmp_path):
    """The issue's hang in small: a soak process holds a share lock (idle in transaction), the
    soak's main thread waits on it inside a step. The watchdog reports the step, the blocked
    query with its blocking pid and the threads, kills the soak's processes (which frees the
    lock) and the main thread's next step fails."""
    url = control_url()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS chaos_watchdog_probe")
        conn.execute("CREATE TABLE chaos_watchdog_probe (id int PRIMARY KEY, n int)")
        conn.execute("INSERT INTO chaos_watchdog_probe VALUES (1, 0)")
    processes = Processes(dict(os.environ), tmp_path)
    holder = processes._start("holder", "-c", HOLDER, url)
    said: list[str] = []
    exits: list[int] = []
    watchdog = Watchdog(say=said.append, stop=processes.kill_all, exit=exits.append,
                        every=0.05).start()
    watchdog.databases = [("control database", url)]
    watchdog.processes = lambda: {"holder": holder.pid}
    try:
        holder_pid = backend_pid(tmp_path / "holder.log")
        started = time.monotonic()
        with (pytest.raises(WatchdogExpired), watchdog.step("failover -force of newyork", 1.0),
              psycopg.connect(url, autocommit=True) as conn):
            conn.execute("UPDATE chaos_watchdog_probe SET n = n + 1 WHERE id = 1")
        assert time.monotonic() - started < 20
    finally:
        watchdog.close()
        processes.kill_all()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("DROP TABLE chaos_watchdog_probe")
    report = watchdog.report
    print(report)
    assert report.startswith("WATCHDOG: step 'failover -force of newyork' passed its deadline "
                             "of 1 s"), report
    blocked = re.search(rf"pid \d+ blocked by \[{holder_pid}\]: active .*waits Lock/"
                        r"transactionid.*\n +UPDATE chaos_watchdog_probe SET n = n \+ 1", report)
    assert blocked, report
    assert re.search(rf"pid {holder_pid}: idle in transaction .*client port \d+ \(holder\)\n"
                     r" +SELECT n FROM chaos_watchdog_probe WHERE id = 1 FOR SHARE", report)
    assert "threads of the soak process:" in report and "thread MainThread" in report
    assert "in test_a_step_past_its_deadline" in report  # the main thread's stack, where it waits
    assert exits == [1] and said[-1].startswith("FAILED: the soak's step 'failover -force")
    # Killed and reaped, and none started after.
    assert holder.returncode is not None and not processes.processes
    with pytest.raises(RuntimeError, match="stopped"):
        processes._start("late", "-c", "pass")


def backend_pid(log, timeout: float = 30.0) -> int:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = re.search(r"backend (\d+)", log.read_text() if log.exists() else "")
        if found:
            return int(found.group(1))
        time.sleep(0.1)
    raise AssertionError(f"the lock holder never said its backend: {log.read_text()}")


def test_the_longest_stretch_without_an_acknowledgement_runs_from_the_start_to_the_end():
    assert longest_stretch([12.0, 13.0, 30.0], began=10.0, ended=31.0) == (17.0, 13.0)
    assert longest_stretch([11.0], began=10.0, ended=40.0) == (29.0, 11.0)
    assert longest_stretch([], began=10.0, ended=25.0) == (15.0, 10.0)
    # A Kafka delivery after the producer stopped sending closes the last stretch.
    assert longest_stretch([11.0, 50.0], began=10.0, ended=40.0) == (39.0, 11.0)


def test_an_interface_under_the_share_goal_or_with_a_long_stretch_misses_availability(capsys):
    window = Window("PostgreSQL restart", 100.0, 104.0)  # the longest: stretches up to 14 s
    rows = [Availability("REST (portal)", 1000, 500, 3.0, 5.0),
            Availability("Kafka (idempotent)", 1000, 900, 14.5, 7.0),
            Availability("CLI (portal)", 100, 90, 13.9, 1.0)]
    text = table(rows, window, zero=90.0)
    assert "| REST (portal) | 1,000 | 500 | 0.50 | 3.0 s | 5.0 s | MISSED: share < 0.7 |" in text
    assert ("| Kafka (idempotent) | 1,000 | 900 | 0.90 | 14.5 s | 7.0 s | "
            "MISSED: stretch > 14.0 s |") in text
    assert "| CLI (portal) | 100 | 90 | 0.90 | 13.9 s | 1.0 s | met |" in text
    assert "longest fault window: PostgreSQL restart, 4.0 s from 10.0 s" in text
    ok, line = verdict(rows, window)
    assert not ok and line.startswith("AVAILABILITY: MISSED by REST (portal) (share < 0.7); "
                                      "Kafka (idempotent) (stretch > 14.0 s); goal: ")
    # The checker's verdict decides the exit status; the availability's only when strict.
    result = Result(1, 60.0, converge_seconds=1.0, availability=rows, windows=[window],
                    began=90.0)
    assert report(result, strict=False) == 0
    assert report(result, strict=True) == 1
    out = capsys.readouterr().out
    assert "AVAILABILITY: MISSED" in out and "CORRECTNESS: passed (0 anomalies, converged)" in out
    assert verdict(rows[2:], window)[0]


def test_a_catchup_holds_the_topics_that_pass_through_its_destination_and_no_others():
    """Soak 4 of 27 Nov: a catch-up of sanfrancisco -> newyork froze newyork's copy of sf0 and
    sf1, and tokyo's copies (fed by newyork) were flagged as a stall after 60 s."""
    from types import SimpleNamespace

    from bench.chaos.topology import Topology, held_through, stalled

    streams = {c: SimpleNamespace(path=f"/mapr/{c}/activity")
               for c in ("sanfrancisco", "newyork", "tokyo")}
    topology = Topology(None, streams, [("sanfrancisco", "newyork"),
                                        ("newyork", "sanfrancisco"), ("newyork", "tokyo")])
    held = held_through(topology, frozenset({"/mapr/newyork/activity"}))
    tokyo = "/mapr/tokyo/activity"
    assert "/mapr/newyork/activity" in held
    assert {(tokyo, "sf0"), (tokyo, "sf1")} <= held
    assert not {(tokyo, "ny0"), (tokyo, "ny1")} & held  # newyork's own topics still move
    frozen = {(tokyo, t): {0: 5} for t in ("sf0", "sf1", "ny0", "ny1")}
    origins = {(tokyo, t): {0: 9} for t in ("sf0", "sf1", "ny0", "ny1")}
    assert stalled(frozen, frozen, origins, {"tokyo"}, held) == [
        f"{tokyo}:{t} at {{0: 5}} as before, origin at {{0: 9}}" for t in ("ny0", "ny1")]


def test_a_faults_recovery_deadline_runs_from_when_a_catchup_let_its_topics_go():
    """Soak 11 of 27 Nov: Redis restarted at 300 s while a catch-up into tokyo held sf1; the
    catch-up ended 105 s later, the gateways resumed, and the 60 s recovery deadline, counted
    from the restart, fired 17 s after the topic was free to move."""
    from bench.chaos.topology import recovery_since

    tokyo = "/mapr/tokyo/activity"
    topics = [(tokyo, "sf1"), (tokyo, "ny0")]
    assert recovery_since(300.0, topics, {}) == 300.0
    assert recovery_since(300.0, topics, {(tokyo, "sf1"): 405.0}) == 405.0  # a held topic
    assert recovery_since(300.0, topics, {tokyo: 390.0, (tokyo, "sf9"): 500.0}) == 390.0
    assert recovery_since(300.0, topics, {tokyo: 200.0}) == 300.0  # held before the fault


def test_a_duplicate_the_client_resent_under_a_later_epoch_is_told_from_the_stores(tmp_path):
    """librdkafka re-sends messages it holds for retry under a bumped epoch, sequences from 0
    (librdkafka #4953): the soak counts those apart; a second copy from another producer (or
    the same epoch) stays an anomaly."""
    store, stream = open_store(f"sqlite:///{tmp_path / 's.sqlite3'}", layout="batches"), uuid4()
    store.ensure_topic(stream, "t", 1)
    for ident, pid, epoch in ((b"a", 7, 0), (b"b", 9, 0), (b"a", 7, 2), (b"b", 8, 0)):
        store.append_raw(stream, "t", 0, encode_batch(
            [Record(b"v", headers=(("id", ident),))], producer_id=pid, producer_epoch=epoch,
            base_sequence=0), origin=stream)
    report = check_replica(store, stream, store, stream, ["t"])
    copies = {"origin": (store, stream), "replica": (store, stream)}
    resent = {(a.offset, client_resent(a, copies)) for a in report.duplicates}
    assert resent == {(2, True), (3, False)}, report.duplicates
    assert "producer 7 epoch 2 seq 0 (batch 2-2)" in writers(report.duplicates[0], copies)
    store.close()
