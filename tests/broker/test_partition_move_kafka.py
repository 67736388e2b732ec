"""A partition moves between store groups (issue 33) under a librdkafka idempotent producer
writing to it through the listener and a consumer group reading it: every acknowledged
message is stored once, in the order sent, offsets continuing across the cut-over (the
listener's stale placement costs a retriable error at most), the group's consumer reads each
once, in order, without an error, and the partition's history is read from the new group."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Consumer, Producer

from replication.models import Placement
from replication.services import partitionmove
from replication.services.partitionmove import partition_move
from tests.broker.test_produce_fetch import NAME, consume
from tests.broker.test_storegroups_kafka import grouped  # noqa: F401 (a fixture)
from tests.replication.services.test_storegroups import held

pytestmark = pytest.mark.slow


class Sender(threading.Thread):
    """An idempotent producer sending m0, m1, ... to partition 0 until stopped."""

    def __init__(self, config: dict) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({**config, "enable.idempotence": True, "acks": "all",
                                  "linger.ms": 2})
        self.acked: list[tuple[int, bytes]] = []
        self.errors: list[str] = []
        self.sent = 0
        self.stop = threading.Event()

    def _report(self, err, msg) -> None:  # type: ignore[no-untyped-def]
        if err is not None:
            self.errors.append(str(err))
        else:
            self.acked.append((msg.offset(), msg.value()))

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.producer.produce(NAME, b"m%d" % self.sent, partition=0,
                                      on_delivery=self._report)
                self.sent += 1
            except BufferError:
                self.producer.poll(0.05)
            self.producer.poll(0)
            time.sleep(0.0005)
        assert self.producer.flush(60) == 0


class Reader(threading.Thread):
    """A consumer of group `movers` subscribed to the topic, reading until stopped."""

    def __init__(self, config: dict) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer({**config, "group.id": "movers",
                                  "auto.offset.reset": "earliest"})
        self.read: list[tuple[int, bytes]] = []
        self.errors: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        self.consumer.subscribe([NAME])
        try:
            while not self.stop.is_set():
                msg = self.consumer.poll(0.2)
                if msg is None:
                    continue
                if msg.error() is not None:
                    self.errors.append(str(msg.error()))
                elif msg.partition() == 0:
                    self.read.append((msg.offset(), msg.value()))
        finally:
            self.consumer.close()


def test_a_partition_moves_under_an_idempotent_kafka_producer(grouped, kafka, operator,  # noqa: F811
                                                              monkeypatch):
    monkeypatch.setattr(partitionmove, "CLEANUP_GRACE", 2.5)
    stream, groups = grouped
    source = Placement.objects.get(stream=stream, topic="orders", partition=0).group.name
    target = next(n for n in groups if n != source)
    sender, reader = Sender(kafka.confluent()), Reader(kafka.confluent())
    reader.start()
    sender.start()
    try:
        while len(sender.acked) < 2000:
            time.sleep(0.02)
        row = partition_move(actor=operator, stream=stream, topic="orders", partition=0,
                             to=target)
        moved_at = len(sender.acked)
        while len(sender.acked) < moved_at + 2000:
            time.sleep(0.02)
    finally:
        sender.stop.set()
        sender.join(90)
    assert not sender.is_alive()
    assert sender.errors == []
    deadline = time.monotonic() + 60
    while len(reader.read) < sender.sent and time.monotonic() < deadline:
        time.sleep(0.05)
    reader.stop.set()
    reader.join(30)
    assert reader.errors == []
    assert reader.read == sorted(sender.acked)  # each once, in order, across the move
    assert row["from"] == source and row["to"] == target and row["messagesCopied"] >= 2000
    acked = sorted(sender.acked)
    assert len(acked) == sender.sent
    assert [o for o, _ in acked] == list(range(sender.sent))
    assert [v for _, v in acked] == [b"m%d" % i for i in range(sender.sent)]
    got = consume(kafka.confluent(), sender.sent, partitions=[0])
    assert [(m.offset(), m.value()) for m in got] == acked
    assert held(groups[target], stream)[("orders", 0)] == sender.sent
    assert ("orders", 0) not in held(groups[source], stream)
