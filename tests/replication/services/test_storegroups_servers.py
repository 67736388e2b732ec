"""A cluster over three store groups, each on a PostgreSQL server of its own on loopback (issue
33's proof on private servers): a group's partitions live on its server alone, and a server
down stops only the partitions it holds. Produce to the others goes on; its own are refused as
an outage that stores nothing (REST: 503, retry); /readyz names the group; once it is back,
every acknowledged message is there once, in order."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from bench.pgserver import PG_BIN, PrivatePostgres
from replication import placement
from replication.engine.store import Record
from replication.models import Placement
from replication.services import topic_create
from replication.services.messages import messages_consume, messages_produce
from replication.services.storegroups import store_group_add
from replication.stores import close_stores
from tests.factories import ClusterFactory, StreamFactory
from tests.portal.test_unavailable import assert_api_503, messages_url
from tests.replication.services.test_storegroups import held

PARTITIONS = 6


@pytest.fixture
def spread(operator, owner) -> Iterator[tuple[dict[str, PrivatePostgres], Any]]:
    """/mapr/spread/activity (clicks, 6 partitions) on groups s1, s2 and s3, each on a
    server of its own; the servers by group name."""
    if not (PG_BIN / "initdb").exists():
        pytest.skip("needs PostgreSQL 15's initdb and pg_ctl")
    placement.forget()
    with PrivatePostgres(durable=False) as s1, PrivatePostgres(durable=False) as s2, \
            PrivatePostgres(durable=False) as s3:
        servers = {"s1": s1, "s2": s2, "s3": s3}
        cluster = ClusterFactory(name="spread", store_url=s1.url("store"))
        for name in ("s2", "s3"):
            store_group_add(actor=operator, cluster=cluster.name, name=name,
                            url=servers[name].url("store"))
        stream = StreamFactory(cluster=cluster, name="activity", created_by=owner)
        topic_create(actor=owner, stream=stream, name="clicks", partitions=PARTITIONS)
        try:
            yield servers, stream
        finally:
            close_stores()  # their pools would try to reconnect to the removed servers
            placement.forget()


def groups(stream: Any) -> dict[int, str]:
    return dict(Placement.objects.filter(stream=stream, topic="clicks")
                .values_list("partition", "group__name"))


def produce(owner: Any, stream: Any, partition: int, value: bytes) -> None:
    messages_produce(actor=owner, stream=stream, topic="clicks",
                     records=[Record(value, partition=partition)])


def values(owner: Any, stream: Any, partition: int) -> list[bytes]:
    return [m.value for m in messages_consume(actor=owner, stream=stream, topic="clicks",
                                              partition=partition)]


def test_each_groups_partitions_live_on_its_own_server(owner, spread):
    servers, stream = spread
    for partition in range(PARTITIONS):
        produce(owner, stream, partition, b"p%d" % partition)
    where = groups(stream)  # placed when first written
    assert sorted(where.values()) == ["s1", "s1", "s2", "s2", "s3", "s3"]  # spread evenly
    for name, server in servers.items():
        # read on each server itself: its partitions, one message each, and no stray writes
        assert held(server.url("store"), stream) == {
            ("clicks", p): 1 for p, group in where.items() if group == name}


def test_a_server_down_stops_only_the_partitions_it_holds(owner, api, client, spread):
    servers, stream = spread
    for partition in range(PARTITIONS):
        produce(owner, stream, partition, b"before")
    where = groups(stream)
    servers["s3"].stop()
    down = [p for p, group in where.items() if group == "s3"]
    for partition in range(PARTITIONS):
        if partition in down:
            with pytest.raises(psycopg.OperationalError):
                produce(owner, stream, partition, b"lost")
        else:
            produce(owner, stream, partition, b"during")
    response = api(owner).post(messages_url(stream), {"records": [
        {"value": "lost", "partition": down[0]}]}, format="json")
    assert_api_503(response, "message store did not answer")
    ready = client.get("/readyz").json()["checks"]["stores"]
    assert not ready["ok"] and "spread group s3" in ready["detail"]
    assert "group s1" not in ready["detail"] and "group s2" not in ready["detail"]

    servers["s3"].start()
    for partition in down:  # as a client told to retry does: broken pooled connections first
        for attempt in range(20):
            try:
                produce(owner, stream, partition, b"after")
                break
            except psycopg.OperationalError:
                assert attempt < 19
    for partition in range(PARTITIONS):
        assert values(owner, stream, partition) == (
            [b"before", b"after"] if partition in down else [b"before", b"during"])
    assert client.get("/readyz").json()["checks"]["stores"]["ok"]
