"""acks=all is acknowledged only once the synchronous standby holds the commit; acks=1 once the
primary does (replication/engine/durability.py). Proven on a Patroni group by stopping the
synchronous standby's WAL receiver (SIGSTOP: its connection stays up, so the primary keeps
waiting on it): an acks=1 produce is acknowledged meanwhile, an acks=all one is not until the
receiver goes on."""

from __future__ import annotations

import contextlib
import os
import signal
import time

import psycopg
import pytest
from confluent_kafka import KafkaError, Producer

from tests.broker.test_idempotence import NAME
from tests.ha.test_store_failover import topic  # noqa: F401

pytestmark = pytest.mark.slow


def _sync_standby_receiver(ha_group) -> int:  # type: ignore[no-untyped-def]
    member = next(m for m in ha_group.patroni()["members"] if m["role"] == "sync_standby")
    with psycopg.connect(host="127.0.0.1", port=member["port"], user="postgres",
                         dbname="postgres", autocommit=True) as conn:
        return conn.execute("SELECT pid FROM pg_stat_wal_receiver").fetchone()[0]


@contextlib.contextmanager
def _stopped(pid: int):  # type: ignore[no-untyped-def]
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def _produce(kafka, acks: str, value: bytes, timeout_s: float) -> KafkaError | None:  # type: ignore[no-untyped-def]
    outcome: list = []
    producer = Producer(kafka.confluent(**{"acks": acks, "linger.ms": 0,
                                           "message.timeout.ms": int(timeout_s * 1000)}))
    producer.produce(NAME, value, on_delivery=lambda err, msg: outcome.append(err))
    producer.flush(timeout_s + 5)
    return outcome[0] if outcome else KafkaError(KafkaError._TIMED_OUT)


def test_acks_all_waits_for_the_synchronous_standby_and_acks_1_does_not(
    kafka, topic, ha_group  # noqa: F811
):
    assert _produce(kafka, "all", b"warm", 30) is None  # connections and metadata made
    receiver = _sync_standby_receiver(ha_group)
    with _stopped(receiver):
        started = time.monotonic()
        assert _produce(kafka, "1", b"one", 10) is None
        assert time.monotonic() - started < 5
        error = _produce(kafka, "all", b"all", 4)
        assert error is not None and error.code() == KafkaError._MSG_TIMED_OUT, error
    assert _produce(kafka, "all", b"after", 30) is None
