"""A quixstreams application (issue 31's proof): a running count per key of topic `words`,
kept in a RocksDB store whose changelog topic quixstreams creates compacted, written to
`counts` with processing_guarantee="exactly-once". Run by tests/broker/test_stream_apps.py in
the apps' own environment (pyproject's `apps` extra): argv is the state directory; the
listener and credentials come from the environment."""

from __future__ import annotations

import os
import sys

from quixstreams import Application
from quixstreams.kafka.configuration import ConnectionConfig


def count(value: dict, state) -> dict:  # type: ignore[no-untyped-def]
    total = state.get("count", 0) + 1
    state.set("count", total)
    return {"n": value["n"], "count": total}


def main(state_dir: str) -> None:
    app = Application(
        broker_address=ConnectionConfig(
            bootstrap_servers=os.environ["KAFKA_BOOTSTRAP"], security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="PLAIN", sasl_username=os.environ["KAFKA_USERNAME"],
            sasl_password=os.environ["KAFKA_PASSWORD"]),
        consumer_group="counter", processing_guarantee="exactly-once",
        auto_offset_reset="earliest", state_dir=state_dir, commit_interval=0.5,
        loglevel=os.environ.get("QUIX_LOGLEVEL", "INFO"),
        topic_create_timeout=30,
        # A killed member leaves the group when its session times out (as on Kafka): short,
        # so a restart rejoins in seconds.
        consumer_extra_config={"session.timeout.ms": 6000, "heartbeat.interval.ms": 500},
        # Each run has a transactional id of its own (quixstreams makes one per run), so a
        # killed run's open transaction ends when it times out, as on Kafka: read_committed
        # readers of its topics wait that long.
        producer_extra_config={"transaction.timeout.ms": 10000})
    words = app.topic("words", key_deserializer="str", value_deserializer="json")
    counts = app.topic("counts", key_serializer="str", value_serializer="json")
    app.dataframe(words).apply(count, stateful=True).to_topic(counts)
    app.run()


if __name__ == "__main__":
    main(sys.argv[1])
