"""/rest commands a MapR user runs on day one: stream purge, cluster gateway local,
stream replica list -refreshnow, and autosetup -useexistingreplica. Each refusal names the
problem and changes nothing, in the control database and in the message stores."""

from __future__ import annotations

import time

import pytest
from django.core.cache import cache

from operations.models import AuditEvent
from replication import services
from replication.engine.store import Record
from replication.lag_history import lag_latest, rings
from replication.models import Job, ReplicaLink, ReplicaState, Stream, Topic, Upstream
from replication.services.messages import messages_produce
from replication.services.purge import watermarks
from replication.stores import store_for
from tests.factories import GatewayFactory, StreamFactory
from tests.portal import test_rest
from tests.portal.test_rest import call, error_of, ok, snapshot

world = test_rest.world  # the fixture: alice's activity replicating (paused) to newyork

NOW = int(time.time() * 1000)
HOUR = 3600 * 1000


def produce(owner, stream: Stream, topic: str, values: list[str], *, partition: int = 0,
            timestamp: int | None = None) -> None:
    messages_produce(actor=owner, stream=stream, topic=topic, records=[
        Record(value=v.encode(), key=b"k", partition=partition,
               timestamp_ms=timestamp or NOW) for v in values])


def marks(stream: Stream, topic: str = "clicks") -> dict[int, tuple[int, int]]:
    return watermarks(store_for(stream.cluster), stream.uuid, topic)


def stores_of(*streams: Stream) -> list[dict]:
    return [marks(s, t.name) for s in streams for t in s.topics.order_by("name")]


def deliver(source: Stream, replica: Stream, partition: int, count: int) -> None:
    """What a gateway does: the first `count` messages of a source partition, applied."""
    store = store_for(replica.cluster)
    store.ensure_topic(replica.uuid, "clicks", 2)
    found = store_for(source.cluster).read(source.uuid, "clicks", partition, 0, limit=count)
    link = ReplicaLink.objects.get(source=source, replica=replica)
    store.apply(replica.uuid, found, link=str(link.pk))


# --- stream purge ---------------------------------------------------------------------------


def test_purge_by_default_deletes_only_messages_past_the_ttl_as_mapr_does(api, world):
    alice, ny = world.users["alice"], world.ny
    ok(call(api(alice), "stream/edit", path=ny.path, ttl="60"))
    topic = services.topic_create(actor=alice, stream=world.spare, name="logs", partitions=1)
    world.spare.ttl = 60
    world.spare.save()
    now = int(time.time() * 1000)  # not NOW: a slow run may reach here a minute after import
    produce(alice, world.spare, topic.name, ["old1", "old2"], timestamp=now - HOUR)
    produce(alice, world.spare, topic.name, ["new"], timestamp=now)
    rows = ok(call(api(alice), "stream/purge", "post", path=world.spare.path))
    assert rows == [{"topic": "logs", "partition": 0, "messagesPurged": 2,
                     "messagesKeptForReplicas": 0, "minoffset": 2, "nextoffset": 3}]
    assert [m.value for m in store_for(world.spare.cluster).read(
        world.spare.uuid, "logs", 0, 2)] == [b"new"]


def test_purge_all_deletes_every_message_keeps_topics_and_offsets_go_on(api, world):
    alice, spare = world.users["alice"], world.spare
    services.topic_create(actor=alice, stream=spare, name="logs", partitions=2)
    produce(alice, spare, "logs", ["a", "b", "c"], partition=0)
    produce(alice, spare, "logs", ["d"], partition=1)
    rows = ok(call(api(alice), "stream/purge", path=spare.path, all="true"))
    assert [(r["partition"], r["messagesPurged"], r["minoffset"], r["nextoffset"])
            for r in rows] == [(0, 3, 3, 3), (1, 1, 1, 1)]
    assert Topic.objects.filter(stream=spare, name="logs", partitions=2).exists()
    produce(alice, spare, "logs", ["e"], partition=0)
    [again] = store_for(spare.cluster).read(spare.uuid, "logs", 0, 3)
    assert (again.offset, again.value) == (3, b"e")


def test_purge_all_keeps_what_a_replica_has_not_received(api, world):
    alice, sf, ny = world.users["alice"], world.activity, world.ny
    produce(alice, sf, "clicks", [f"m{i}" for i in range(5)], partition=0)
    produce(alice, sf, "clicks", ["x", "y"], partition=1)
    deliver(sf, ny, 0, 3)  # the (paused) replica holds offsets 0-2 of partition 0 only
    rows = ok(call(api(alice), "stream/purge", path=sf.path, all="yes"))
    assert [(r["partition"], r["messagesPurged"], r["messagesKeptForReplicas"])
            for r in rows] == [(0, 3, 2), (1, 0, 2)]
    assert marks(sf) == {0: (3, 5), 1: (0, 2)}
    assert marks(ny)[0] == (0, 3)  # the replica's copy is its own: untouched


