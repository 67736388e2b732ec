"""Compacted streams in the domain (issue 31): the settings, the produce rule, the pass over a
stream (bounded by what its replicas received), what it reports, and a replica compacting
its copy by its origin's rule to the same latest value per key at the same offsets."""

from __future__ import annotations

import time

import pytest
from structlog.testing import capture_logs

from portal.web.templatetags.human import compaction_line
from replication.engine import compactstore
from replication.engine import partitionmove as moving
from replication.engine.compaction import Rules
from replication.engine.compactstore import CompactionMethods
from replication.engine.store import Record
from replication.errors import InvalidInput
from replication.models import ReplicaLink
from replication.services import replica_add, stream_edit, topic_create, upstream_add
from replication.services.browse import BrowseQuery, messages_browse
from replication.services.compaction import (
    RUNNING_STALE_MS,
    compacted_streams,
    compaction_summary,
    stream_compact,
)
from replication.services.messages import messages_consume, messages_produce
from replication.services.purge import watermarks
from replication.services.verify import link_verify
from replication.stores import store_for
from tests.factories import ClusterFactory, StreamFactory
from workers.celery import app
from workers.replication.applier import batch_serve
from workers.tasks import compact_stream_task, compact_streams_task

BATCHES = pytest.mark.parametrize("layout", ["batches"], indirect=True)
LATER = 1 << 45  # a clock far past every record: the lag and tombstone retention have passed


@pytest.fixture
def compacted(layout, owner, activity, activity_ny):
    """alice's activity, compacted, with topic clicks (1 partition) replicated to
    activity_ny (agreed, running)."""
    stream_edit(actor=owner, stream=activity, compact=True, deleteretention=1_000,
                mincleanabledirtyratio=0.0)
    topic_create(actor=owner, stream=activity, name="clicks", partitions=1)
    replica_add(actor=owner, source=activity, replica=activity_ny)
    upstream_add(actor=owner, replica=activity_ny, source=activity)
    return activity, activity_ny


def produce(owner, stream, pairs: list[tuple[bytes | None, bytes | None]]) -> None:
    messages_produce(actor=owner, stream=stream, topic="clicks", records=[
        Record(value, key=key, partition=0, timestamp_ms=1_000 + i)
        for i, (key, value) in enumerate(pairs)])


def kept(stream) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(m.offset, m.key, m.value) for m in messages_consume(
        actor=stream.created_by, stream=stream, topic="clicks", partition=0, offset=0,
        limit=100)]


def replicate(source, replica, end: int) -> None:
    link = ReplicaLink.objects.get(source=source, replica=replica)
    start = watermarks(store_for(replica.cluster), replica.uuid, "clicks").get(0, (0, 0))[1]
    batch_serve(link_id=link.pk, topic="clicks", partition=0, start=start, end=end)


@BATCHES
def test_a_pass_keeps_the_latest_value_per_key_and_reports_what_it_removed(owner, compacted):
    source, _ = compacted
    produce(owner, source, [(b"a", b"1"), (b"b", b"1")])
    produce(owner, source, [(b"a", b"2"), (b"b", None)])
    produce(owner, source, [(b"c", b"1")])
    replicate(*compacted, 5)
    done = stream_compact(stream=source, now_ms=LATER)
    assert (done.partitions, done.removed) == (1, 3)
    assert kept(source) == [(2, b"a", b"2"), (4, b"c", b"1")]  # the tombstone expired too
    summary = compaction_summary(source)
    assert summary["passes"] == 1 and summary["messagesremoved"] == 3
    assert summary["bytesreclaimed"] > 0 and summary["lastrun"] == LATER


@BATCHES
def test_what_a_replica_has_not_received_is_not_compacted(owner, compacted):
    source, replica = compacted
    produce(owner, source, [(b"a", b"1")])
    produce(owner, source, [(b"a", b"2")])
    produce(owner, source, [(b"a", b"3")])
    replicate(source, replica, 2)  # the replica holds offsets 0 and 1 only
    stream_compact(stream=source, now_ms=LATER)
    assert [o for o, _, _ in kept(source)] == [1, 2]  # a2 and a3 wait for the replica
    replicate(source, replica, 3)
    stream_compact(stream=source, now_ms=LATER)
    assert [o for o, _, _ in kept(source)] == [2]


