"""`replica_failover`: a replica takes over from its source (issue 16), on the real stores."""

from __future__ import annotations

import pytest

from operations.models import Alarm, AlarmKind, AuditAction, AuditEvent
from replication.engine.checker import check_replica
from replication.engine.replicator import BatchSpec, apply_spec
from replication.engine.store import Key, LinkEnded, Record
from replication.errors import Conflict, InvalidInput, PermissionDenied
from replication.lag_history import lag_record
from replication.models import Failover, ReplicaLink, Stream, Topic, Upstream
from replication.services import (
    replica_add,
    replica_failover,
    replica_pause,
    topic_create,
    upstream_add,
)
from replication.services.common import component, holdings
from replication.services.cursors import cursor_commit, cursor_list
from replication.services.messages import (
    PartitionWrite,
    messages_append,
    messages_consume,
    messages_produce,
)
from replication.stores import store_for
from replication.topology import origin_conflicts
from tests.factories import ClusterFactory, StreamFactory, spread
from workers.replication.applier import batch_serve

pytestmark = pytest.mark.usefixtures("private_cache")


UNREACHABLE = "postgresql://postgres@127.0.0.1:9/lost_cluster_store"


class Producer:
    """Numbered messages (an `id` header each); remembers the acknowledged offsets. One
    message a produce call, so a batch store holds one message a batch and a replication
    planned to stop at an offset stops there on either layout (a batch store applies whole
    batches)."""

    def __init__(self, owner, stream: Stream, topic: str = "clicks") -> None:
        self.owner, self.stream, self.topic = owner, stream, topic
        self.sent = 0
        self.acked: dict[Key, set[int]] = {}

    def __call__(self, count: int, stream: Stream | None = None) -> list[tuple[int, int]]:
        records = [Record(value=b"v%d" % i, headers=(("id", b"m-%d" % i),))
                   for i in range(self.sent, self.sent + count)]
        stream = stream or self.stream
        offsets = [placed for i, record in enumerate(records, self.sent)
                   for placed in messages_produce(actor=self.owner, stream=stream,
                                                  topic=self.topic,
                                                  records=spread(stream, self.topic, [record], i))]
        for partition, offset in offsets:
            self.acked.setdefault((self.topic, partition), set()).add(offset)
        self.sent += count
        return offsets


def link(source: Stream, replica: Stream, owner) -> ReplicaLink:
    created = replica_add(actor=owner, source=source, replica=replica)
    upstream_add(actor=owner, replica=replica, source=source)
    return created


def replicate(source: Stream, replica: Stream, topic: str = "clicks",
              upto: int | None = None) -> None:
    """What a gateway does: apply the source's partitions to the replica (up to `upto`)."""
    pk = ReplicaLink.objects.get(source=source, replica=replica).pk
    for partition, (_low, high) in store_for(source.cluster).watermarks(source.uuid,
                                                                        topic).items():
        batch_serve(link_id=pk, topic=topic, partition=partition, start=0,
                    end=high if upto is None else min(high, upto))


def ends(stream: Stream, topic: str = "clicks") -> dict[int, int]:
    marks = store_for(stream.cluster).watermarks(stream.uuid, topic)
    return {partition: high for partition, (_low, high) in marks.items()}


def origin_of(stream: Stream, topic: str = "clicks") -> object:
    return Topic.objects.get(stream=stream, name=topic).origin_uuid


@pytest.fixture
def pair(owner, activity, activity_ny):
    topic_create(actor=owner, stream=activity, name="clicks", partitions=3)
    link(activity, activity_ny, owner)
    return activity, activity_ny


def test_planned_failover_drains_the_link_and_makes_the_replica_the_origin(owner, pair):
    source, replica = pair
    produce = Producer(owner, source)
    produce(60)
    replicate(source, replica, upto=5)  # the replica lags when the failover starts
    for partition in range(3):
        cursor_commit(actor=owner, stream=source, group="g", topic="clicks",
                      partition=partition, offset=3 + partition)
    failover = replica_failover(replica=replica, actor=owner)
    report = check_replica(store_for(source.cluster), source.uuid, store_for(replica.cluster),
                           replica.uuid, ["clicks"], acknowledged=produce.acked)
    assert report.ok, report.summary()  # drained: nothing lost, duplicated or reordered
    assert (failover.forced, failover.source_reachable, failover.missing_messages) == (
        False, True, 0)
    assert origin_of(replica) == replica.uuid and origin_of(source) == source.uuid
    assert not ReplicaLink.objects.exists() and not Upstream.objects.exists()
    cursors = cursor_list(actor=owner, stream=replica, topic="clicks", group="g")
    assert {c["partition"]: c["offset"] for c in cursors} == {0: 3, 1: 4, 2: 5}
    before = ends(replica)
    placed = produce(6, stream=replica)  # producers write to the replica, at its end
    assert sorted(placed) == sorted((p, before[p] + i) for p in range(3) for i in range(2))


