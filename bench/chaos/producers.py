"""The soak's producers: numbered messages (an `id` header each, never reused: a call that got
no answer may still have committed) round-robin over a stream's topics, each keeping what was
acknowledged, where, and in which failover epoch (bench/chaos/failover.py). Three ways in: the
services in this process, REST through a real portal process, and the Kafka protocol through a
listener from an idempotent librdkafka producer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bench.chaos.options import Options

BACKOFF, BACKOFF_MAX = 0.1, 1.0  # seconds after a refused call, doubling up to the max


@dataclass(frozen=True, slots=True)
class Ack:
    path: str  # the stream that acknowledged it
    topic: str
    partition: int
    offset: int
    id: bytes
    epoch: int  # failovers done when it was sent


@dataclass
class Target:
    """Where a producer writes now; the failover cycle moves it."""

    stream: Any
    epoch: int = 0


class Producer(threading.Thread):
    """Produces through the services in this process (messages_produce)."""

    way = "services"

    def __init__(self, label: str, target: Target, topics: tuple[str, ...], options: Options,
                 stop: threading.Event, *, actor: Any = None) -> None:
        super().__init__(name=f"producer-{label}", daemon=True)
        self.label, self.target, self.topics, self.actor = label, target, topics, actor
        self.options, self.halt = options, stop
        self.interval = options.interval  # between two calls
        self.sent = self.refused = self.refusals = 0  # refusals: in a row, for the backoff
        self.held = threading.Event()  # set: no new calls (a failback drains what they wrote)
        self.acks: list[Ack] = []
        self.errors: Counter[str] = Counter()
        # When each acknowledgement came (time.monotonic()), and when the producer began and
        # stopped sending: the availability table's stretches (bench/chaos/availability.py).
        self.acked_at: list[float] = []
        self.began = self.ended = 0.0

    @property
    def interface(self) -> str:
        return f"{self.way} ({self.label})" if self.way == "services" else self.way

    def run(self) -> None:
        from django.db import connections

        self.began = time.monotonic()
        try:
            while not self.halt.is_set():
                if not self.held.is_set():
                    self.produce_once()
                self.halt.wait(self.interval)
            self.ended = time.monotonic()
            self.finish()
        finally:
            self.ended = self.ended or time.monotonic()
            connections.close_all()

    def batch(self) -> tuple[str, list[tuple[bytes, bytes, bytes]]]:
        """The next topic and its (id, key, value) messages."""
        topic = self.topics[(self.sent // self.options.batch) % len(self.topics)]
        prefix = f"{self.label}/{topic}".encode()
        messages = [(b"%s-%d" % (prefix, n), b"k%d" % (n % 101), b"%s-%d:" % (prefix, n) +
                     b"v" * 120) for n in range(self.sent, self.sent + self.options.batch)]
        self.sent += len(messages)
        return topic, messages

    def produce_once(self) -> None:
        from replication.engine.store import Record
        from replication.services.messages import messages_produce

        topic, messages = self.batch()
        target = self.target
        records = [Record(value=value, key=key, headers=(("id", ident),))
                   for ident, key, value in messages]
        try:
            placed = messages_produce(actor=self.actor, stream=target.stream,
                                      topic=topic, records=records)
        except Exception as error:  # the store restarting, a fenced stream: not acknowledged
            self.refuse(len(records), error)
            return
        self.acked(target, topic, placed, [ident for ident, _, _ in messages])

    def refuse(self, count: int, error: BaseException | str) -> None:
        """Not acknowledged: wait before the next call, longer after each refusal in a row, as
        librdkafka backs off (retry.backoff.ms 100 up to retry.backoff.max.ms 1000): a client
        that called five times a second into an outage would count those calls as lost."""
        self.refused += count
        self.errors[error if isinstance(error, str) else type(error).__name__] += 1
        self.halt.wait(min(BACKOFF_MAX, BACKOFF * 2 ** self.refusals))
        self.refusals += 1

    def acked(self, target: Target, topic: str, placed: list[tuple[int, int]],
              ids: list[bytes]) -> None:
        self.acks += [Ack(target.stream.path, topic, p, o, i, target.epoch)
                      for (p, o), i in zip(placed, ids, strict=True)]
        self.acked_at.append(time.monotonic())
        self.refusals = 0

    def finish(self) -> None:
        """Wait for what is in flight (the Kafka producer's queue)."""


class RestProducer(Producer):
    """Produces over HTTP through a portal process (/api/v1, the API token); no retry of a
    call that got no answer: its ids are not reused, so a retry could not be told apart."""

    way = "REST (portal)"

    def __init__(self, *args: Any, url: str, token: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        from streamgate.client import Client

        self.client = Client(url, token, timeout=30.0)

    def produce_once(self) -> None:
        topic, messages = self.batch()
        target = self.target
        try:
            rows = self.client.produce(target.stream.path, topic, [
                {"value": value, "key": key, "headers": {"id": ident}}
                for ident, key, value in messages])
        except Exception as error:  # the portal killed mid-call, or a refusal
            self.refuse(len(messages), error)
            return
        self.acked(target, topic, [(r["partition"], r["offset"]) for r in rows],
                   [ident for ident, _, _ in messages])


class CliProducer(Producer):
    """Produces with the command line, `streamgate produce -format json` in a process of its
    own per call (reading JSON lines, printing each placed offset), through the portal; no
    retry, like the REST producer. Lines printed before a failure are acknowledged."""

    way = "CLI (portal)"
    timeout = 60.0  # a call past it is killed (and reaped): not acknowledged

    def __init__(self, *args: Any, url: str, token: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.env = {**os.environ, "STREAMGATE_URL": url, "STREAMGATE_TOKEN": token}
        self.interval = self.options.cli_interval  # a Python process starts for each call

    def produce_once(self) -> None:
        topic, messages = self.batch()
        target = self.target
        lines = "".join(json.dumps({"value": value.decode(), "key": key.decode(),
                                    "headers": {"id": ident.decode()}}) + "\n"
                        for ident, key, value in messages)
        try:
            done = subprocess.run(
                [sys.executable, "-c", "import sys; from streamgate.cli import main; "
                 "sys.exit(main())", "produce", "-path", target.stream.path, "-topic", topic,
                 "-format", "json"], input=lines, capture_output=True, text=True,
                env=self.env, timeout=self.timeout)
        except subprocess.TimeoutExpired as error:
            self.refuse(len(messages), error)
            return
        rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        if rows:
            self.acked(target, topic, [(r["partition"], r["offset"]) for r in rows],
                       [ident for ident, _, _ in messages][:len(rows)])
        if done.returncode or len(rows) < len(messages):
            self.refuse(len(messages) - len(rows), f"CLI exit {done.returncode}")


class KafkaProducer(Producer):
    """Produces with librdkafka (confluent-kafka), enable.idempotence=true, through a
    `manage.py runkafka` listener: a batch retried after the listener died is written once."""

    way = "Kafka (idempotent)"

    def __init__(self, *args: Any, config: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        from confluent_kafka import Producer as Librdkafka

        self.client = Librdkafka({**config, "enable.idempotence": True, "acks": "all",
                                  "linger.ms": 5,
                                  "message.timeout.ms": int(self.options.kafka_timeout * 1000),
                                  "retry.backoff.ms": 100, "reconnect.backoff.max.ms": 500,
                                  "log_level": 2})  # not each refused connection on stderr
        self.lock = threading.Lock()

    def produce_once(self) -> None:
        topic, messages = self.batch()
        target = self.target
        name = f"{target.stream.path}:{topic}"

        def report(ident: bytes, error: Any, message: Any) -> None:
            # A delivery report carries no headers: the id comes with the callback.
            try:
                if error is not None:
                    self.refused += 1
                    self.errors[f"Kafka {error.name()}"] += 1
                    return
                self.acked(target, topic, [(message.partition(), message.offset())], [ident])
            except Exception as failure:  # an exception must not cross librdkafka's C code
                self.errors[f"delivery report {failure!r}"] += 1

        for ident, key, value in messages:
            try:
                self.client.produce(name, value, key, headers=[("id", ident)],
                                    on_delivery=partial(report, ident))
            except BufferError as error:  # the local queue is full: wait for deliveries
                self.client.poll(1.0)
                self.refuse(1, error)
        self.client.poll(0)

    def finish(self) -> None:
        # message.timeout.ms bounds it: each message ends delivered or failed (refused).
        left = self.client.flush(90)
        self.refused += left
