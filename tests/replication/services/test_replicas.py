import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from replication.errors import (
    AlreadyExists,
    Conflict,
    InvalidInput,
    NotFound,
    NotSupported,
    PermissionDenied,
)
from replication.models import Job, ReplicaLink, ReplicaState, Stream, SyncMode, Topic, Upstream
from replication.services import (
    replica_add,
    replica_autosetup,
    replica_edit,
    replica_pause,
    replica_remove,
    replica_resume,
    topic_create,
    upstream_add,
    upstream_remove,
)
from tests.factories import ClusterFactory, StreamFactory


@pytest.fixture
def link(owner, activity, activity_ny):
    return replica_add(actor=owner, source=activity, replica=activity_ny, paused=True)


def test_a_registered_replica_waits_for_its_upstream(link):
    assert link.replica_state() == ReplicaState.WAITING_FOR_UPSTREAM
    assert not ReplicaLink.objects.agreed().exists()


def test_the_upstream_completes_the_two_way_agreement(owner, link, activity, activity_ny):
    upstream_add(actor=owner, replica=activity_ny, source=activity)
    assert link.replica_state() == ReplicaState.REPLICATING
    assert list(ReplicaLink.objects.agreed()) == [link]


def test_an_upstream_alone_is_no_agreement(owner, activity, activity_ny):
    upstream_add(actor=owner, replica=activity_ny, source=activity)
    assert not ReplicaLink.objects.agreed().exists()


def test_removing_the_upstream_withdraws_the_agreement(owner, link, activity, activity_ny):
    upstream_add(actor=owner, replica=activity_ny, source=activity)
    upstream_remove(actor=owner, replica=activity_ny, source=activity)
    assert link.replica_state() == ReplicaState.WAITING_FOR_UPSTREAM


@pytest.mark.parametrize("action", [replica_pause, replica_resume, replica_remove])
def test_link_actions_need_adminperm_on_the_source(member, link, action):
    with pytest.raises(PermissionDenied, match="adminperm"):
        action(actor=member, source=link.source, replica=link.replica)
    assert ReplicaLink.objects.get(pk=link.pk).paused


def test_replica_add_and_edit_need_adminperm_on_the_source(member, link, activity, activity_ny):
    with pytest.raises(PermissionDenied):
        replica_edit(actor=member, source=activity, replica=activity_ny, throttle=True)
    other = StreamFactory(created_by=member, cluster=activity_ny.cluster)
    with pytest.raises(PermissionDenied):
        replica_add(actor=member, source=activity, replica=other)
    assert ReplicaLink.objects.count() == 1


def test_upstream_add_needs_adminperm_on_the_replica(member, link, activity, activity_ny):
    with pytest.raises(PermissionDenied, match="add an upstream"):
        upstream_add(actor=member, replica=activity_ny, source=activity)
    assert not Upstream.objects.exists()


def test_a_stream_is_no_replica_or_upstream_of_itself(owner, activity):
    with pytest.raises(InvalidInput, match="itself"):
        replica_add(actor=owner, source=activity, replica=activity)
    with pytest.raises(InvalidInput, match="itself"):
        upstream_add(actor=owner, replica=activity, source=activity)


def test_a_replica_is_registered_once(owner, link, activity, activity_ny):
    with pytest.raises(AlreadyExists):
        replica_add(actor=owner, source=activity, replica=activity_ny)


def test_pause_and_resume_toggle_the_link(owner, link, activity, activity_ny):
    assert not replica_resume(actor=owner, source=activity, replica=activity_ny).paused
    assert replica_pause(actor=owner, source=activity, replica=activity_ny).paused


def test_edit_changes_options_and_refuses_newreplica(owner, link, activity, activity_ny):
    edited = replica_edit(actor=owner, source=activity, replica=activity_ny, throttle=True,
                          networkcompression="off")
    assert (edited.throttle, edited.networkcompression) == (True, "off")
    with pytest.raises(NotSupported, match="newreplica"):
        replica_edit(actor=owner, source=activity, replica=activity_ny, newreplica="/mapr/x/y")
    with pytest.raises(InvalidInput, match="networkcompression"):
        replica_edit(actor=owner, source=activity, replica=activity_ny,
                     networkcompression="brotli")


