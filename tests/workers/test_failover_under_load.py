"""Failover while producers on every interface keep writing (issue 26). A forced failover with
the source's store server stopped finishes in seconds, with or without the replicator
running; a planned one with the source up finishes within its drain time plus 10 s and keeps
every acknowledged message. Real processes: a PostgreSQL server of the test's own for the
source cluster's store, a Kafka listener with an idempotent confluent-kafka producer, REST
producers through a live portal, the `streamgate` CLI (producing, and the failover itself),
the replicator and a gateway."""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator

import pytest
import requests
from confluent_kafka import Producer as KafkaProducer

from replication.engine.store import Record
from replication.models import Failover, Stream
from replication.services import replica_add, topic_create, upstream_add
from replication.services.messages import messages_produce
from replication.stores import store_for
from replication.transport import transport
from tests.broker.conftest import KafkaEndpoint, kafka_listeners, sasl_token  # noqa: F401
from tests.factories import ClusterFactory, GatewayFactory, StreamFactory
from tests.workers.conftest import wait_until
from tests.workers.test_failover import STREAMGATE

pytestmark = pytest.mark.django_db(transaction=True)
FORCED_BOUND = 10.0  # seconds: the bound for a forced failover under load
PLANNED_SLACK = 10.0  # a planned one: its drain time plus this