def test_after_a_failover_the_old_source_refuses_producers_naming_the_replica(owner, pair):
    source, replica = pair
    Producer(owner, source)(3)
    replica_failover(replica=replica, actor=owner)
    with pytest.raises(Conflict, match=f"accepts no producers: it failed over to {replica.path}"):
        Producer(owner, Stream.objects.get(pk=source.pk))(1)


def test_the_replicated_cursor_is_where_a_consumer_group_continues(owner, pair):
    source, replica = pair
    produce = Producer(owner, source, topic="clicks")
    produce(30)
    replicate(source, replica)
    cursor_commit(actor=owner, stream=source, group="g", topic="clicks", partition=0, offset=4)
    replica_failover(replica=replica, actor=owner)
    produce(9, stream=replica)
    at = {c["partition"]: c["offset"] for c in cursor_list(actor=owner, stream=replica,
                                                           topic="clicks", group="g")}[0]
    read = messages_consume(actor=owner, stream=replica, topic="clicks", partition=0, offset=at)
    # The group reads on from its cursor: the rest of the first period, then the second.
    assert [m.offset for m in read] == list(range(4, ends(replica)[0]))
    assert [m.origin for m in read][-1] == replica.uuid


def test_forced_failover_with_the_source_lost_records_the_tail_and_raises_an_alarm(
        owner, pair):
    source, replica = pair
    Producer(owner, source)(90)
    replicate(source, replica, upto=20)  # 30 per partition produced, 20 replicated
    lag_record()  # the beat's lag sample: 30 messages pending
    ClusterFactory._meta.model.objects.filter(pk=source.cluster_id).update(
        store_url=UNREACHABLE)  # the source's cluster is lost
    source = Stream.objects.select_related("cluster").get(pk=source.pk)
    failover = replica_failover(replica=replica, force=True, actor=owner)
    assert (failover.forced, failover.source_reachable) == (True, False)
    assert failover.missing_messages == 30 and "last lag sample" in failover.missing_from
    assert [(p["partition"], p["replicaEnd"], p["sourceEnd"], p["sourceKnownEnd"])
            for p in failover.partitions] == [(p, 20, None, 20) for p in range(3)]
    assert origin_of(replica) == replica.uuid
    alarm = Alarm.objects.get(kind=AlarmKind.FAILOVER)
    assert alarm.is_open and alarm.stream_id == replica.pk
    assert "30 messages" in alarm.description and source.path in alarm.description
    event = AuditEvent.objects.get(action=AuditAction.FAILOVER)
    assert event.object_type == "failover" and replica.path in event.object_repr


def test_forced_failover_with_the_source_reachable_measures_the_tail_per_partition(
        owner, pair):
    source, replica = pair
    Producer(owner, source)(30)
    replicate(source, replica, upto=7)
    failover = replica_failover(replica=replica, force=True, actor=owner)
    assert failover.missing_messages == 9 and failover.missing_ms is not None
    assert [(p["replicaEnd"], p["sourceEnd"]) for p in failover.partitions] == [(7, 10)] * 3
    alarm = Alarm.objects.get(kind=AlarmKind.FAILOVER)
    assert "clicks partition 0 offsets 7-9" in alarm.description


