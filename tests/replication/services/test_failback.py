"""`replica_failback`: the old source of a failover comes back without a full recopy and
without losing a message (issue 16), on the real stores."""

from __future__ import annotations

import pytest

from operations.models import Alarm
from replication.engine.checker import check_replica
from replication.engine.pgbatch import PgBatchStore
from replication.engine.store import Record, UnknownTopic
from replication.errors import Conflict, InvalidInput, PermissionDenied
from replication.models import Failover, ReplicaLink, Stream, Topic, Upstream
from replication.services import (
    failback,
    replica_add,
    replica_failback,
    replica_failover,
    topic_create,
    upstream_add,
)
from replication.services.messages import messages_produce
from replication.stores import store_for
from tests.factories import StreamFactory, spread
from workers.replication.applier import batch_serve

pytestmark = pytest.mark.usefixtures("private_cache")
BOTH_LAYOUTS = pytest.mark.parametrize("layout", ["rows", "batches"], indirect=True)


HEADER = "streamgate.original."


def produce(owner, stream: Stream, prefix: str, count: int, topic: str = "clicks",
            per_call: int | None = None) -> set[str]:
    """`count` messages in produce calls of `per_call` (all in one if None): a batch store
    keeps a call's messages of a partition as one batch, and replicates whole batches."""
    ids = [f"{prefix}-{i}" for i in range(count)]
    step = per_call or count
    for at in range(0, count, step):
        messages_produce(actor=owner, stream=stream, topic=topic,
                         records=spread(stream, topic, [Record(value=i.encode(),
                                                               headers=(("id", i.encode()),))
                                                        for i in ids[at:at + step]], at))
    return set(ids)


def replicate(source: Stream, replica: Stream, upto: int | None = None,
              topic: str = "clicks") -> None:
    """What a gateway does: from the replica's end on (never back to a message's origin)."""
    pk = ReplicaLink.objects.get(source=source, replica=replica).pk
    try:
        ends = store_for(replica.cluster).watermarks(replica.uuid, topic)
    except UnknownTopic:
        ends = {}
    for partition, (_low, high) in store_for(source.cluster).watermarks(source.uuid,
                                                                        topic).items():
        batch_serve(link_id=pk, topic=topic, partition=partition,
                    start=ends.get(partition, (0, 0))[1],
                    end=high if upto is None else min(high, upto))


def read_all(stream: Stream, topic: str) -> list:
    store, found = store_for(stream.cluster), []
    for partition, (low, high) in store.watermarks(stream.uuid, topic).items():
        offset = low
        while offset < high:
            batch = store.read(stream.uuid, topic, partition, offset)
            found += batch
            offset = batch[-1].offset + 1
    return found


def origin_of(stream: Stream, topic: str = "clicks") -> object:
    return Topic.objects.get(stream=stream, name=topic).origin_uuid


@pytest.fixture
def failed_over(layout, owner, activity, activity_ny):
    """activity -> activity_ny; 60 produced (20 per partition, in batches of 5 so that a batch
    store replicates 15 of them), 15 per partition replicated, a forced failover, then 30
    produced on the promoted activity_ny."""
    topic_create(actor=owner, stream=activity, name="clicks", partitions=3)
    replica_add(actor=owner, source=activity, replica=activity_ny)
    upstream_add(actor=owner, replica=activity_ny, source=activity)
    first = set().union(*(produce(owner, activity, f"first{n}", 15) for n in range(4)))
    assert isinstance(store_for(activity.cluster), PgBatchStore) == (layout == "batches")
    replicate(activity, activity_ny, upto=15)
    replica_failover(replica=activity_ny, force=True, actor=owner)
    second = produce(owner, activity_ny, "second", 30)
    return activity, activity_ny, first, second


def test_dryrun_reports_per_partition_and_changes_nothing(owner, failed_over):
    source, replica, _first, _second = failed_over
    before = (store_for(source.cluster).watermarks(source.uuid, "clicks"),
              list(ReplicaLink.objects.values()), list(Topic.objects.values()))
    report = replica_failback(source=source, replica=replica, dryrun=True, actor=owner)
    assert [(p["partition"], p["commonPrefix"], p["keepAside"], p["copy"])
            for p in report["partitions"]] == [(p, 15, 5, 10) for p in range(3)]
    assert (report["toKeepAside"], report["toCopy"]) == (15, 30)
    assert report["estimatedSeconds"] > 0
    assert before == (store_for(source.cluster).watermarks(source.uuid, "clicks"),
                      list(ReplicaLink.objects.values()), list(Topic.objects.values()))
    assert Failover.objects.get().failed_back_at is None


