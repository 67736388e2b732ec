"""A faust-streaming application (issue 31's proof): a Table counting per key of topic
`fwords`, kept in memory only, so a restarted worker rebuilds it from the compacted changelog
topic faust creates. Each update is printed as a JSON line for the test to read. Run by
tests/broker/test_stream_apps.py in the apps' own environment; the listener and credentials
come from the environment."""

from __future__ import annotations

import json
import os

import faust

app = faust.App(
    "tally", broker=f"kafka://{os.environ['KAFKA_BOOTSTRAP']}",
    broker_credentials=faust.SASLCredentials(
        username=os.environ["KAFKA_USERNAME"], password=os.environ["KAFKA_PASSWORD"],
        mechanism="PLAIN"),
    store="memory://", topic_partitions=1, topic_replication_factor=1, web_enabled=False,
    table_standby_replicas=0, broker_session_timeout=6, broker_heartbeat_interval=1,
    broker_commit_interval=0.5)
words = app.topic("fwords", key_serializer="raw", value_serializer="raw")
counts = app.Table("counts", default=int, partitions=1)


@app.agent(words)
async def tally(stream):  # type: ignore[no-untyped-def]
    async for key, _value in stream.items():
        word = key.decode()
        counts[word] += 1
        print(json.dumps({"key": word, "count": counts[word]}), flush=True)


if __name__ == "__main__":
    app.main()
