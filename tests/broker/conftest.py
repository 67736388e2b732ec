"""Real Kafka listener processes (`manage.py runkafka`) on the test database, and SASL
credentials for the shared users, for tests that drive them with real Kafka clients."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from knox.models import AuthToken

from bench.processes import stop_process

# The replication engine beside a listener (acks=all, group failover): the workers' fixture.
from tests.workers.conftest import (
    ROOT,
    engine,  # noqa: F401
    redis_namespace,
    test_database_url,
)

# Fast presence, so tests of listeners dying see leadership move in seconds.
JS = Path(__file__).parent / "js"  # the kafkajs scripts
LISTENER_SETTINGS = {"STREAMGATE_KAFKA_HEARTBEAT": "0.3", "STREAMGATE_KAFKA_TTL": "1.5",
                     # KIP-848 members: a test's session and heartbeat, not Kafka's 45 s and 5 s
                     "STREAMGATE_KAFKA_CONSUMER_SESSION_MS": "6000",
                     "STREAMGATE_KAFKA_CONSUMER_HEARTBEAT_MS": "300",
                     # a new group's first rebalance at once (Kafka's own development
                     # server.properties sets 0 too); test_group_initial_delay.py sets Kafka's 3 s
                     "STREAMGATE_KAFKA_GROUP_INITIAL_DELAY_MS": "0"}


def orders_topic(owner, partitions: int):  # type: ignore[no-untyped-def]
    """/mapr/c1/apps:orders in alice's tenant, with its partitions in the store."""
    from replication.stores import store_for
    from tests.factories import ClusterFactory, StreamFactory, TopicFactory

    stream = StreamFactory(cluster=ClusterFactory(name="c1"), name="apps", created_by=owner,
                           tenant=owner.memberships.get().tenant)
    made = TopicFactory(stream=stream, name="orders", partitions=partitions)
    store_for(stream.cluster).ensure_topic(stream.uuid, "orders", partitions)
    return made


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def sasl_token(user) -> str:  # type: ignore[no-untyped-def]
    return AuthToken.objects.create(user)[1]


@dataclass
class KafkaListeners:
    """The listener processes of one test, sharing a presence namespace of the test's own."""

    logs: Path
    env: dict[str, str]
    processes: dict[str, tuple[subprocess.Popen, int]] = field(default_factory=dict)

    def start(self, label: str = "k1", *args: str, port: int | None = None,
              env: dict[str, str] | None = None) -> str:
        port = port or free_port()
        log = (self.logs / f"kafka-{label}.log").open("ab")
        process = subprocess.Popen(
            [sys.executable, "manage.py", "runkafka", "--listen", f"127.0.0.1:{port}", *args],
            cwd=ROOT, env={**self.env, **(env or {})}, stdout=log, stderr=subprocess.STDOUT)
        self.processes[label] = (process, port)
        self._wait_ready(label, port)
        return f"127.0.0.1:{port}"

    def _wait_ready(self, label: str, port: int) -> None:
        deadline = time.monotonic() + 60
        while "kafka listener ready" not in self.log(label):
            process = self.processes[label][0]
            assert process.poll() is None, f"listener {label} exited:\n{self.log(label)}"
            assert time.monotonic() < deadline, f"listener {label} not ready:\n{self.log(label)}"
            time.sleep(0.1)

    def log(self, label: str = "k1") -> str:
        return (self.logs / f"kafka-{label}.log").read_text(errors="replace")

    def bootstrap(self, label: str = "k1") -> str:
        return f"127.0.0.1:{self.processes[label][1]}"

    def stop(self, label: str = "k1", *, kill: bool = False) -> None:
        stop_process(self.processes.pop(label)[0], kill=kill)

    def close(self) -> None:
        for label in list(self.processes):
            self.stop(label)


def scram_password(user, mechanism: str, password: str = "s3cret-scram") -> str:  # type: ignore[no-untyped-def]
    """`user`'s SCRAM password for `mechanism`, set through the service every interface uses."""
    from replication.services.credentials import scram_credential_set

    scram_credential_set(actor=user, mechanism=mechanism, password=password)
    return password


@dataclass(frozen=True)
class KafkaEndpoint:
    """A started listener and SASL credentials for alice (the `owner` fixture): an API token
    for PLAIN, or a SCRAM password for `mechanism`."""

    bootstrap: str
    username: str
    password: str
    listeners: KafkaListeners
    mechanism: str = "PLAIN"

    def confluent(self, **extra: object) -> dict[str, object]:
        return {"bootstrap.servers": self.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": self.mechanism, "sasl.username": self.username,
                "sasl.password": self.password, **extra}

    def kafka_python(self, **extra: object) -> dict[str, object]:
        return {"bootstrap_servers": self.bootstrap, "security_protocol": "SASL_PLAINTEXT",
                "sasl_mechanism": self.mechanism, "sasl_plain_username": self.username,
                "sasl_plain_password": self.password, **extra}

    def scram(self, user, mechanism: str) -> KafkaEndpoint:  # type: ignore[no-untyped-def]
        """The same listener, signing in as `user` with a SCRAM password set for `mechanism`."""
        return KafkaEndpoint(self.bootstrap, user.get_username(), scram_password(user, mechanism),
                             self.listeners, mechanism)

    def kafkajs(self, script: str, *args: str) -> dict:
        """Run one of the kafkajs scripts (js/) as this user: its one-line JSON answer."""
        env = {**os.environ, "KAFKA_BOOTSTRAP": self.bootstrap, "KAFKA_USERNAME": self.username,
               "KAFKA_PASSWORD": self.password}
        done = subprocess.run(["node", str(JS / script), *args], capture_output=True, text=True,
                              timeout=120, env=env)
        return json.loads(done.stdout.strip().splitlines()[-1])

    def as_user(self, user, password: str | None = None) -> KafkaEndpoint:  # type: ignore[no-untyped-def]
        return KafkaEndpoint(self.bootstrap, user.get_username(), password or sasl_token(user),
                             self.listeners)


@pytest.fixture
def kafka_listeners(transactional_db, tmp_path, settings) -> Iterator[KafkaListeners]:
    with redis_namespace(settings, "sgk") as namespace:
        env = {**os.environ, **LISTENER_SETTINGS, "DATABASE_URL": test_database_url(),
               "STREAMGATE_NAMESPACE": namespace}
        listeners = KafkaListeners(tmp_path, env)
        try:
            yield listeners
        finally:
            listeners.close()


@pytest.fixture
def kafka(kafka_listeners, owner) -> KafkaEndpoint:
    """One listener serving every cluster, and alice's SASL credentials."""
    bootstrap = kafka_listeners.start("k1")
    return KafkaEndpoint(bootstrap, owner.get_username(), sasl_token(owner), kafka_listeners)