@BOTH_LAYOUTS
def test_failback_keeps_every_message_of_both_periods_once_and_restores_the_direction(
        owner, failed_over):
    source, replica, first, second = failed_over
    report = replica_failback(source=source, replica=replica, actor=owner)
    assert report["keptAside"] == 15
    primary = read_all(source, "clicks")
    diverged = read_all(source, "clicks.diverged")
    ids = [dict(m.headers)["id"].decode() for m in primary + diverged]
    assert len(ids) == len(set(ids)) and set(ids) == first | second
    assert {dict(m.headers)["id"].decode() for m in diverged} <= first
    for message in diverged:  # where each kept-aside message was, in its headers
        headers = dict(message.headers)
        assert int(headers[f"{HEADER}offset"]) >= 15
        assert int(headers[f"{HEADER}partition"]) == message.partition
        assert int(headers[f"{HEADER}timestamp"]) == message.timestamp_ms
    # The original direction is back: the old source is the origin, the promoted a replica.
    assert set(ReplicaLink.objects.values_list("source", "replica")) == {(source.pk, replica.pk)}
    assert Upstream.objects.filter(replica=replica, source=source).exists()
    assert (origin_of(source), origin_of(replica)) == (source.uuid, source.uuid)
    report = check_replica(store_for(source.cluster), source.uuid, store_for(replica.cluster),
                           replica.uuid, ["clicks"])
    assert report.ok, report.summary()
    assert not Alarm.objects.open().exists()  # both failover alarms are cleared
    assert all(f.failed_back_at for f in Failover.objects.all())
    produce(owner, Stream.objects.get(pk=source.pk), "third", 6)  # producers are back
    replicate(source, replica)
    assert check_replica(store_for(source.cluster), source.uuid, store_for(replica.cluster),
                         replica.uuid, ["clicks"]).ok


def test_failback_with_reverse_leaves_the_old_source_a_replica_of_the_promoted(
        owner, failed_over):
    source, replica, first, _second = failed_over
    replica_failback(source=source, replica=replica, reverse=True, actor=owner)
    assert set(ReplicaLink.objects.values_list("source", "replica")) == {(replica.pk, source.pk)}
    assert (origin_of(source), origin_of(replica)) == (replica.uuid, replica.uuid)
    with pytest.raises(InvalidInput, match=f"replicated from {replica.path}"):
        produce(owner, Stream.objects.get(pk=source.pk), "late", 1)
    produce(owner, Stream.objects.get(pk=replica.pk), "third", 3)
    replicate(replica, source)
    report = check_replica(store_for(replica.cluster), replica.uuid, store_for(source.cluster),
                           source.uuid, ["clicks"])
    assert report.ok, report.summary()
    kept = {dict(m.headers)["id"].decode() for m in read_all(source, "clicks.diverged")}
    assert len(kept) == 15 and kept <= first


def test_multi_master_pair_fails_back_with_both_directions(owner, sanfrancisco, newyork):
    a = StreamFactory(cluster=sanfrancisco, name="a", created_by=owner)
    b = StreamFactory(cluster=newyork, name="b", created_by=owner)
    topic_create(actor=owner, stream=a, name="clicks")
    topic_create(actor=owner, stream=b, name="views")  # b's own: its origin never moves
    for source, replica in ((a, b), (b, a)):
        replica_add(actor=owner, source=source, replica=replica)
        upstream_add(actor=owner, replica=replica, source=source)
    first = produce(owner, a, "first", 10, per_call=1)
    replicate(a, b, upto=7)  # 3 messages not replicated: they diverge
    replica_failover(replica=b, source=a, force=True, actor=owner)
    second = produce(owner, b, "second", 4)
    replica_failback(source=a, replica=b, actor=owner)
    assert set(ReplicaLink.objects.values_list("source", "replica")) == {(a.pk, b.pk),
                                                                          (b.pk, a.pk)}
    assert (origin_of(a), origin_of(b)) == (a.uuid, a.uuid)
    assert (origin_of(a, "views"), origin_of(b, "views")) == (b.uuid, b.uuid)
    ids = [dict(m.headers)["id"].decode()
           for m in read_all(a, "clicks") + read_all(a, "clicks.diverged")]
    assert len(ids) == len(set(ids)) == 14 and set(ids) == first | second


# --- refusals: clear errors, nothing changed ---------------------------------------------------


def test_failback_onto_a_stream_that_was_not_the_source_is_refused(owner, failed_over,
                                                                   sanfrancisco):
    source, replica, _first, _second = failed_over
    other = StreamFactory(cluster=sanfrancisco, name="other", created_by=owner)
    with pytest.raises(InvalidInput, match=f"did not take over from {other.path}.*"
                                           f"took over from {source.path}"):
        replica_failback(source=other, replica=replica, actor=owner)
    assert Failover.objects.get().failed_back_at is None


def test_failback_needs_adminperm_on_both_sides(owner, member, failed_over):
    source, replica, _first, _second = failed_over
    replica.adminperm = f"u:{owner.username} | u:{member.username}"
    replica.save()
    with pytest.raises(PermissionDenied, match="adminperm"):
        replica_failback(source=source, replica=replica, actor=member)
    assert not ReplicaLink.objects.exists()
    assert "clicks.diverged" not in source.topics.values_list("name", flat=True)