def test_purging_a_replica_leaves_its_source_and_nothing_is_sent_again(api, world):
    alice, sf, ny = world.users["alice"], world.activity, world.ny
    produce(alice, sf, "clicks", [f"m{i}" for i in range(5)], partition=0)
    deliver(sf, ny, 0, 5)
    ok(call(api(alice), "stream/purge", path=ny.path, all="true"))
    assert marks(ny)[0] == (5, 5) and marks(sf)[0] == (0, 5)
    [row] = ok(call(api(alice), "stream/replica/list", path=sf.path))
    assert row["messagesPending"] == 0  # the replica's end did not move back


def test_purge_is_audited_with_what_it_deleted(api, world):
    alice, spare = world.users["alice"], world.spare
    services.topic_create(actor=alice, stream=spare, name="logs", partitions=1)
    produce(alice, spare, "logs", ["a", "b"])
    ok(call(api(alice), "stream/purge", path=spare.path, all="true"))
    event = AuditEvent.objects.get(action="purge")
    assert (event.actor_name, event.object_repr, event.interface) == ("alice", spare.path,
                                                                      "rest")
    assert event.after == {"all": True, "messagesPurged": 2, "messagesKeptForReplicas": 0}
    assert event.tenant_name == "acme"


@pytest.mark.parametrize(("user", "status", "expected"), [
    ("bob", 403, "bob may not purge the stream"),
    ("mallory", 404, "stream /mapr/sanfrancisco/activity does not exist"),
])
def test_purge_without_adminperm_or_by_an_outsider_is_refused_and_deletes_nothing(
        api, world, user, status, expected):
    produce(world.users["alice"], world.activity, "clicks", ["a", "b"])
    before, stored = snapshot(), stores_of(world.activity)
    response = call(api(world.users[user]), "stream/purge", path=world.activity.path,
                    all="true")
    assert response.status_code == status and expected in error_of(response)
    assert snapshot() == before and stores_of(world.activity) == stored
    assert not AuditEvent.objects.filter(action="purge").exists()


def test_purge_refuses_a_bad_boolean_naming_it(api, world):
    response = call(api(world.users["alice"]), "stream/purge", path=world.spare.path,
                    all="everything")
    assert response.status_code == 400
    assert "-all 'everything' is not a boolean" in error_of(response)


# --- cluster gateway local ------------------------------------------------------------------


def test_gateway_local_lists_a_clusters_gateways_as_text_for_gateway_set(api, world):
    GatewayFactory(cluster=world.ny.cluster, name="gw2:7660")
    GatewayFactory(cluster=world.ny.cluster, name="gw1")
    client = api(world.users["alice"])
    expected = [{"cluster": "newyork", "gateways": "gw1 gw2:7660"}]
    assert ok(call(client, "cluster/gateway/local", cluster="newyork")) == expected
    assert ok(call(client, "cluster/gateway/local", dstcluster="newyork",
                   format="text")) == expected
    assert ok(call(client, "cluster/gateway/local", cluster="sanfrancisco")) == [
        {"cluster": "sanfrancisco", "gateways": ""}]


@pytest.mark.parametrize(("params", "status", "expected"), [
    ({"cluster": "newyork", "format": "dns"}, 501, "-format dns: streamgate's source clusters "
     "find gateways in the list"),
    ({}, 400, "give the cluster whose gateways to list, once: -cluster <name>"),
    ({"cluster": "newyork", "dstcluster": "newyork"}, 400, "once: -cluster"),
    ({"cluster": "atlantis"}, 404, "cluster 'atlantis' does not exist"),
    ({"cluster": "newyork", "format": "xml"}, 400, "-format 'xml' is not one of text, dns"),
])
def test_gateway_local_refusals_name_the_problem(api, world, params, status, expected):
    response = call(api(world.users["alice"]), "cluster/gateway/local", **params)
    assert response.status_code == status and expected in error_of(response)


# --- stream replica list -refreshnow --------------------------------------------------------


def test_replica_list_refreshnow_records_the_figures_the_pages_show(api, world):
    alice, sf = world.users["alice"], world.activity
    link = ReplicaLink.objects.get(source=sf, replica=world.ny)
    cache.delete(rings().key(link.pk))
    produce(alice, sf, "clicks", ["a", "b", "c"])
    ok(call(api(alice), "stream/replica/list", path=sf.path))
    assert lag_latest([link.pk]) == {}  # without -refreshnow: the recorder's, none yet
    [row] = ok(call(api(alice), "stream/replica/list", path=sf.path, refreshnow="true"))
    t_ms, messages, nbytes, _lag, _stalled = lag_latest([link.pk])[link.pk]
    assert abs(t_ms - time.time() * 1000) < 60_000
    assert (messages, nbytes) == (row["messagesPending"], row["bytesPending"]) == (3, nbytes)


