"""The processes producers write through besides the services: a portal (uvicorn, REST with
the API token, and the command line through it) and a Kafka listener (`manage.py runkafka`,
SASL with the same token), each on a port of its own, started again on that port after the
driver kills them."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from bench.chaos.faults import Entrance
from bench.chaos.producers import (
    CliProducer,
    KafkaProducer,
    Producer,
    RestProducer,
    Target,
)
from bench.chaos.topology import TOPICS, Topology
from bench.ports import free_port, wait_listening

if TYPE_CHECKING:
    from bench.chaos.options import Options

WRITTEN = "newyork"  # the stream they write to: its topics keep their origin through a failover


class Serving(Protocol):
    """The engine's processes producers write through (bench/chaos/command.py's Processes)."""

    def portal(self, port: int) -> subprocess.Popen: ...

    def kafka_listener(self, port: int) -> subprocess.Popen: ...


def open_entrances(engine: Serving, topology: Topology, options: Options,
                   stop: threading.Event) -> tuple[list[Producer], dict[str, Entrance]]:
    """Start a portal and a Kafka listener (as asked), and a producer through each."""
    from knox.models import AuthToken

    token = AuthToken.objects.create(topology.actor)[1]
    target, topics = Target(topology.streams[WRITTEN]), TOPICS[WRITTEN]
    producers: list[Producer] = []
    entrances: dict[str, Entrance] = {}
    # Each restart on its own port, bound now: a closure over one `port` variable restarted a
    # killed portal on the Kafka listener's port (address in use, or the listener's port taken).
    if options.portal:
        port = free_port()
        wait_listening(port, engine.portal(port))
        entrances["portal kill -9"] = Entrance("portal", partial(_serve, engine.portal, port))
        producers.append(RestProducer("rest", target, topics, options, stop,
                                      url=f"http://127.0.0.1:{port}", token=token))
        if options.cli:
            producers.append(CliProducer("cli", target, topics, options, stop,
                                         url=f"http://127.0.0.1:{port}", token=token))
    if options.kafka:
        kafka_port = free_port()
        wait_listening(kafka_port, engine.kafka_listener(kafka_port))
        entrances["Kafka listener kill -9"] = Entrance(
            "kafka", partial(_serve, engine.kafka_listener, kafka_port))
        producers.append(KafkaProducer("kafka", target, topics, options, stop,
                                       config=sasl(kafka_port, topology.actor, token)))
    return producers, entrances


def _serve(start: Callable[[int], subprocess.Popen], port: int) -> None:
    """Start the process again and return once it accepts connections: the fault's window
    lasts until then (a process still starting up serves nobody)."""
    wait_listening(port, start(port))


def sasl(port: int, user: Any, token: str) -> dict[str, Any]:
    return {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": user.get_username(),
            "sasl.password": token}