def test_changes_that_start_or_change_a_link_wake_the_source_after_commit(
    owner, activity, activity_ny, monkeypatch, django_capture_on_commit_callbacks,
):
    woken: list[str] = []
    monkeypatch.setattr("replication.services.wakeups._wake", woken.extend)
    source, replica = activity, activity_ny
    steps = [
        lambda: replica_add(actor=owner, source=source, replica=replica),
        lambda: upstream_add(actor=owner, replica=replica, source=source),
        lambda: replica_edit(actor=owner, source=source, replica=replica, throttle=True),
        lambda: replica_pause(actor=owner, source=source, replica=replica),  # no wake needed
        lambda: replica_resume(actor=owner, source=source, replica=replica),
    ]
    for step, wakes in zip(steps, (1, 1, 1, 0, 1), strict=True):
        with django_capture_on_commit_callbacks(execute=True):
            step()
        # Link changes also send a marked wake-up (`links:<uuid>`) that refreshes the
        # replicator's link cache; the plain one is what starts data moving.
        assert [w for w in woken if not w.startswith("links:")] == [str(source.uuid)] * wakes
        woken.clear()
    with django_capture_on_commit_callbacks(execute=True):  # paused: nothing to move yet
        replica_add(actor=owner, source=replica, replica=source, paused=True)
    assert [w for w in woken if not w.startswith("links:")] == []


def test_a_synchronous_replica_is_accepted_and_starts_asynchronous(owner, link, activity,
                                                                   activity_ny):
    # Paused and without its upstream, producers cannot wait for it: async until it qualifies
    # (tests/replication/services/test_sync.py follows it to sync and back).
    edited = replica_edit(actor=owner, source=activity, replica=activity_ny, synchronous=True)
    assert (edited.synchronous, edited.mode) == (True, SyncMode.ASYNC)
    reverse = replica_add(actor=owner, source=activity_ny, replica=activity, synchronous=True)
    assert (reverse.synchronous, reverse.mode) == (True, SyncMode.ASYNC)


def test_networkcompression_is_off_whatever_the_streams_compression(link, activity):
    assert activity.compression == "lz4" and link.networkcompression == "off"


@pytest.mark.parametrize("value", ["lz4", "lzf", "zlib"])
def test_network_compression_is_refused_with_the_reason(owner, link, activity, activity_ny,
                                                        value):
    with pytest.raises(NotSupported, match="PostgreSQL's protocol does not compress; give "
                                           "-networkcompression off"):
        replica_edit(actor=owner, source=activity, replica=activity_ny, networkcompression=value)
    with pytest.raises(NotSupported, match="does not compress"):
        replica_add(actor=owner, source=activity_ny, replica=activity, networkcompression=value)


def test_network_encryption_needs_tls_on_both_stores(owner, link, activity, activity_ny):
    with pytest.raises(NotSupported, match="the message store of cluster newyork and "
                                           "sanfrancisco does not require it: an operator adds "
                                           "sslmode=verify-full"):
        replica_edit(actor=owner, source=activity, replica=activity_ny, networkencryption=True)
    activity.cluster.store_url = "postgresql://u@sf.example/store?sslmode=verify-full"
    activity.cluster.save()
    with pytest.raises(NotSupported, match="cluster newyork does not"):
        replica_edit(actor=owner, source=activity, replica=activity_ny, networkencryption=True)
    activity_ny.cluster.store_url = "postgresql://u@ny.example/store?sslmode=prefer"
    activity_ny.cluster.save()  # prefer falls back to plaintext: not enough
    with pytest.raises(NotSupported, match="cluster newyork does not"):
        replica_edit(actor=owner, source=activity, replica=activity_ny, networkencryption=True)
    activity_ny.cluster.store_url = "postgresql://u@ny.example/store?sslmode=require"
    activity_ny.cluster.save()
    edited = replica_edit(actor=owner, source=activity, replica=activity_ny,
                          networkencryption=True)
    assert edited.networkencryption is True


