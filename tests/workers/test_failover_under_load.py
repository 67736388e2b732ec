"""A forced failover while producers on every interface keep knocking on a source whose store
server has been stopped (issue 26): it finishes in seconds, whatever they do, with or without
the replicator running. Real processes: a PostgreSQL server of the test's own for the lost
cluster's store, a Kafka listener with an idempotent confluent-kafka producer, REST producers
through a live portal, the `streamgate` CLI for the failover, the replicator and a gateway."""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable

import pytest
import requests
from confluent_kafka import Producer as KafkaProducer

from replication.engine.store import Record
from replication.models import Failover, Stream
from replication.presence import presence
from replication.services import replica_add, topic_create, upstream_add
from replication.services.messages import messages_produce
from replication.stores import store_for
from tests.factories import ClusterFactory, GatewayFactory, StreamFactory
from tests.workers.conftest import wait_until
from tests.workers.kafka.conftest import KafkaEndpoint, kafka_listeners, sasl_token  # noqa: F401
from tests.workers.test_failover import STREAMGATE

pytestmark = pytest.mark.django_db(transaction=True)
FAILOVER_BOUND = 10.0  # seconds: the bound for a forced failover under load


class Knocking:
    """Producers that write until told to stop, counting each attempt's outcome."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.outcomes: Counter[str] = Counter()
        self.threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def count(self, outcome: str) -> None:
        with self._lock:
            self.outcomes[outcome] += 1

    def run(self, name: str, attempt: Callable[[], None]) -> None:
        def loop() -> None:
            while not self.stop.is_set():
                attempt()
        thread = threading.Thread(target=loop, name=name, daemon=True)
        thread.start()
        self.threads.append(thread)

    def end(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(60)
        assert not any(t.is_alive() for t in self.threads)


def kafka_producer(knocking: Knocking, endpoint: KafkaEndpoint,
                   topic: str) -> tuple[Callable[[], None], KafkaProducer]:
    producer = KafkaProducer(endpoint.confluent(**{
        "enable.idempotence": True, "acks": "all", "linger.ms": 5,
        "message.timeout.ms": 20_000, "request.timeout.ms": 10_000}))

    def delivered(error, _message) -> None:  # type: ignore[no-untyped-def]
        knocking.count("kafka acked" if error is None else "kafka failed")

    def attempt() -> None:
        with contextlib.suppress(BufferError):  # its queue is full: poll, then try again
            producer.produce(topic, b"x" * 100, on_delivery=delivered)
        producer.poll(0.01)
    return attempt, producer


def rest_producer(knocking: Knocking, url: str, token: str) -> Callable[[], None]:
    session = requests.Session()
    session.headers["Authorization"] = f"Token {token}"
    body = {"records": [{"value": "r" * 100}] * 10}

    def attempt() -> None:
        try:
            answer = session.post(url, json=body, timeout=30)
            knocking.count(f"rest {answer.status_code}")
        except requests.RequestException:
            knocking.count("rest failed")
            time.sleep(0.05)
    return attempt


def failover_cli(live_url: str, token: str, replica: Stream) -> tuple[float, dict]:
    env = {"STREAMGATE_URL": live_url, "STREAMGATE_TOKEN": token, "PATH": "/usr/bin:/bin"}
    started = time.monotonic()
    done = subprocess.run(
        [str(STREAMGATE), "stream", "replica", "failover", "-path", replica.path,
         "-force", "true", "-json"], env=env, capture_output=True, text=True, timeout=60)
    took = time.monotonic() - started
    assert done.returncode == 0, (done.stdout, done.stderr)
    return took, json.loads(done.stdout)["data"][0]


@pytest.mark.parametrize("replicating", [False, True], ids=["alone", "replicator-running"])
def test_a_forced_failover_finishes_in_seconds_while_producers_knock_on_a_dead_store(
        replicating, engine, kafka_listeners, owner, newyork, private_postgres,  # noqa: F811
        live_server, private_cache, settings):
    lost = ClusterFactory(name="lost", store_url=private_postgres.url("lost_store"))
    store_for(lost), store_for(newyork)
    tenant = owner.memberships.get().tenant
    source = StreamFactory(cluster=lost, name="activity", created_by=owner, tenant=tenant)
    replica = StreamFactory(cluster=newyork, name="activity", created_by=owner, tenant=tenant)
    topic_create(actor=owner, stream=source, name="clicks", partitions=3)
    replica_add(actor=owner, source=source, replica=replica)
    upstream_add(actor=owner, replica=replica, source=source)
    if replicating:
        GatewayFactory(cluster=newyork, name="gw1")
        engine.gateway("newyork", "gw1")
        wait_until(lambda: presence().live([("newyork", "gw1")]), timeout=30)
        engine.replicator()

    endpoint = KafkaEndpoint(kafka_listeners.start("k1"), owner.get_username(),
                             sasl_token(owner), kafka_listeners)
    token = sasl_token(owner)
    knocking = Knocking()
    attempt, producer = kafka_producer(knocking, endpoint, f"{source.path}:clicks")
    knocking.run("kafka", attempt)
    rest_url = f"{live_server.url}/api/v1/streams/{source.uuid}/topics/clicks/messages/"
    for n in range(3):
        knocking.run(f"rest-{n}", rest_producer(knocking, rest_url, token))
    try:
        wait_until(lambda: knocking.outcomes["kafka acked"] > 50
                   and knocking.outcomes["rest 201"] > 5, timeout=60)
        private_postgres.stop("immediate")  # the source's cluster is lost; they keep knocking
        time.sleep(2)
        took, row = failover_cli(live_server.url, token, replica)
    finally:
        knocking.end()
        producer.purge()  # what is still queued is not this test's business
        producer.flush(0)

    assert took < FAILOVER_BOUND, f"the forced failover took {took:.1f}s"
    assert (row["forced"], row["sourceReachable"]) == (True, False)
    assert Failover.objects.get().forced
    # The replica is the origin now: producing there works at once.
    messages_produce(actor=owner, stream=Stream.objects.get(pk=replica.pk), topic="clicks",
                     records=[Record(b"after")])
    # And the source refuses producers once its store is back: none lands after the switch.
    private_postgres.start()
    wait_until(lambda: _answers(store_for(lost), source), timeout=30, every=0.3)
    before = _total(store_for(lost), source)
    answer = requests.post(rest_url, json={"records": [{"value": "late"}]},
                           headers={"Authorization": f"Token {token}"}, timeout=30)
    assert answer.status_code == 409 and "failed over" in answer.text, answer.text
    assert _total(store_for(lost), source) == before


def _answers(store, stream) -> bool:  # type: ignore[no-untyped-def]
    try:
        store.watermarks(stream.uuid, "clicks")
    except Exception:  # each pooled connection that died with the server fails once
        return False
    return True


def _total(store, stream) -> int:  # type: ignore[no-untyped-def]
    return sum(high - low for low, high in store.watermarks(stream.uuid, "clicks").values())
