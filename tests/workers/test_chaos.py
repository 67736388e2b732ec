"""The chaos soak, short (bench/chaos/; `make chaos` runs it for minutes): two multi-master
streams and a secondary, producers writing all along (through the services, a portal process
over REST and an idempotent librdkafka producer through a Kafka listener), gateways,
replicators, the portal and the listener killed with SIGKILL and restarted, newyork's
PostgreSQL crashed and restarted, replicas paused and resumed, a forced failover of newyork
from sanfrancisco and its failback; then every stream must equal its origins (invariants 1-3)
with every acknowledged message in place, once, in the primary or kept aside.

No Spark catch-up here: its JVM takes 20-50 s to start on these two cores and the link waits
for the job, which would double the test's time; `make chaos` runs it. No Redis restart
either: the tests share one Redis (`make chaos` runs on a Redis of its own)."""

from __future__ import annotations

from collections.abc import Iterator

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
from bench.chaos.command import forget_unacked
from bench.pgserver import BusyServer, PrivatePostgres, wait_for_free_connections
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


def test_every_stream_equals_its_origins_after_a_soak_of_faults(soak):
    assert soak.converge_seconds is not None, soak.table()
    assert sum(soak.anomalies.values()) == 0, "\n".join([soak.table(), *soak.examples[:20]])
    for kind in (*FAULT_KINDS[:3], "replicator kill -9", "portal kill -9",
                 "Kafka listener kill -9", "failover -force", "failback"):
        assert soak.faults[kind] >= 1, soak.table()  # each, while producers wrote
    assert all(acked > 0 for acked, _ in soak.ways.values()) and len(soak.ways) == 3
    # Replication moved again after each killed replicator: the other took its links.
    assert len(soak.driver.recovered["replicator kill -9"]) == soak.faults["replicator kill -9"]
    assert soak.acknowledged > 5_000 and soak.acknowledged + soak.refused == soak.produced
    # Each origin's topics are read once per stream that must hold them (two each).
    assert soak.checked >= 2 * soak.acknowledged

    # The same check on the same data finds a message taken out of the secondary's store: a
    # soak whose replicas lost anything would not pass.
    tokyo = soak.topology.streams["tokyo"]
    with psycopg.connect(store_url(tokyo.cluster), autocommit=True) as conn:
        removed = conn.execute(
            'DELETE FROM messages WHERE ctid = (SELECT ctid FROM messages WHERE "offset" = 3 '
            'LIMIT 1)').rowcount
    assert removed == 1
    # And a message of sanfrancisco's both in its topic and in the divergence topic: twice.
    keep_twice(soak.topology.streams[FAILED])
    recheck = Result(soak.seed, soak.seconds, topology=soak.topology, acked=soak.acked)
    check_all(recheck)
    assert recheck.anomalies["lost"] == 1 and set(recheck.anomalies) <= set(ANOMALIES)
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