def test_actions_on_an_unregistered_replica_are_not_found(owner, activity, activity_ny):
    with pytest.raises(NotFound, match="not a replica"):
        replica_resume(actor=owner, source=activity, replica=activity_ny)


def past_the_limit(owner, connect) -> Stream:  # type: ignore[no-untyped-def]
    """64 new streams (on a cluster "far"), each passed to `connect`; then a 65th, returned
    unconnected: one past every 64-stream limit."""
    cluster = ClusterFactory(name="far")
    for _ in range(64):
        connect(StreamFactory(cluster=cluster, created_by=owner))
    return StreamFactory(cluster=cluster, created_by=owner)


def test_a_stream_has_at_most_64_replicas(owner, activity, settings):
    extra = past_the_limit(owner, lambda s: replica_add(actor=owner, source=activity, replica=s))
    with pytest.raises(Conflict, match="64 replicas"):
        replica_add(actor=owner, source=activity, replica=extra)
    assert activity.replica_links.count() == 64
    assert sorted(activity.replica_links.values_list("idx", flat=True)) == list(range(1, 65))


def test_a_replica_has_at_most_64_upstreams(owner, activity_ny):
    extra = past_the_limit(owner, lambda s: upstream_add(actor=owner, replica=activity_ny,
                                                         source=s))
    with pytest.raises(Conflict, match="64 upstreams"):
        upstream_add(actor=owner, replica=activity_ny, source=extra)
    assert activity_ny.upstreams.count() == 64


def test_a_replica_receives_from_at_most_64_sources(owner, activity_ny):
    extra = past_the_limit(owner, lambda s: replica_add(actor=owner, source=s,
                                                        replica=activity_ny))
    with pytest.raises(Conflict, match="64 sources"):
        replica_add(actor=owner, source=extra, replica=activity_ny)


def test_two_origins_of_one_topic_name_never_feed_one_replica(owner, activity, activity_ny):
    topic_create(actor=owner, stream=activity, name="clicks")
    topic_create(actor=owner, stream=activity_ny, name="clicks")
    with pytest.raises(Conflict, match="topic 'clicks'"):
        replica_add(actor=owner, source=activity, replica=activity_ny)
    with pytest.raises(Conflict, match="topic 'clicks'"):
        upstream_add(actor=owner, replica=activity_ny, source=activity)
    assert not ReplicaLink.objects.exists() and not Upstream.objects.exists()


def test_a_new_topic_may_not_clash_downstream(owner, activity, activity_ny):
    secondary = StreamFactory(cluster=activity_ny.cluster, name="secondary", created_by=owner)
    for source in (activity, activity_ny):
        replica_add(actor=owner, source=source, replica=secondary)
        upstream_add(actor=owner, replica=secondary, source=source)
    topic_create(actor=owner, stream=activity, name="clicks")
    with pytest.raises(Conflict, match="topic 'clicks'"):
        topic_create(actor=owner, stream=activity_ny, name="clicks")
    assert not Topic.objects.filter(stream=activity_ny).exists()


def test_multimaster_pair_with_distinct_topics_is_allowed(owner, activity, activity_ny):
    topic_create(actor=owner, stream=activity, name="sf-clicks")
    topic_create(actor=owner, stream=activity_ny, name="ny-clicks")
    for source, replica in ((activity, activity_ny), (activity_ny, activity)):
        replica_add(actor=owner, source=source, replica=replica)
        upstream_add(actor=owner, replica=replica, source=source)
    for stream in (activity, activity_ny):
        assert set(stream.topics.values_list("name", flat=True)) == {"sf-clicks", "ny-clicks"}


