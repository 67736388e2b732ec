"""A real Celery worker process, on the test database and the local Redis, with a queue of its
own so concurrent test runs never take each other's tasks."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from bench.chaos.command import Processes, forget_unacked
from bench.pgserver import PG_BIN, PrivatePostgres
from bench.processes import stop_process
from workers.celery import app

ROOT = Path(__file__).resolve().parents[2]


def test_database_url() -> str:
    params = connection.settings_dict
    return (f"postgres://{params['USER']}@{params['HOST'] or '127.0.0.1'}:"
            f"{params['PORT'] or 5432}/{params['NAME']}")


@contextlib.contextmanager
def celery_worker_on(env: dict[str, str], logs: Path, prefix: str,
                     timeout: float = 15) -> Iterator[tuple[str, subprocess.Popen]]:
    """A Celery worker (solo pool; Spark jobs run in local mode inside it) on a queue of its
    own, which this process's tasks go to meanwhile: yields (queue, worker)."""
    queue = f"{prefix}-{uuid.uuid4().hex[:8]}"
    # A file, not a pipe: Spark jobs write much to stderr, and an unread pipe stalls them.
    with (logs / "celery-worker.log").open("ab") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "workers.celery", "worker", "-Q", queue,
             "--pool", "solo", "--without-heartbeat", "--without-gossip", "--without-mingle",
             "--loglevel", "WARNING"],
            cwd=ROOT, env={**env, "CELERY_QUEUE": queue}, stdout=log, stderr=subprocess.STDOUT,
        )
        previous = app.conf.task_default_queue
        app.conf.task_default_queue = queue
        try:
            yield queue, worker
        finally:
            app.conf.task_default_queue = previous
            stop_process(worker, timeout=timeout)


@pytest.fixture
def celery_worker(transactional_db, tmp_path) -> Iterator[str]:
    env = {**os.environ, "DATABASE_URL": test_database_url()}
    with celery_worker_on(env, tmp_path, "sg-test") as (queue, _):
        yield queue


def drop_keys(client, *patterns: str) -> None:  # type: ignore[no-untyped-def]
    """Delete a test's Redis keys (its namespace's) from the shared Redis."""
    for pattern in patterns:
        keys = list(client.scan_iter(pattern))
        if keys:
            client.delete(*keys)


def start_gateways(engine, cluster, *names: str) -> None:  # type: ignore[no-untyped-def]
    """Configure gateways `names` on `cluster`, start them, and return once all are live."""
    from replication.transport import transport
    from tests.factories import GatewayFactory

    for name in names:
        GatewayFactory(cluster=cluster, name=name)
        engine.gateway(cluster.name, name)
    gateways = [(cluster.name, n) for n in names]
    wait_until(lambda: len(transport().gateways.live(gateways)) == len(names), timeout=30)


def replicate_with_engine(engine, owner, source, replica) -> None:  # type: ignore[no-untyped-def]
    """source -> replica agreed both ways, a gateway gw1 on the replica's cluster, and the
    engine's processes (gateway, replicator) started."""
    from replication.services import replica_add, upstream_add
    from tests.factories import GatewayFactory

    replica_add(actor=owner, source=source, replica=replica)
    upstream_add(actor=owner, replica=replica, source=source)
    GatewayFactory(cluster=replica.cluster, name="gw1")
    engine.gateway(replica.cluster.name, "gw1")
    engine.replicator()


@contextlib.contextmanager
def in_process_engine(settings, cluster) -> Iterator[Any]:  # type: ignore[no-untyped-def]
    """`make run`'s engine: no Redis, a gateway gw1 on `cluster` living in this process
    (beating once, so it is live), and batches applied eagerly in the replicator's thread.
    Yields the in-process transport."""
    from replication.transport import transport
    from replication.transport.liveness import LocalLiveness
    from tests.factories import GatewayFactory
    from workers.replication.gateway import Heartbeat

    settings.REDIS_URL = ""
    app.conf.task_always_eager = True
    try:
        GatewayFactory(cluster=cluster, name="gw1")
        signals = transport()
        assert isinstance(signals.gateways, LocalLiveness)
        Heartbeat(None, signals).beat(database=True)
        yield signals
    finally:
        app.conf.task_always_eager = False


def wait_until(check, timeout: float = 30.0, every: float = 0.1) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(every)


# --- the replication engine as real processes --------------------------------------------------

# Fast clocks, so the failure tests run in seconds rather than minutes.
ENGINE_SETTINGS = {
    "STREAMGATE_ACK_TIMEOUT": "3",
    "STREAMGATE_SUSPECT_SECONDS": "30",
    "STREAMGATE_RETRY_SECONDS": "0.5",
    "STREAMGATE_SWEEP_SECONDS": "5",
    "STREAMGATE_GATEWAY_HEARTBEAT": "0.5",
    "STREAMGATE_GATEWAY_TTL": "2",
    "STREAMGATE_LINGER_MS": "10",
    "STREAMGATE_BATCH_MESSAGES": "200",
}


class Engine(Processes):
    """The replicator and gateways of one test as subprocesses (the chaos soak's own process
    group), on the test database, with Redis keys and Celery queues under a namespace of the
    test's own."""

    def __init__(self, namespace: str, logs: Path) -> None:
        super().__init__({**os.environ, **ENGINE_SETTINGS, "DATABASE_URL": test_database_url(),
                          "STREAMGATE_NAMESPACE": namespace}, logs)
        self.namespace = namespace

    def log(self, label: str) -> str:
        return (self.logs / f"{label}.log").read_text(errors="replace")


@contextlib.contextmanager
def redis_namespace(settings, prefix: str) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """A Redis key prefix of the test's own in the shared Redis; its keys, kombu's bindings
    for its queues and their unacknowledged tasks are dropped after."""
    import redis

    namespace = f"{prefix}-{uuid.uuid4().hex[:10]}:"
    try:
        yield namespace
    finally:
        client = redis.Redis.from_url(settings.REDIS_URL)
        # Tasks a killed gateway had taken wait in kombu's shared `unacked` hash, which any
        # worker on this Redis would put back on their queues: drop them with the keys.
        forget_unacked(client, namespace)
        drop_keys(client, f"{namespace}*", f"_kombu.binding*{namespace}*")


@pytest.fixture
def engine(transactional_db, settings, tmp_path) -> Iterator[Engine]:
    with redis_namespace(settings, "sgt") as namespace:
        settings.STREAMGATE_NAMESPACE = namespace
        for name, value in ENGINE_SETTINGS.items():
            target = {"STREAMGATE_ACK_TIMEOUT": "REPLICATION_ACK_TIMEOUT",
                      "STREAMGATE_GATEWAY_TTL": "GATEWAY_PRESENCE_TTL"}.get(name)
            if target:
                setattr(settings, target, float(value))
        engine = Engine(namespace, tmp_path)
        try:
            yield engine
        finally:
            engine.close()


# --- a PostgreSQL server of the test's own, to restart under the engine -------------------------


@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
    """Started, fast rather than crash-safe (its data dies with the test), removed after."""
    if not (PG_BIN / "initdb").exists():
        pytest.skip("needs PostgreSQL 15's initdb and pg_ctl")
    with PrivatePostgres(durable=False) as server:
        yield server
