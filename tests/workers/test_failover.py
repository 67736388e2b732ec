"""Failover end to end with real processes: the source cluster's store is a PostgreSQL server of
the test's own, killed mid-life; the replicator and a gateway run as subprocesses; the failover,
the second period's produce and the consumer group go through the `streamgate` CLI against a
live portal. The checker then runs on the final topology."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from knox.models import AuthToken

from replication.engine.checker import check_replica
from replication.engine.store import Key, Record
from replication.lag_history import lag_record
from replication.models import Failover, ReplicaLink, Stream, Topic
from replication.services import replica_add, topic_create, upstream_add
from replication.services.cursors import cursor_commit
from replication.services.messages import messages_produce
from replication.stores import store_for
from replication.transport import transport
from tests.factories import ClusterFactory, GatewayFactory, StreamFactory, spread
from tests.workers.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)
STREAMGATE = Path(sys.executable).with_name("streamgate")


class Producer:
    """Numbered messages with an `id` header; remembers each acknowledged offset's id."""

    def __init__(self, owner, stream: Stream, prefix: str) -> None:
        self.owner, self.stream, self.prefix = owner, stream, prefix
        self.sent = 0
        self.ids: dict[Key, str] = {}

    def __call__(self, count: int) -> None:
        ids = [f"{self.prefix}-{i}" for i in range(self.sent, self.sent + count)]
        records = [Record(value=i.encode(), headers=(("id", i.encode()),))
                   for i in ids]
        placed = messages_produce(actor=self.owner, stream=self.stream, topic="clicks",
                                  records=spread(self.stream, "clicks", records, self.sent))
        for (partition, offset), ident in zip(placed, ids, strict=True):
            self.ids[(partition, offset)] = ident
        self.sent += count


def acked(ids: dict, keep=lambda partition, offset: True) -> dict[Key, set[int]]:  # type: ignore[no-untyped-def]
    found: dict[Key, set[int]] = {}
    for partition, offset in ids:
        if keep(partition, offset):
            found.setdefault(("clicks", partition), set()).add(offset)
    return found


def highs(stream: Stream) -> dict[int, int]:
    marks = store_for(stream.cluster).watermarks(stream.uuid, "clicks")
    return {partition: high for partition, (_low, high) in marks.items()}