def test_a_batch_of_the_ended_link_applied_after_the_switch_is_refused(owner, pair):
    """The soak's duplicates: a gateway's batch of the old link, sent before a forced failover
    and applied after it, landed behind the new origin's own messages (its overlap trimmed by
    offset as if they were the same), and a failback then brought those messages back both in
    the topic and in its divergence topic."""
    source, replica = pair
    produce = Producer(owner, source)
    produce(30)  # 10 per partition
    replicate(source, replica, upto=5)
    old = str(ReplicaLink.objects.get(source=source, replica=replica).pk)
    replica_failover(replica=replica, force=True, actor=owner)
    produce(6, stream=Stream.objects.get(pk=replica.pk))  # its own, at offsets 5 and 6
    src, dst = store_for(source.cluster), store_for(replica.cluster)
    for partition in range(3):
        with pytest.raises(LinkEnded):
            apply_spec(src, dst, BatchSpec(source.uuid, replica.uuid, "clicks", partition, 5,
                                           10), link=old)
    assert ends(replica) == {0: 7, 1: 7, 2: 7}
    for partition in range(3):
        tail = messages_consume(actor=owner, stream=replica, topic="clicks",
                                partition=partition, offset=5)
        assert {m.origin for m in tail} == {replica.uuid}


def test_planned_failover_with_the_source_unreachable_is_refused_and_changes_nothing(
        owner, pair, settings):
    source, replica = pair
    settings.FAILOVER_PROBE_SECONDS = 2
    ClusterFactory._meta.model.objects.filter(pk=source.cluster_id).update(
        store_url=UNREACHABLE)
    with pytest.raises(Conflict, match="-force true"):
        replica_failover(replica=replica, actor=owner)
    assert_unchanged(source, replica)


def assert_unchanged(source: Stream, replica: Stream) -> None:
    assert not Failover.objects.exists() and not Alarm.objects.exists()
    assert Stream.objects.get(pk=source.pk).producers_stopped == ""
    assert set(Topic.objects.filter(name="clicks").values_list("origin_uuid", flat=True)) == {
        source.uuid}


def test_multi_master_failover_leaves_each_topic_one_origin(owner, sanfrancisco, newyork):
    a = StreamFactory(cluster=sanfrancisco, name="a", created_by=owner)
    b = StreamFactory(cluster=newyork, name="b", created_by=owner)
    topic_create(actor=owner, stream=a, name="clicks")
    topic_create(actor=owner, stream=b, name="views")
    link(a, b, owner)
    link(b, a, owner)
    Producer(owner, a)(5)
    replicate(a, b)
    replica_failover(replica=b, source=a, actor=owner)
    assert not ReplicaLink.objects.exists()  # both directions ended: a is cut off from b
    assert (origin_of(b), origin_of(b, "views")) == (b.uuid, b.uuid)
    assert origin_of(a) == a.uuid
    assert_sound([a.pk, b.pk])
    Producer(owner, b)(2)
    Producer(owner, b, topic="views")(2)


def assert_sound(stream_ids: list[int]) -> None:
    streams, edges = component(stream_ids)
    assert origin_conflicts(edges, holdings(streams)) == []


def test_ring_failover_leaves_the_ring_without_the_lost_cluster_one_origin(owner):
    a, b, c = (StreamFactory(cluster=ClusterFactory(name=f"c{n}"), name=n, created_by=owner)
               for n in "abc")
    topic_create(actor=owner, stream=a, name="clicks")
    for source, replica in ((a, b), (b, c), (c, a)):
        link(source, replica, owner)
    Producer(owner, a)(4)
    replicate(a, b)
    replicate(b, c)
    failover = replica_failover(replica=b, force=True, actor=owner)
    remaining = set(ReplicaLink.objects.values_list("source__name", "replica__name"))
    assert remaining == {("b", "c")}  # what touched the lost cluster a ended
    assert {(r["source"], r["replica"]) for r in failover.ended_links} == {
        (a.path, b.path), (c.path, a.path)}
    assert (origin_of(b), origin_of(c), origin_of(a)) == (b.uuid, b.uuid, a.uuid)
    assert_sound([a.pk, b.pk, c.pk])


def test_chain_failover_keeps_replicating_downstream_from_the_promoted_stream(owner):
    a, b, c = (StreamFactory(cluster=ClusterFactory(name=f"c{n}"), name=n, created_by=owner)
               for n in "abc")
    topic_create(actor=owner, stream=a, name="clicks")
    link(a, b, owner)
    link(b, c, owner)
    produce = Producer(owner, a)
    produce(8)
    replicate(a, b)
    replicate(b, c)
    replica_failover(replica=b, actor=owner)
    assert (origin_of(b), origin_of(c)) == (b.uuid, b.uuid)
    produce(5, stream=b)
    replicate(b, c)
    report = check_replica(store_for(b.cluster), b.uuid, store_for(c.cluster), c.uuid,
                           ["clicks"], acknowledged=produce.acked)
    assert report.ok, report.summary()