def test_replica_list_refreshnow_by_an_outsider_records_nothing(api, world):
    link = ReplicaLink.objects.get(source=world.activity, replica=world.ny)
    cache.delete(rings().key(link.pk))
    response = call(api(world.users["mallory"]), "stream/replica/list",
                    path=world.activity.path, refreshnow="true")
    assert response.status_code == 404 and lag_latest([link.pk]) == {}


# --- stream replica autosetup -useexistingreplica -------------------------------------------


def autosetup(api, user, replica: str, **params):  # type: ignore[no-untyped-def]
    return call(api(user), "stream/replica/autosetup", "post",
                path="/mapr/sanfrancisco/activity", replica=replica, **params)


def test_autosetup_uses_an_existing_empty_replica(api, world):
    alice, spare = world.users["alice"], world.spare
    services.topic_create(actor=alice, stream=spare, name="clicks", partitions=1)
    [job] = ok(autosetup(api, alice, spare.path, useexistingreplica="true"))
    link = ReplicaLink.objects.get(source=world.activity, replica=spare)
    assert (link.paused, link.state) == (False, ReplicaState.COPY_IN_PROGRESS)
    assert Upstream.objects.filter(replica=spare, source=world.activity).exists()
    # The replica's empty topic now belongs to the source's line of replication.
    assert Topic.objects.get(stream=spare, name="clicks").origin_uuid == world.activity.uuid
    assert (job["kind"], job["src"], job["dst"]) == ("copystream", world.activity.path,
                                                      spare.path)
    assert Job.objects.get(pk=job["id"]).link == link


def test_autosetup_uses_an_existing_replica_holding_a_copy_of_the_source(api, world):
    alice, spare, sf = world.users["alice"], world.spare, world.activity
    produce(alice, sf, "clicks", ["a", "b", "c"])
    services.topic_create(actor=alice, stream=spare, name="clicks", partitions=2)
    produce(alice, spare, "clicks", ["a", "b"])  # same values and timestamps: a prefix
    ok(autosetup(api, alice, spare.path, useexistingreplica="true", multimaster="true"))
    assert ReplicaLink.objects.filter(source=spare, replica=sf).exists()
    assert marks(spare)[0] == (0, 2)  # the copy step goes on from here


@pytest.mark.parametrize(("case", "status", "expected"), [
    ("foreign-topic", 409, "/mapr/newyork/spare:logs holds messages and "
     "/mapr/sanfrancisco/activity has no topic 'logs'"),
    ("past-the-end", 409, "/mapr/newyork/spare:clicks partition 0 ends at offset 2, past the "
     "source's end 1"),
    ("different", 409, "/mapr/newyork/spare:clicks partition 0 differs from the source at "
     "offset 0: it is not a copy of /mapr/sanfrancisco/activity"),
    ("more-partitions", 409, "/mapr/newyork/spare:clicks has 3 partitions and the source's "
     "topic 2"),
    ("tenant", 400, "with -useexistingreplica true it exists: leave -tenant out"),
    ("missing", 404, "stream /mapr/newyork/ghost does not exist: check -replica"),
    ("outsiders", 404, "stream /mapr/newyork/theirs does not exist: check -replica"),
    ("without-flag", 409, "give -useexistingreplica true to use this one"),
])
def test_autosetup_refuses_an_incompatible_existing_replica_and_changes_nothing(
        api, world, outsider, case, status, expected):
    alice, spare, sf = world.users["alice"], world.spare, world.activity
    produce(alice, sf, "clicks", ["a"])
    params, replica = {"useexistingreplica": "true"}, spare.path
    if case == "foreign-topic":
        services.topic_create(actor=alice, stream=spare, name="logs", partitions=1)
        produce(alice, spare, "logs", ["z"])
    elif case in ("past-the-end", "different"):
        services.topic_create(actor=alice, stream=spare, name="clicks", partitions=1)
        produce(alice, spare, "clicks", ["a", "b"] if case == "past-the-end" else ["other"])
    elif case == "more-partitions":
        services.topic_create(actor=alice, stream=spare, name="clicks", partitions=3)
    elif case == "tenant":
        params["tenant"] = "acme"
    elif case == "missing":
        replica = "/mapr/newyork/ghost"
    elif case == "outsiders":
        replica = StreamFactory(cluster=spare.cluster, name="theirs", created_by=outsider).path
    else:
        params = {}
    before, stored = snapshot(), stores_of(sf, spare)
    response = autosetup(api, alice, replica, **params)
    assert response.status_code == status, response.json()
    assert expected in error_of(response)
    assert snapshot() == before and stores_of(sf, spare) == stored
    assert not Job.objects.exists()
