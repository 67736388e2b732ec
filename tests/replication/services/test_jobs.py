"""Who may start copystream and diffstreams, what they create, and refusals that change
nothing; over the services, /rest (maprcli's envelope) and /api/v1 (DRF errors)."""

from __future__ import annotations

import pytest

from replication.errors import InvalidInput, NotFound, PermissionDenied
from replication.models import Job, Stream, Topic
from replication.services import stream_edit, topic_create
from replication.services.jobs import copystream_start, diffstreams_start
from tests.factories import StreamFactory

NY = "/mapr/newyork/activity"


@pytest.fixture
def clicks(owner, activity, newyork):
    return topic_create(actor=owner, stream=activity, name="clicks", partitions=3)


def test_copystream_creates_the_destination_with_the_sources_metadata(owner, activity, clicks):
    stream_edit(actor=owner, stream=activity, ttl=3600, defaultpartitions=5)
    job = copystream_start(actor=owner, source_path=activity.path, destination_path=NY,
                           numthreads=4)
    copy = Stream.objects.get(path=NY)
    assert (copy.ttl, copy.defaultpartitions, copy.tenant) == (3600, 5, activity.tenant)
    topic = copy.topics.get(name="clicks")
    # Not a replica: the copy's topics originate in the copy (one origin per topic).
    assert topic.partitions == 3 and topic.origin_uuid == copy.uuid
    assert (job.kind, job.state, job.options) == ("copystream", "QUEUED", {"numthreads": 4})
    assert (job.source, job.destination, job.requested_by) == (activity, copy, owner)


def test_copystream_into_a_replica_keeps_the_topics_origin(owner, activity, activity_ny, clicks):
    from replication.services import replica_add

    replica_add(actor=owner, source=activity, replica=activity_ny, paused=True)
    copystream_start(actor=owner, source_path=activity.path, destination_path=NY)
    assert activity_ny.topics.get(name="clicks").origin_uuid == activity.uuid


def test_copystream_needs_consumeperm_or_copyperm_on_the_source(member, activity, clicks):
    with pytest.raises(PermissionDenied, match="consumeperm or copyperm"):
        copystream_start(actor=member, source_path=activity.path, destination_path=NY)
    assert not Stream.objects.filter(path=NY).exists() and not Job.objects.exists()


def test_copystream_into_an_existing_stream_needs_copyperm_there(owner, member, activity,
                                                                 activity_ny, clicks):
    stream_edit(actor=owner, stream=activity, consumeperm="u:alice | u:bob")
    stream_edit(actor=owner, stream=activity_ny, produceperm="u:bob", consumeperm="u:bob")
    with pytest.raises(PermissionDenied, match="needs copyperm, or produceperm, consumeperm"):
        copystream_start(actor=member, source_path=activity.path, destination_path=NY)
    stream_edit(actor=owner, stream=activity_ny, topicperm="u:bob")  # all three now
    copystream_start(actor=member, source_path=activity.path, destination_path=NY)


@pytest.mark.parametrize("threads", [0, 65, -1])
def test_numthreads_out_of_range_is_refused_and_changes_nothing(owner, activity, clicks,
                                                                threads):
    with pytest.raises(InvalidInput, match="numthreads"):
        copystream_start(actor=owner, source_path=activity.path, destination_path=NY,
                         numthreads=threads)
    assert not Stream.objects.filter(path=NY).exists() and not Job.objects.exists()


def test_copy_or_diff_of_a_stream_with_itself_is_refused(owner, activity, clicks):
    with pytest.raises(InvalidInput, match="both"):
        copystream_start(actor=owner, source_path=activity.path, destination_path=activity.path)
    with pytest.raises(InvalidInput, match="both"):
        diffstreams_start(actor=owner, source_path=activity.path,
                          destination_path=activity.path)


def test_another_tenants_stream_reads_as_missing(outsider, activity, clicks, newyork):
    with pytest.raises(NotFound, match="does not exist"):
        copystream_start(actor=outsider, source_path=activity.path, destination_path=NY)
    mine = StreamFactory(cluster=newyork, name="mine", created_by=outsider)
    with pytest.raises(NotFound, match="does not exist"):
        diffstreams_start(actor=outsider, source_path=mine.path, destination_path=activity.path)
    assert not Job.objects.exists()