# --- refusals: each a clear error that changes nothing -------------------------------------


def test_failover_of_a_stream_that_is_no_replica_is_refused(owner, pair):
    source, replica = pair
    with pytest.raises(InvalidInput, match="is no replica"):
        replica_failover(replica=source, actor=owner)
    assert ReplicaLink.objects.count() == 1
    assert_unchanged(source, replica)


def test_failover_of_a_paused_link_is_refused(owner, pair):
    source, replica = pair
    replica_pause(actor=owner, source=source, replica=replica)
    with pytest.raises(Conflict, match=r"is paused.*resume it") as refused:
        replica_failover(replica=replica, force=True, actor=owner)
    assert refused.value.hint.action == "replica.resume"
    assert refused.value.hint.params == {"path": source.path, "replica": replica.path}
    assert ReplicaLink.objects.get().paused
    assert_unchanged(source, replica)


def test_failover_of_a_never_agreed_link_is_refused(owner, activity, activity_ny):
    topic_create(actor=owner, stream=activity, name="clicks")
    replica_add(actor=owner, source=activity, replica=activity_ny)  # no upstream declared
    with pytest.raises(Conflict, match="never agreed"):
        replica_failover(replica=activity_ny, force=True, actor=owner)
    assert ReplicaLink.objects.count() == 1
    assert_unchanged(activity, activity_ny)


def test_failover_of_an_upstream_never_registered_at_the_source_is_refused(owner, activity,
                                                                         activity_ny):
    upstream_add(actor=owner, replica=activity_ny, source=activity)
    with pytest.raises(Conflict, match="never registered it as a replica"):
        replica_failover(replica=activity_ny, actor=owner)
    assert Upstream.objects.count() == 1


def test_failover_needs_adminperm_on_the_replica(owner, member, pair):
    source, replica = pair
    with pytest.raises(PermissionDenied, match="adminperm"):
        replica_failover(replica=replica, force=True, actor=member)
    assert ReplicaLink.objects.count() == 1
    assert_unchanged(source, replica)


def test_planned_failover_needs_adminperm_on_the_source_too(owner, member, pair):
    source, replica = pair
    replica.adminperm = f"u:{owner.username} | u:{member.username}"
    replica.save()
    with pytest.raises(PermissionDenied, match="stop its producers"):
        replica_failover(replica=replica, actor=member)
    assert_unchanged(source, replica)


def test_failover_from_a_stream_that_is_not_the_source_is_refused(owner, pair, sanfrancisco):
    source, replica = pair
    other = StreamFactory(cluster=sanfrancisco, name="other", created_by=owner)
    with pytest.raises(InvalidInput, match=f"is not a replica of {other.path}"):
        replica_failover(replica=replica, source=other, actor=owner)
    assert_unchanged(source, replica)


def test_the_kafka_produce_path_is_fenced_too(owner, pair):
    source, replica = pair
    replica_failover(replica=replica, force=True, actor=owner)
    write = PartitionWrite(0, [Record(b"x")])
    messages_append(actor=owner, stream=Stream.objects.get(pk=source.pk), topic="clicks",
                    writes=[write])
    assert isinstance(write.error, Conflict)  # answered per partition: a retriable error
    assert f"failed over to {replica.path}" in str(write.error)
    assert write.base_offset == -1 and sum(ends(source).values()) == 0  # nothing was stored


@pytest.mark.parametrize("layout", ["batches"], indirect=True)
def test_a_transaction_open_at_a_failover_is_aborted_on_the_promoted_replica(
        layout, owner, pair):
    from tests.replication.engine.test_batchstore import _transactional

    source, replica = pair
    Producer(owner, source)(3)
    store = store_for(source.cluster)
    store.append_batches(source.uuid, "clicks", {0: _transactional(2, 77, 0)},
                         origin=source.uuid)
    replicate(source, replica)
    promoted = store_for(replica.cluster)
    high = ends(replica)[0]
    first = promoted.txn_view(replica.uuid, "clicks", 0, 0, high).stable
    assert first < high  # open: a read_committed consumer stops at it
    replica_failover(replica=replica, actor=owner)
    after = ends(replica)[0]
    assert after == high + 1  # the ABORT marker
    assert promoted.txn_view(replica.uuid, "clicks", 0, 0, after) == (after, [(77, first)])