@BATCHES
def test_a_replica_compacts_its_copy_by_its_origins_rule_to_the_same_result(owner, compacted):
    source, replica = compacted
    produce(owner, source, [(b"a", b"1"), (b"b", b"1"), (b"a", b"2")])
    replicate(source, replica, 3)
    stream_compact(stream=source, now_ms=LATER)
    produce(owner, source, [(b"b", b"2")])
    replicate(source, replica, 4)
    assert set(compacted_streams()) == {source, replica}  # the replica is not -compact itself
    for stream in (source, replica):
        stream_compact(stream=stream, now_ms=LATER)
    assert kept(replica) == kept(source) == [(2, b"a", b"2"), (3, b"b", b"2")]
    assert store_for(replica.cluster).watermarks(replica.uuid, "clicks") == {0: (0, 4)}


@BATCHES
def test_a_keyless_record_is_refused_on_a_compacted_stream_and_nothing_is_written(
        owner, compacted):
    source, _ = compacted
    with pytest.raises(InvalidInput, match="record 1 has no key: a compacted topic"):
        produce(owner, source, [(b"a", b"1"), (None, b"x")])
    assert kept(source) == []


@pytest.fixture
def eager():
    """Tasks run where they are sent (no worker in this test). Set on Celery's app itself:
    Django's CELERY_TASK_ALWAYS_EAGER is read once, when the app first configures, which an
    earlier test in the same process may have done."""
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = False


@BATCHES
def test_the_beat_task_queues_a_pass_per_compacted_stream(owner, compacted, eager):
    source, replica = compacted
    produce(owner, source, [(b"a", b"1"), (b"a", b"2")])
    replicate(source, replica, 2)
    assert compact_streams_task() == 2
    assert [o for o, _, _ in kept(source)] == [1]


@BATCHES
def test_the_worker_compacts_a_large_partition_on_spark_and_logs_its_progress(
        owner, compacted, settings, spark):
    settings.COMPACT_SPARK_BYTES, settings.COMPACT_SPARK_SPLIT = 1, 2  # every partition
    source, replica = compacted
    for n in range(4):
        produce(owner, source, [(b"a", b"%d" % n), (b"b", b"%d" % n), (b"c", None)])
    replicate(source, replica, 12)
    with capture_logs() as logs:
        assert compact_stream_task(source.pk) == 10
    assert kept(source) == [(9, b"a", b"3"), (10, b"b", b"3")]  # c's old tombstones gone
    seen = [e for e in logs if e["event"] == "compaction_progress"]
    # 6 ranges of 2 offsets, run as a task a core (workers/spark/compaction.py `per_task`).
    tasks = 3 * min(6, spark.defaultParallelism)
    assert seen and seen[-1]["percent"] == 100 and seen[-1]["tasks"] == tasks
    assert compaction_summary(source)["messagesremoved"] == 10


@BATCHES
def test_a_running_pass_shows_its_progress_until_its_notes_stop(owner, compacted):
    source, _ = compacted
    produce(owner, source, [(b"a", b"1")])
    store = store_for(source.cluster)
    pid = moving.pid_of(store, source.uuid, "clicks", 0)
    now = int(time.time() * 1000)
    store.note_compaction_progress(pid, 3, 12, now)
    summary = compaction_summary(source)
    assert summary["running"] == [{"topic": "clicks", "partition": 0, "percent": 25}]
    assert (summary["passes"], summary["lastrun"]) == (0, None)
    assert compaction_line(summary) == "no pass yet; running on clicks:0: 25%"
    store.note_compaction_progress(pid, 6, 12, now - RUNNING_STALE_MS)  # its worker died
    assert compaction_summary(source)["running"] == []


@BATCHES
def test_a_pass_that_died_half_way_still_counts_what_it_removed(owner, compacted):
    source, replica = compacted
    for n in range(4):
        produce(owner, source, [(b"a", b"%d" % n), (b"b", b"%d" % n)])
    replicate(source, replica, 8)
    store = store_for(source.cluster)
    pid = moving.pid_of(store, source.uuid, "clicks", 0)
    # What a Spark job's first task did before the job was killed: offsets [0, 4) rewritten.
    keys = store.compact_keys(pid, 0, 8)
    assert store.compact_rewrite(pid, 0, 4, keys, Rules(8, 0))[0] == 4
    summary = compaction_summary(source)
    assert (summary["passes"], summary["partitions"], summary["lastrun"]) == (0, 1, None)
    assert summary["messagesremoved"] == 4 and summary["bytesreclaimed"] > 0
    assert compaction_line(summary) == "no pass finished yet: 4 msgs removed, 36 bytes reclaimed"
    stream_compact(stream=source, now_ms=LATER)  # the pass run again, to its end
    summary = compaction_summary(source)
    assert (summary["passes"], summary["messagesremoved"]) == (1, 6)  # each counted once
    assert kept(source) == [(6, b"a", b"3"), (7, b"b", b"3")]