def test_a_ring_refuses_a_topic_name_taken_at_another_origin(owner, activity, activity_ny):
    third = StreamFactory(cluster=activity.cluster, name="third", created_by=owner)
    topic_create(actor=owner, stream=activity, name="orders")
    topic_create(actor=owner, stream=third, name="orders")
    replica_add(actor=owner, source=activity, replica=activity_ny)
    with pytest.raises(Conflict, match="topic 'orders'"):
        replica_add(actor=owner, source=activity_ny, replica=third)
    assert not ReplicaLink.objects.filter(source=activity_ny).exists()


def test_a_ring_carries_each_topic_from_its_one_origin(owner, activity, activity_ny):
    third = StreamFactory(cluster=activity.cluster, name="third", created_by=owner)
    for source, replica in [(activity, activity_ny), (activity_ny, third), (third, activity)]:
        replica_add(actor=owner, source=source, replica=replica)
        upstream_add(actor=owner, replica=replica, source=source)
    topic_create(actor=owner, stream=activity, name="orders")
    assert third.topics.get(name="orders").origin_uuid == activity.uuid
    with pytest.raises(AlreadyExists):
        topic_create(actor=owner, stream=third, name="orders")


def test_topics_reach_replicas_only_with_the_agreement(owner, link, activity, activity_ny):
    topic_create(actor=owner, stream=activity, name="clicks", partitions=3)
    assert not activity_ny.topics.exists()
    upstream_add(actor=owner, replica=activity_ny, source=activity)
    copy = activity_ny.topics.get(name="clicks")
    assert (copy.partitions, copy.origin_uuid) == (3, activity.uuid)


def test_propagation_costs_a_bounded_number_of_queries(owner, link, activity, activity_ny):
    upstream_add(actor=owner, replica=activity_ny, source=activity)
    for n in range(20):
        topic_create(actor=owner, stream=activity, name=f"t{n}")
    with CaptureQueriesContext(connection) as queries:
        topic_create(actor=owner, stream=activity, name="last")
    assert len(queries) < 40


def test_autosetup_refuses_an_existing_replica(owner, activity, activity_ny):
    with pytest.raises(AlreadyExists, match="autosetup creates the replica itself"):
        replica_autosetup(actor=owner, source=activity, replica=activity_ny.path)


def test_autosetup_sets_up_both_ways_and_hands_the_copy_to_a_job(owner, activity, newyork):
    link = replica_autosetup(actor=owner, source=activity, replica="/mapr/newyork/activity",
                             multimaster=True)
    replica = Stream.objects.get(path="/mapr/newyork/activity")
    link.refresh_from_db()
    assert link.replica == replica and not link.paused
    assert link.replica_state() == ReplicaState.COPY_IN_PROGRESS  # until the copy job ends
    assert ReplicaLink.objects.filter(source=replica, replica=activity).exists()
    assert Upstream.objects.filter(replica=activity, source=replica).exists()
    job = Job.objects.get(link=link)
    assert (job.kind, job.state, job.options) == (Job.Kind.COPYSTREAM, Job.State.QUEUED,
                                                  {"autosetup": True})
    assert not ReplicaLink.objects.moving().filter(pk=link.pk).exists()  # gateways wait


def test_autosetup_failing_midway_leaves_nothing(owner, activity, newyork):
    with pytest.raises((InvalidInput, NotSupported)):  # step 2 refuses, after step 1 ran
        replica_autosetup(actor=owner, source=activity, replica="/mapr/newyork/activity",
                          networkcompression="brotli")
    assert not Stream.objects.filter(path="/mapr/newyork/activity").exists()
    assert not ReplicaLink.objects.exists() and not Job.objects.exists()


def test_autosetup_needs_adminperm_on_the_source(member, activity, newyork):
    with pytest.raises(PermissionDenied):
        replica_autosetup(actor=member, source=activity, replica="/mapr/newyork/activity")
