"""The demo scene `make run` offers on a fresh database: the seed documents' two clusters, two
gateways on newyork, and /mapr/sanfrancisco/activity replicated to /mapr/newyork/activity by
the manual primary-secondary steps, so a newcomer sees messages arrive and lag move."""

from __future__ import annotations

import json
import random
import threading
import time

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from replication.engine.store import Record
from replication.models import Cluster, Stream
from replication.services import (
    cluster_create,
    cluster_gateway_set,
    replica_connect,
    stream_create,
    topic_create,
)
from replication.services.defaultstreams import default_stream_set
from replication.services.messages import messages_produce

SOURCE, REPLICA, TOPIC = "/mapr/sanfrancisco/activity", "/mapr/newyork/activity", "clicks"
KAFKA_STREAM = "/mapr/sanfrancisco/kafka"
PAGES = ("/", "/pricing", "/docs", "/signup", "/blog", "/status")


@transaction.atomic
def demo_scene_create(*, actor: AbstractBaseUser) -> bool:
    """Build the scene; False (and nothing done) when the database is not fresh."""
    if Cluster.objects.exists():
        return False
    for name in ("sanfrancisco", "newyork"):
        cluster_create(actor=actor, name=name)
    cluster_gateway_set(actor=actor, dstcluster="newyork", gateways="gw1 gw2")
    source = stream_create(actor=actor, path=SOURCE)
    topic_create(actor=actor, stream=source, name=TOPIC, partitions=4)
    replica = stream_create(actor=actor, path=REPLICA, copymetafrom=SOURCE)
    replica_connect(actor=actor, source=source, replica=replica)
    # Plain Kafka names (`kcat -t orders`) land in the operator tenant's default stream.
    default_stream_set(actor=actor, cluster="sanfrancisco", path=KAFKA_STREAM)
    return True


def _clicks(count: int) -> list[Record]:
    users = [f"user-{random.randint(1, 40)}" for _ in range(count)]
    return [
        Record(value=json.dumps({"user": u, "page": random.choice(PAGES)}).encode(),
               key=u.encode())
        for u in users
    ]


def start_trickle(*, actor: AbstractBaseUser, per_second: float = 5.0) -> threading.Thread:
    """A producer of page clicks into the demo stream, a few a second, until the process ends."""

    def loop() -> None:
        while True:
            time.sleep(random.expovariate(per_second / 3))
            stream = Stream.objects.select_related("cluster").filter(path=SOURCE).first()
            if stream is not None and stream.allows(actor, "produceperm"):
                messages_produce(actor=actor, stream=stream, topic=TOPIC,
                                 records=_clicks(random.randint(1, 5)), producer="demo")

    thread = threading.Thread(target=loop, name="demo-trickle", daemon=True)
    thread.start()
    return thread