@BATCHES
def test_a_pass_in_the_worker_notes_its_progress_as_it_goes(owner, compacted, monkeypatch):
    source, replica = compacted
    for n in range(4):
        produce(owner, source, [(b"a", b"%d" % n), (b"b", b"%d" % n)])
    replicate(source, replica, 8)
    noted: list[tuple[int, int]] = []
    note = CompactionMethods.note_compaction_progress

    def noting(store, pid, done, total, now_ms):
        noted.append((done, total))
        note(store, pid, done, total, now_ms)

    monkeypatch.setattr(CompactionMethods, "PAGE_BATCHES", 1)  # a page a batch
    monkeypatch.setattr(compactstore, "NOTE_EVERY", 0)  # a note a page
    monkeypatch.setattr(CompactionMethods, "note_compaction_progress", noting)
    stream_compact(stream=source, now_ms=LATER)
    # 4 batches of 2 offsets, read twice (each key's latest, then the rewrite): 16 offsets.
    assert noted == [(2 * n, 16) for n in range(1, 9)]
    assert compaction_summary(source)["running"] == []  # the note goes with the pass's end


def test_compaction_on_a_row_store_is_refused_naming_the_conversion(owner, settings):
    settings.STORE_LAYOUT = "rows"  # a cluster whose store predates the batch layout
    stream = StreamFactory(cluster=ClusterFactory(name="rowscompact"), name="kv",
                           created_by=owner, tenant=owner.memberships.get().tenant)
    assert not store_for(stream.cluster).KEEPS_BATCHES
    with pytest.raises(InvalidInput, match=r"manage\.py convertstores"):
        stream_edit(actor=owner, stream=stream, compact=True)
    stream.refresh_from_db()
    assert not stream.compact


@pytest.mark.parametrize(("changes", "message"), [
    ({"compact": "yes"}, "-compact must be true or false"),
    ({"mincompactionlag": -1}, "-mincompactionlag must be a whole number of milliseconds"),
    ({"deleteretention": 1.5}, "-deleteretention must be a whole number"),
    ({"mincleanabledirtyratio": 2}, "-mincleanabledirtyratio must be a number from 0 to 1"),
])
def test_bad_compaction_settings_are_refused(owner, activity, changes, message):
    with pytest.raises(InvalidInput, match=message):
        stream_edit(actor=owner, stream=activity, **changes)


@BATCHES
def test_verification_compares_what_compacted_copies_stand_for_not_their_records(
        owner, compacted):
    source, replica = compacted
    produce(owner, source, [(b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"b", None)])
    replicate(source, replica, 4)
    stream_compact(stream=source, now_ms=LATER)  # the replica has not compacted yet
    assert kept(source) == [(2, b"a", b"2")] and len(kept(replica)) == 4
    link = ReplicaLink.objects.select_related("source__cluster", "replica__cluster").get()
    assert link_verify(link=link)["firstDifference"] is None
    # A real divergence: the replica's latest value of a is not its origin's.
    store = store_for(replica.cluster)
    store.truncate(replica.uuid, "clicks", 0, 2)
    store.append(replica.uuid, "clicks", [Record(b"evil", key=b"a", partition=0)],
                 origin=source.uuid)
    store.append(replica.uuid, "clicks", [Record(None, key=b"b", partition=0)],
                 origin=source.uuid)
    ReplicaLink.objects.filter(pk=link.pk).update(verified_upto={})  # verify it all again
    assert link_verify(link=link)["firstDifference"] == {
        "topic": "clicks", "partition": 0, "offset": 2}


@BATCHES
def test_the_message_browser_reads_past_the_gaps_compaction_leaves(owner, compacted):
    source, replica = compacted
    produce(owner, source, [(b"a", b"%d" % i) for i in range(1000)])
    produce(owner, source, [(b"b", b"last")])
    replicate(source, replica, 1001)
    stream_compact(stream=source, now_ms=LATER)
    for newest_first in (False, True):
        found = messages_browse(actor=owner, stream=source, q=BrowseQuery(
            topic="clicks", partition=0, newest_first=newest_first)).messages
        assert sorted((m.offset, m.value) for m in found) == [(999, b"999"), (1000, b"last")]