def test_diffstreams_repair_needs_write_permission_on_the_destination(owner, member, activity,
                                                                      activity_ny):
    for stream in (activity, activity_ny):
        stream_edit(actor=owner, stream=stream, consumeperm="u:alice | u:bob")
    job = diffstreams_start(actor=member, source_path=activity.path, destination_path=NY)
    assert job.options == {"repair": False}
    with pytest.raises(PermissionDenied, match="copy messages into"):
        diffstreams_start(actor=member, source_path=activity.path, destination_path=NY,
                          repair=True)


def test_topic_conflict_in_the_destination_is_refused(owner, activity, activity_ny, clicks):
    """The destination's own `clicks` has another origin; nothing changes."""
    from replication.services import replica_add, upstream_add

    replica_add(actor=owner, source=activity_ny, replica=activity)
    upstream_add(actor=owner, replica=activity, source=activity_ny)
    topic_create(actor=owner, stream=activity_ny, name="views")
    before = list(Topic.objects.order_by("pk").values())
    # activity now holds views (from activity_ny) and clicks (its own): copying activity
    # into activity_ny would give activity_ny's views nothing new, but clicks a second origin
    # path back to activity; the copy gives clicks to activity_ny as its own origin, which
    # the agreed link activity_ny -> activity would carry back: refused.
    with pytest.raises(Exception, match="origin"):
        copystream_start(actor=owner, source_path=activity.path, destination_path=NY)
    assert list(Topic.objects.order_by("pk").values()) == before
    assert not Job.objects.exists()


# --- /rest and /api/v1 ---------------------------------------------------------------------------


def test_rest_copystream_answers_with_the_job_and_job_info_follows_it(api, owner, activity,
                                                                      clicks):
    client = api(owner)
    response = client.post("/rest/copystream", {"src": activity.path, "dst": NY,
                                                "numthreads": "2"})
    [row] = response.json()["data"]
    assert row["kind"] == "copystream" and row["state"] == "QUEUED" and row["percent"] == 0
    [info] = client.get(f"/rest/job/info?id={row['id']}").json()["data"]
    assert info["options"] == {"numthreads": 2} and info["requestedBy"] == "alice"
    listed = client.get("/rest/job/list?kind=copystream").json()["data"]
    assert [r["id"] for r in listed] == [row["id"]]


def test_rest_refusals_use_the_maprcli_error_shape(api, owner, outsider, activity, clicks):
    body = api(owner).post("/rest/copystream", {"src": activity.path, "dst": NY,
                                                "numthreads": "many"}).json()
    assert body["status"] == "ERROR" and "numthreads" in body["errors"][0]["desc"]
    body = api(owner).post("/rest/copystream", {"src": activity.path, "dst": NY,
                                                "mapreduce": "true"}).json()
    assert body["status"] == "ERROR" and "Spark" in body["errors"][0]["desc"]
    job = copystream_start(actor=owner, source_path=activity.path, destination_path=NY)
    body = api(outsider).get(f"/rest/job/info?id={job.pk}").json()
    assert body["status"] == "ERROR" and "does not exist" in body["errors"][0]["desc"]
    assert api(outsider).get("/rest/job/list").json()["data"] == []


def test_api_starts_and_lists_jobs_within_the_tenant(api, owner, outsider, activity, clicks):
    response = api(owner).post("/api/v1/jobs/copystream/", {"src": activity.path, "dst": NY},
                               format="json")
    assert response.status_code == 202, response.json()
    job = response.json()
    assert job["state"] == "QUEUED" and job["requested_by"] == "alice"
    assert api(owner).get(f"/api/v1/jobs/{job['id']}/").json()["source_path"] == activity.path
    assert api(outsider).get(f"/api/v1/jobs/{job['id']}/").status_code == 404
    assert api(outsider).get("/api/v1/jobs/").json()["results"] == []
    bad = api(owner).post("/api/v1/jobs/diffstreams/", {"src": activity.path}, format="json")
    assert bad.status_code == 400 and "dst" in bad.json()
    stranger = api(outsider).post("/api/v1/jobs/diffstreams/",
                                  {"src": activity.path, "dst": NY}, format="json")
    assert stranger.status_code == 404
