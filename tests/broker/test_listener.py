"""The listener with real clients: SASL/PLAIN with an API token, ApiVersions, Metadata."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from replication.models import Topic
from replication.names import kafka_legal_name
from replication.services.defaultstreams import default_stream_set
from replication.stores import store_for
from tests.factories import ClusterFactory, StreamFactory, TopicFactory

pytestmark = pytest.mark.slow


def list_topics(config: dict, topic: str | None = None):  # type: ignore[no-untyped-def]
    return AdminClient(config).list_topics(topic=topic, timeout=20)


def test_confluent_admin_lists_topics_by_mapr_name_after_sasl(kafka, owner):
    stream = StreamFactory(cluster=ClusterFactory(name="c1"), name="apps", created_by=owner,
                           tenant=owner.memberships.get().tenant)
    TopicFactory(stream=stream, name="orders", partitions=3)
    metadata = list_topics(kafka.confluent())
    assert "/mapr/c1/apps:orders" in metadata.topics
    assert len(metadata.topics["/mapr/c1/apps:orders"].partitions) == 3
    broker = next(iter(metadata.brokers.values()))
    assert f"{broker.host}:{broker.port}" == kafka.bootstrap


def test_wrong_token_fails_authentication_with_kafkas_error(kafka, owner):
    seen: list[KafkaError] = []
    config = kafka.confluent(**{"sasl.password": "not-a-token", "error_cb": seen.append})
    producer = Producer(config)
    with pytest.raises(KafkaException):
        producer.list_topics(timeout=5)
    producer.poll(1)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in seen)
    assert "API tokens" in str(seen[0])
    assert "sasl_authentication_failed" in kafka.listeners.log()


def test_outsider_does_not_see_another_tenants_topics(kafka, owner, outsider):
    stream = StreamFactory(cluster=ClusterFactory(name="c1"), name="apps", created_by=owner,
                           tenant=owner.memberships.get().tenant)
    TopicFactory(stream=stream, name="orders")
    metadata = list_topics(kafka.as_user(outsider).confluent())
    assert "/mapr/c1/apps:orders" not in metadata.topics
    named = list_topics(kafka.as_user(outsider).confluent(), "/mapr/c1/apps:orders")
    assert named.topics["/mapr/c1/apps:orders"].error is not None


def test_plain_name_resolves_in_the_tenants_default_stream_and_autocreates(kafka, owner,
                                                                          outsider):
    ClusterFactory(name="c1")
    default_stream_set(actor=owner, cluster="c1", path="/mapr/c1/kafka")
    producer = Producer(kafka.confluent())
    metadata = producer.list_topics("orders", timeout=20)  # librdkafka producers autocreate
    assert metadata.topics["orders"].error is None
    assert Topic.objects.filter(stream__path="/mapr/c1/kafka", name="orders").exists()
    assert "orders" in list_topics(kafka.confluent()).topics
    # globex has no default stream: its plain name cannot be placed (an invalid topic, which
    # clients do not wait for), and the listener says why once.
    theirs = list_topics(kafka.as_user(outsider).confluent(), "orders").topics["orders"]
    assert theirs.error.code() == KafkaError.TOPIC_EXCEPTION
    assert kafka.listeners.log().count("kafka_default_stream_missing") == 1


def test_kafka_python_reaches_a_topic_by_its_kafka_legal_spelling(kafka, owner):
    from kafka import KafkaAdminClient

    stream = StreamFactory(cluster=ClusterFactory(name="c1"), name="apps/eu", created_by=owner,
                           tenant=owner.memberships.get().tenant)
    TopicFactory(stream=stream, name="orders_v1", partitions=2)
    legal = kafka_legal_name(stream.path, "orders_v1")
    admin = KafkaAdminClient(**kafka.kafka_python())
    try:
        [described] = admin.describe_topics([legal])
        assert described["error_code"] == 0 and described["topic"] == legal
        assert len(described["partitions"]) == 2
        listed = admin.list_topics()  # listings use MapR names
        assert "/mapr/c1/apps/eu:orders_v1" in listed and legal not in listed
    finally:
        admin.close()


def test_streamgate_kafka_run_execs_a_listener(kafka_listeners, owner, tmp_path):
    from tests.broker.conftest import ROOT, free_port, sasl_token

    port, log = free_port(), tmp_path / "cli.log"
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-c", "import sys; from streamgate.cli import main; sys.exit(main())",
             "kafka", "run", "-listen", f"127.0.0.1:{port}"],
            cwd=ROOT, env=kafka_listeners.env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while "kafka listener ready" not in log.read_text():
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        config = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
                  "sasl.mechanism": "PLAIN", "sasl.username": "alice",
                  "sasl.password": sasl_token(owner)}
        assert list_topics(config).brokers
    finally:
        process.terminate()
        process.wait(timeout=15)


def test_streamgate_kafka_run_refuses_unknown_options_with_its_usage():
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from streamgate.cli import main; sys.exit(main())",
         "kafka", "run", "-port", "9"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "usage: streamgate kafka run [-advertise <advertise>]" in done.stderr


def test_sasl_handshake_v0_takes_the_bare_plain_token_of_old_clients(kafka):
    from tests.broker.wire import Wire

    wire = Wire(kafka.bootstrap)
    assert wire.call(17, 0, mechanism="PLAIN").mechanisms == ("PLAIN", "SCRAM-SHA-256",
                                                             "SCRAM-SHA-512")
    token = f"\0{kafka.username}\0{kafka.password}".encode()
    wire.send_raw(len(token).to_bytes(4, "big") + token)
    assert wire.read_frame() == b""  # success is an empty frame
    assert wire.call(3, 1, topics=None).brokers
    wire.close()
    refused = Wire(kafka.bootstrap)
    refused.call(17, 0, mechanism="PLAIN")
    bad = b"\0alice\0wrong"
    refused.send_raw(len(bad).to_bytes(4, "big") + bad)
    assert refused.closed()


def test_listener_defaultstream_serves_plain_names_on_a_single_tenant_site(kafka_listeners,
                                                                          owner, outsider):
    from tests.broker.conftest import KafkaEndpoint, sasl_token

    stream = StreamFactory(cluster=ClusterFactory(name="c1"), name="site", created_by=owner,
                           tenant=owner.memberships.get().tenant)
    TopicFactory(stream=stream, name="orders", partitions=2)
    bootstrap = kafka_listeners.start("site", "--defaultstream", "/mapr/c1/site")
    mine = KafkaEndpoint(bootstrap, "alice", sasl_token(owner), kafka_listeners)
    topics = list_topics(mine.confluent(), "orders").topics
    assert topics["orders"].error is None and len(topics["orders"].partitions) == 2
    theirs = list_topics(mine.as_user(outsider).confluent(), "orders").topics["orders"]
    assert theirs.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART  # not their tenant's stream


TRANSACTION_APIS = {24, 25, 26, 28}  # AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit


def test_a_transactional_producer_on_row_stores_fails_at_once_naming_convertstores(
        kafka, owner, settings):
    from tests.broker.wire import Wire

    settings.STORE_LAYOUT = "rows"
    stream = StreamFactory(cluster=ClusterFactory(name="krows"), name="apps", created_by=owner,
                           tenant=owner.memberships.get().tenant)
    TopicFactory(stream=stream, name="orders")
    assert not store_for(stream.cluster).KEEPS_BATCHES  # made here, before the listener opens it
    wire = Wire(kafka.bootstrap)
    keys = {k.api_key for k in wire.call(18, 3, client_software_name="t",
                                         client_software_version="1").api_keys}
    wire.close()
    assert {0, 1, 2, 3, 22} | TRANSACTION_APIS <= keys
    producer = Producer(kafka.confluent(**{"transactional.id": "billing-tx"}))
    started = time.monotonic()
    with pytest.raises(KafkaException) as failed:
        producer.init_transactions(30)
    assert time.monotonic() - started < 25  # Kafka's own error, not a timeout
    assert failed.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert "manage.py convertstores" in kafka.listeners.log()