class Producers:
    """Producers on every interface that write until told to stop, counting each attempt's
    outcome and remembering each acknowledged (partition, offset)."""

    def __init__(self, endpoint: KafkaEndpoint, live_url: str, token: str,
                 stream: Stream) -> None:
        self.stop = threading.Event()
        self.outcomes: Counter[str] = Counter()
        self.acked: set[tuple[int, int]] = set()
        self.threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self.kafka = KafkaProducer(endpoint.confluent(**{
            "enable.idempotence": True, "acks": "all", "linger.ms": 5,
            "message.timeout.ms": 20_000, "request.timeout.ms": 10_000}))
        self.topic = f"{stream.path}:clicks"
        self.rest_url = f"{live_url}/api/v1/streams/{stream.uuid}/topics/clicks/messages/"
        self.cli_env = {"STREAMGATE_URL": live_url, "STREAMGATE_TOKEN": token,
                        "PATH": "/usr/bin:/bin"}
        self.token = token

    def _ack(self, outcome: str, placed: Iterable[tuple[int, int]] = ()) -> None:
        with self._lock:
            self.outcomes[outcome] += 1
            self.acked.update(placed)

    def start(self, rest_threads: int = 3) -> None:
        self._run("kafka", self._kafka_once)
        for n in range(rest_threads):
            self._run(f"rest-{n}", self._rest_once(requests.Session()))
        self._run("cli", self._cli_once)

    def _run(self, name: str, attempt: Callable[[], None]) -> None:
        def loop() -> None:
            while not self.stop.is_set():
                attempt()
        thread = threading.Thread(target=loop, name=name, daemon=True)
        thread.start()
        self.threads.append(thread)

    def _kafka_once(self) -> None:
        def delivered(error, message) -> None:  # type: ignore[no-untyped-def]
            if error is None:
                self._ack("kafka acked", [(message.partition(), message.offset())])
            else:
                self._ack("kafka failed")
        with contextlib.suppress(BufferError):  # its queue is full: poll, then try again
            self.kafka.produce(self.topic, b"k" * 100, on_delivery=delivered)
        self.kafka.poll(0.01)

    def _rest_once(self, session: requests.Session) -> Callable[[], None]:
        session.headers["Authorization"] = f"Token {self.token}"

        def attempt() -> None:
            try:
                answer = session.post(self.rest_url, json={"records": [{"value": "r" * 100}] * 10},
                                      timeout=30)
            except requests.RequestException:
                self._ack("rest failed")
                time.sleep(0.05)
                return
            placed = ([(p["partition"], p["offset"]) for p in answer.json()["offsets"]]
                      if answer.status_code == 201 else [])
            self._ack(f"rest {answer.status_code}", placed)
        return attempt

    def _cli_once(self) -> None:
        lines = "\n".join(json.dumps({"value": f"c{i}"}) for i in range(10))
        done = subprocess.run(
            [str(STREAMGATE), "produce", "-path", self.topic.split(":")[0], "-topic", "clicks",
             "-format", "json"], input=lines, env=self.cli_env, capture_output=True, text=True,
            timeout=60, check=False)
        if done.returncode:
            self._ack("cli failed")
            time.sleep(0.05)
            return
        placed = [json.loads(line) for line in done.stdout.splitlines()]
        self._ack("cli acked", [(p["partition"], p["offset"]) for p in placed])

    def end(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(90)
        assert not any(t.is_alive() for t in self.threads)
        self.kafka.flush(30)  # every delivery report in: an acknowledgement is counted
        self.kafka.purge()

    def writing(self) -> bool:
        o = self.outcomes
        return o["kafka acked"] > 50 and o["rest 201"] > 5 and o["cli acked"] > 0


@contextlib.contextmanager
def producing(endpoint: KafkaEndpoint, live_url: str, token: str,
              stream: Stream) -> Iterator[Producers]:
    producers = Producers(endpoint, live_url, token, stream)
    producers.start()
    try:
        wait_until(producers.writing, timeout=90)
        yield producers
    finally:
        producers.end()


def failover_cli(live_url: str, token: str, replica: Stream, *, force: bool) -> tuple[float, dict]:
    env = {"STREAMGATE_URL": live_url, "STREAMGATE_TOKEN": token, "PATH": "/usr/bin:/bin"}
    started = time.monotonic()
    done = subprocess.run(
        [str(STREAMGATE), "stream", "replica", "failover", "-path", replica.path,
         "-force", "true" if force else "false", "-json"], env=env, capture_output=True,
        text=True, timeout=90)
    took = time.monotonic() - started
    assert done.returncode == 0, (done.stdout, done.stderr)
    return took, json.loads(done.stdout)["data"][0]


@pytest.fixture
def pair(engine, kafka_listeners, owner, newyork, private_postgres):  # noqa: F811
    """/mapr/lost/activity (its store a server of the test's own) replicated to newyork, a
    Kafka listener, and alice's credentials: (source, replica, endpoint, token)."""
    lost = ClusterFactory(name="lost", store_url=private_postgres.url("lost_store"))
    store_for(lost), store_for(newyork)
    tenant = owner.memberships.get().tenant
    source = StreamFactory(cluster=lost, name="activity", created_by=owner, tenant=tenant)
    replica = StreamFactory(cluster=newyork, name="activity", created_by=owner, tenant=tenant)
    topic_create(actor=owner, stream=source, name="clicks", partitions=3)
    replica_add(actor=owner, source=source, replica=replica)
    upstream_add(actor=owner, replica=replica, source=source)
    endpoint = KafkaEndpoint(kafka_listeners.start("k1"), owner.get_username(),
                             sasl_token(owner), kafka_listeners)
    return source, replica, endpoint, sasl_token(owner)


def replicating(engine, newyork) -> None:  # type: ignore[no-untyped-def]
    GatewayFactory(cluster=newyork, name="gw1")
    engine.gateway("newyork", "gw1")
    # a busy machine
    wait_until(lambda: transport().gateways.live([("newyork", "gw1")]), timeout=90)
    engine.replicator()


@pytest.mark.parametrize("with_replicator", [False, True], ids=["alone", "replicator-running"])
def test_a_forced_failover_finishes_in_seconds_while_producers_knock_on_a_dead_store(
        with_replicator, pair, engine, owner, newyork, private_postgres, live_server,
        private_cache):
    source, replica, endpoint, token = pair
    if with_replicator:
        replicating(engine, newyork)
    with producing(endpoint, live_server.url, token, source):
        private_postgres.stop("immediate")  # the source's cluster is lost; they keep knocking
        time.sleep(2)
        took, row = failover_cli(live_server.url, token, replica, force=True)

    assert took < FORCED_BOUND, f"the forced failover took {took:.1f}s"
    assert (row["forced"], row["sourceReachable"]) == (True, False)
    assert Failover.objects.get().forced
    # The replica is the origin now: producing there works at once.
    messages_produce(actor=owner, stream=Stream.objects.get(pk=replica.pk), topic="clicks",
                     records=[Record(b"after")])
    # And the source refuses producers once its store is back: none lands after the switch.
    private_postgres.start()
    lost = store_for(source.cluster)
    wait_until(lambda: _answers(lost, source), timeout=30, every=0.3)
    before = _ends(lost, source)
    rest_url = f"{live_server.url}/api/v1/streams/{source.uuid}/topics/clicks/messages/"
    answer = requests.post(rest_url, json={"records": [{"value": "late"}]},
                           headers={"Authorization": f"Token {token}"}, timeout=30)
    assert answer.status_code == 409 and "failed over" in answer.text, answer.text
    assert _ends(lost, source) == before


def test_a_planned_failover_under_load_finishes_in_its_drain_time_and_keeps_every_ack(
        pair, engine, owner, newyork, live_server, private_cache, settings):
    source, replica, endpoint, token = pair
    replicating(engine, newyork)
    with producing(endpoint, live_server.url, token, source) as producers:
        time.sleep(1)
        took, row = failover_cli(live_server.url, token, replica, force=False)
        time.sleep(1)  # they keep knocking on the stopped source meanwhile

    assert took < settings.FAILOVER_DRAIN_SECONDS + PLANNED_SLACK
    assert (row["forced"], row["sourceReachable"], row["messagesMissing"]) == (False, True, 0)
    # Every acknowledgement, on any interface, is on the replica: the produces admitted before
    # the stop were waited for, and none was admitted after it.
    ends = _ends(store_for(newyork), replica)
    late = sorted((p, o) for p, o in producers.acked if o >= ends[p])
    assert not late, f"acknowledged but not on the replica: {late[:10]}"
    assert _ends(store_for(source.cluster), source) == ends  # and nothing more on the source
    refused = sum(n for outcome, n in producers.outcomes.items() if outcome == "rest 409")
    assert refused > 0  # the producers did knock on the stopped source


def _answers(store, stream) -> bool:  # type: ignore[no-untyped-def]
    try:
        store.watermarks(stream.uuid, "clicks")
    except Exception:  # each pooled connection that died with the server fails once
        return False
    return True


def _ends(store, stream) -> dict[int, int]:  # type: ignore[no-untyped-def]
    return {p: high for p, (_low, high) in store.watermarks(stream.uuid, "clicks").items()}