def cli(url: str, token: str, command: str, stdin: str = "") -> subprocess.CompletedProcess:
    env = {**os.environ, "STREAMGATE_URL": url, "STREAMGATE_TOKEN": token}
    done = subprocess.run([str(STREAMGATE), *shlex.split(command)], env=env, input=stdin,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, (command, done.stdout, done.stderr)
    return done


def replicated(origin: Stream, replica: Stream, **kwargs) -> bool:  # type: ignore[no-untyped-def]
    try:
        return check_replica(store_for(origin.cluster), origin.uuid, store_for(replica.cluster),
                             replica.uuid, ["clicks"], **kwargs).ok
    except Exception:  # a store restarted under this process: its pool reconnects once
        return False


def test_forced_failover_after_the_source_store_dies_loses_nothing_replicated(
        engine, owner, newyork, private_postgres, live_server, private_cache):
    forced_failover_after_losing_the_source(engine, owner, newyork, private_postgres,
                                            live_server)


def forced_failover_after_losing_the_source(engine, owner, newyork, private_postgres,  # type: ignore[no-untyped-def]
                                            live_server) -> tuple:
    """The whole failover scenario; returns what the failback test goes on with."""
    lost = ClusterFactory(name="lost", store_url=private_postgres.url("lost_store"))
    store_for(lost), store_for(newyork)
    source = StreamFactory(cluster=lost, name="activity", created_by=owner)
    replica = StreamFactory(cluster=newyork, name="activity", created_by=owner)
    topic_create(actor=owner, stream=source, name="clicks", partitions=3)
    replica_add(actor=owner, source=source, replica=replica)
    upstream_add(actor=owner, replica=replica, source=source)
    GatewayFactory(cluster=newyork, name="gw1")
    engine.gateway("newyork", "gw1")
    wait_until(lambda: transport().gateways.live([("newyork", "gw1")]), timeout=30)
    engine.replicator()

    # Period 1 on the source: a consumer group reads half and commits; all of it replicates.
    first = Producer(owner, source, "first")
    first(600)
    halves = {partition: high // 2 for partition, high in highs(source).items()}
    for partition, half in halves.items():
        cursor_commit(actor=owner, stream=source, group="g", topic="clicks",
                      partition=partition, offset=half)
    wait_until(lambda: replicated(source, replica), timeout=60, every=0.2)
    replica_store = store_for(newyork)
    wait_until(lambda: {p: replica_store.fetch_cursor(replica.uuid, "g", "clicks", p)
                        for p in halves} == halves, timeout=30, every=0.2)
    # Then replication stops (the gateway dies) and 90 more are acknowledged on the source.
    engine.stop("gw-newyork-gw1", kill=True)
    first(90)
    lag_record()  # the beat's lag sample: what the failover reports as possibly missing
    ends = highs(replica)
    assert sum(ends.values()) == 600
    private_postgres.stop("immediate")  # the source's cluster is lost

    token = AuthToken.objects.create(owner)[1]
    done = cli(live_server.url, token,
               f"stream replica failover -path {replica.path} -force true -json")
    [row] = json.loads(done.stdout)["data"]
    assert (row["forced"], row["sourceReachable"], row["messagesMissing"]) == (True, False, 90)
    assert {p["partition"]: p["replicaEnd"] for p in row["partitions"]} == ends
    assert Topic.objects.get(stream=replica).origin_uuid == replica.uuid

    # Period 2 on the replica, through the CLI: offsets go on from the replica's ends.
    lines = "\n".join(json.dumps({"value": f"second-{i}", "headers": {"id": f"second-{i}"},
                                  "partition": i % 3}) for i in range(300))
    done = cli(live_server.url, token, f"produce -path {replica.path} -topic clicks "
               "-format json", stdin=lines)
    placed = [json.loads(line) for line in done.stdout.splitlines()]
    second = {(p["partition"], p["offset"]): f"second-{i}" for i, p in enumerate(placed)}
    assert {p: min(o for q, o in second if q == p) for p, _ in second} == ends

    # The consumer group continues on the replica from its replicated cursor: each message of
    # both periods it had not read, once, in offset order.
    seen: list[str] = []
    for partition in sorted(halves):
        out = cli(live_server.url, token, f"consume -path {replica.path} -topic clicks "
                  f"-partition {partition} -group g")
        messages = [json.loads(line) for line in out.stdout.splitlines()]
        assert [m["offset"] for m in messages] == list(range(halves[partition],
                                                             highs(replica)[partition]))
        seen += [m["headers"]["id"] for m in messages]
    unread = {ident for (p, o), ident in first.ids.items() if halves[p] <= o < ends[p]}
    assert len(seen) == len(set(seen)) and set(seen) == unread | set(second.values())

    # The final topology: the promoted stream replicates on to a new replica, and the checker
    # finds no loss, duplicate or reordering of what was acknowledged and replicated.
    downstream = StreamFactory(cluster=newyork, name="activity_copy", created_by=owner)
    replica_add(actor=owner, source=replica, replica=downstream)
    upstream_add(actor=owner, replica=downstream, source=replica)
    engine.gateway("newyork", "gw1")
    kept = acked(first.ids, lambda p, o: o < ends[p])
    for (partition, offset) in second:
        kept.setdefault(("clicks", partition), set()).add(offset)
    wait_until(lambda: replicated(replica, downstream), timeout=60, every=0.3)
    report = check_replica(store_for(newyork), replica.uuid, store_for(newyork),
                           downstream.uuid, ["clicks"], acknowledged=kept)
    assert report.ok, report.summary()

    # Nothing acknowledged was discarded: the unreplicated tail waits on the source (failback).
    private_postgres.start()
    # Every pooled connection of this process died with the server: each fails once.
    wait_until(lambda: all(_ends_or_none(source) is not None for _ in range(10)), timeout=30,
               every=0.3)
    assert {p: high - ends[p] for p, high in _ends_or_none(source).items()} == {0: 30, 1: 30,
                                                                               2: 30}
    assert Failover.objects.get().missing_messages == 90
    return source, replica, downstream, first, second, ends, kept


def test_failback_after_the_source_returns_keeps_every_message_of_both_periods_once(
        engine, owner, newyork, private_postgres, live_server, private_cache):
    source, replica, downstream, first, second, ends, kept = \
        forced_failover_after_losing_the_source(engine, owner, newyork, private_postgres,
                                                live_server)
    token = AuthToken.objects.create(owner)[1]
    cursors = {p: store_for(newyork).fetch_cursor(replica.uuid, "g", "clicks", p)
               for p in ends}
    dry = json.loads(cli(live_server.url, token, f"stream replica failback -path {source.path} "
                         f"-replica {replica.path} -dryrun true -json").stdout)["data"]
    assert [(r["partition"], r["commonPrefix"], r["keepAside"], r["copy"]) for r in dry[:3]] \
        == [(p, ends[p], 30, 100) for p in range(3)]
    done = json.loads(cli(live_server.url, token, f"stream replica failback -path "
                          f"{source.path} -replica {replica.path} -json").stdout)["data"]
    assert done[-1]["keptAside"] == 90

    # Every acknowledged message of both periods: once, in the primary or kept aside.
    primary, diverged = _ids(source, "clicks"), _ids(source, "clicks.diverged")
    both = primary + diverged
    assert len(both) == len(set(both)) == 990
    assert set(both) == set(first.ids.values()) | set(second.values())
    assert set(diverged) == {i for (p, o), i in first.ids.items() if o >= ends[p]}
    # The original direction is back; the checker finds nothing wrong on either link.
    assert Topic.objects.get(stream=source, name="clicks").origin_uuid == source.uuid
    wait_until(lambda: replicated(source, replica) and replicated(replica, downstream),
               timeout=60, every=0.3)
    for origin, copy in ((source, replica), (replica, downstream)):
        report = check_replica(store_for(origin.cluster), origin.uuid, store_for(copy.cluster),
                               copy.uuid, ["clicks"], acknowledged=kept)
        assert report.ok, report.summary()
    # The consumer group's cursors followed to the primary.
    assert {p: store_for(source.cluster).fetch_cursor(source.uuid, "g", "clicks", p)
            for p in ends} == cursors


def _ids(stream: Stream, topic: str) -> list[str]:
    store, found = store_for(stream.cluster), []
    for partition, (low, high) in store.watermarks(stream.uuid, topic).items():
        offset = low
        while offset < high:
            batch = store.read(stream.uuid, topic, partition, offset)
            found += [dict(m.headers)["id"].decode() for m in batch]
            offset = batch[-1].offset + 1
    return found


def _ends_or_none(stream: Stream) -> dict[int, int] | None:
    try:
        return highs(stream)
    except Exception:  # the pool's connections died with the server; it reconnects
        return None


def test_multi_master_pair_fails_over_and_back_keeping_every_message_once(
        engine, owner, newyork, private_postgres, live_server, private_cache):
    lost = ClusterFactory(name="lost", store_url=private_postgres.url("lost_store"))
    store_for(lost), store_for(newyork)
    a = StreamFactory(cluster=lost, name="a", created_by=owner)
    b = StreamFactory(cluster=newyork, name="b", created_by=owner)
    topic_create(actor=owner, stream=a, name="clicks", partitions=2)
    topic_create(actor=owner, stream=b, name="views", partitions=2)
    for source, replica in ((a, b), (b, a)):
        replica_add(actor=owner, source=source, replica=replica)
        upstream_add(actor=owner, replica=replica, source=source)
    for cluster in ("newyork", "lost"):
        GatewayFactory(cluster=ClusterFactory._meta.model.objects.get(name=cluster), name="gw1")
        engine.gateway(cluster, "gw1")
    wait_until(lambda: len(transport().gateways.live([("newyork", "gw1"), ("lost", "gw1")])) == 2,
               timeout=30)
    engine.replicator()
    clicks, views = Producer(owner, a, "clicks"), Producer(owner, b, "views")
    clicks(300)
    _produce_topic(views, 150)
    wait_until(lambda: replicated(a, b) and _replicated_topic(b, a, "views"), timeout=60,
               every=0.3)
    engine.stop("gw-newyork-gw1", kill=True)  # a -> b stops: the next 60 stay on a
    clicks(60)
    lag_record()
    ends = highs(b)
    private_postgres.stop("immediate")

    token = AuthToken.objects.create(owner)[1]
    [row] = json.loads(cli(live_server.url, token, f"stream replica failover -path {b.path} "
                           f"-source {a.path} -force true -json").stdout)["data"]
    assert row["messagesMissing"] == 60 and len(row["endedLinks"]) == 2
    second = Producer(owner, Stream.objects.get(pk=b.pk), "second")
    second(90)
    _produce_topic(views, 30)

    private_postgres.start()
    wait_until(lambda: all(_ends_or_none(a) is not None for _ in range(10)), timeout=30,
               every=0.3)
    engine.gateway("newyork", "gw1")
    done = json.loads(cli(live_server.url, token, f"stream replica failback -path {a.path} "
                          f"-replica {b.path} -json").stdout)["data"]
    assert done[-1]["keptAside"] == 60
    # Both directions are back, each topic with its own origin again.
    assert {(link.source.name, link.replica.name) for link in
            ReplicaLink.objects.select_related("source", "replica")} == {("a", "b"), ("b", "a")}
    assert Topic.objects.get(stream=b, name="clicks").origin_uuid == a.uuid
    assert Topic.objects.get(stream=a, name="views").origin_uuid == b.uuid
    both = _ids(a, "clicks") + _ids(a, "clicks.diverged")
    assert len(both) == len(set(both)) == 450
    assert set(both) == set(clicks.ids.values()) | set(second.ids.values())
    wait_until(lambda: replicated(a, b) and _replicated_topic(b, a, "views"), timeout=60,
               every=0.3)
    assert len(_ids(a, "views")) == len(set(_ids(a, "views"))) == 180
    assert sum(ends.values()) == 300


def _produce_topic(producer: Producer, count: int) -> None:
    ids = [f"{producer.prefix}-{i}" for i in range(producer.sent, producer.sent + count)]
    placed = messages_produce(actor=producer.owner, stream=producer.stream, topic="views",
                              records=[Record(value=i.encode(), headers=(("id", i.encode()),))
                                       for i in ids])
    producer.ids.update(dict(zip(placed, ids, strict=True)))
    producer.sent += count


def _replicated_topic(origin: Stream, replica: Stream, topic: str) -> bool:
    try:
        return check_replica(store_for(origin.cluster), origin.uuid, store_for(replica.cluster),
                             replica.uuid, [topic]).ok
    except Exception:  # the restarted store's pool reconnects once
        return False