def test_failback_while_producers_write_to_both_is_refused(owner, failed_over):
    source, replica, _first, _second = failed_over
    Stream.objects.filter(pk=source.pk).update(producers_stopped="")  # reopened by hand
    with pytest.raises(Conflict, match=r"producers write to .* again"):
        replica_failback(source=source, replica=replica, actor=owner)
    assert sum(h for _l, h in store_for(source.cluster).watermarks(source.uuid,
                                                                   "clicks").values()) == 60
    assert not ReplicaLink.objects.exists()


def test_a_failback_whose_drain_failed_completes_when_run_again(owner, failed_over,
                                                                monkeypatch):
    """The chaos soak of 29 Nov (seed 11): a failback failed in its drain, past the point
    where the old source became a replica of the promoted stream (its producers no longer
    stopped but refused: the topics' origin is the promoted stream), and every failback after
    was refused as if producers wrote to both."""
    source, replica, first, second = failed_over
    drain = failback.link_drain

    def fails(link, *, why):  # type: ignore[no-untyped-def]
        monkeypatch.setattr(failback, "link_drain", drain)
        raise Conflict(f"{link.replica.path} did not catch up: nothing was switched and {why}")

    monkeypatch.setattr(failback, "link_drain", fails)
    with pytest.raises(Conflict, match="fail back again"):
        replica_failback(source=source, replica=replica, actor=owner)
    assert Failover.objects.get(replica=replica).failed_back_at is None
    report = replica_failback(source=Stream.objects.get(pk=source.pk),
                              replica=Stream.objects.get(pk=replica.pk), actor=owner)
    assert report["keptAside"] == 0  # kept by the first run, and cut: nothing diverges now
    ids = [dict(m.headers)["id"].decode()
           for m in read_all(source, "clicks") + read_all(source, "clicks.diverged")]
    assert len(ids) == len(set(ids)) and set(ids) == first | second
    assert (origin_of(source), origin_of(replica)) == (source.uuid, source.uuid)
    assert all(f.failed_back_at for f in Failover.objects.all())


@BOTH_LAYOUTS
def test_the_common_prefix_is_found_even_without_the_failovers_record_of_it(
        owner, failed_over, monkeypatch):
    source, replica, _first, _second = failed_over
    Failover.objects.update(partitions=[])  # no replica end recorded: search the partitions
    monkeypatch.setattr(failback, "VERIFY_WINDOW", 2)  # so the search starts past it
    report = replica_failback(source=source, replica=replica, dryrun=True, actor=owner)
    assert [(p["commonPrefix"], p["keepAside"], p["copy"]) for p in report["partitions"]] == [
        (15, 5, 10)] * 3


def test_failback_needs_adminperm_on_the_promoted_stream_too(owner, member, failed_over):
    source, replica, _first, _second = failed_over
    source.adminperm = f"u:{owner.username} | u:{member.username}"
    source.save()
    with pytest.raises(PermissionDenied, match=f"adminperm.*{replica.path}|{replica.path}.*"
                                               "adminperm"):
        replica_failback(source=source, replica=replica, actor=member)
    assert not ReplicaLink.objects.exists() and Failover.objects.get().failed_back_at is None
    assert sum(h for _l, h in store_for(source.cluster).watermarks(source.uuid,
                                                                   "clicks").values()) == 60


def test_large_partitions_find_the_common_prefix_with_diffstreams_on_spark(
        spark, settings, owner, failed_over, monkeypatch):
    source, replica, _first, _second = failed_over
    settings.BULK_IN_PROCESS = 0  # every comparison is "large": diffstreams' Spark tasks
    Failover.objects.update(partitions=[])  # and the whole prefix is searched
    monkeypatch.setattr(failback, "VERIFY_WINDOW", 2)
    group = "failback-plan-test"
    spark.setJobGroup(group, "the failback's comparison")
    report = replica_failback(source=source, replica=replica, dryrun=True, actor=owner)
    assert [(p["commonPrefix"], p["keepAside"], p["copy"]) for p in report["partitions"]] == [
        (15, 5, 10)] * 3
    assert len(spark.statusTracker().getJobIdsForGroup(group)) == 2  # window, then below it


@BOTH_LAYOUTS
def test_a_large_gap_is_copied_by_spark_and_every_message_is_kept_once(spark, settings, owner,
                                                                       failed_over):
    source, replica, first, second = failed_over
    settings.BULK_IN_PROCESS = 0  # every gap is "large": copystream's Spark tasks copy it
    group = "failback-copy-test"
    spark.setJobGroup(group, "the failback's copy")
    report = replica_failback(source=source, replica=replica, actor=owner)
    assert (report["keptAside"], report["toCopy"]) == (15, 30)
    primary, diverged = read_all(source, "clicks"), read_all(source, "clicks.diverged")
    ids = [dict(m.headers)["id"].decode() for m in primary + diverged]
    assert len(ids) == len(set(ids)) and set(ids) == first | second
    assert check_replica(store_for(source.cluster), source.uuid, store_for(replica.cluster),
                         replica.uuid, ["clicks"]).ok
    assert len(spark.statusTracker().getJobIdsForGroup(group)) >= 2  # comparison and copy
