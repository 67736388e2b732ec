"""Bulk jobs run for real: in this process on the shared local Spark session, and submitted
through a real Celery worker beside real gateway and replicator processes (autosetup's copy
step, the engine's large-backlog hand-off)."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time

import pytest

from replication.models import Job, ReplicaLink, ReplicaState, Stream
from replication.services import replica_add, replica_autosetup, replica_pause, upstream_add
from replication.services.jobs import copystream_start, diffstreams_start
from replication.stores import store_for
from tests.workers.conftest import start_gateways, wait_until
from tests.workers.test_replication import Producer, check, row_of
from workers.jobs import job_run

pytestmark = pytest.mark.django_db(transaction=True)
NY = "/mapr/newyork/activity"


def test_copystream_job_copies_and_records_its_progress(spark, owner, activity, clicks):
    produce = Producer(owner, activity)
    for _ in range(10):
        produce(2000)
    job = copystream_start(actor=owner, source_path=activity.path, destination_path=NY)
    assert job_run(job_id=job.pk) == Job.State.SUCCEEDED
    job.refresh_from_db()
    assert (job.messages_done, job.messages_total, job.percent) == (20_000, 20_000, 100)
    assert job.result["messages"] == 20_000 and job.bytes_done == job.result["bytes"] > 0
    assert job.started <= job.finished
    copy = Stream.objects.get(path=NY)
    report = check(activity, copy, ["clicks"], acknowledged=produce.acked)
    assert report.ok, report.summary()
    assert job_run(job_id=job.pk) == Job.State.SUCCEEDED  # a redelivery does nothing more


def test_diffstreams_job_reports_equal_streams(spark, owner, activity, clicks):
    Producer(owner, activity)(3000)
    job_run(job_id=copystream_start(actor=owner, source_path=activity.path,
                                    destination_path=NY).pk)
    job = diffstreams_start(actor=owner, source_path=activity.path, destination_path=NY)
    job_run(job_id=job.pk)
    job.refresh_from_db()
    assert job.state == Job.State.SUCCEEDED and job.result["equal"] is True
    assert job.result["compared"] == 3000 and job.percent == 100


def test_with_a_spark_master_the_job_goes_through_spark_submit(settings, owner, activity,
                                                                clicks):
    """SPARK_MASTER_URL set: the driver is spark-submit's process (here a local master), its
    progress and result read back from the JSON lines it prints."""
    settings.SPARK_MASTER_URL = "local[2]"
    produce = Producer(owner, activity)
    produce(4000)
    job = copystream_start(actor=owner, source_path=activity.path, destination_path=NY,
                           numthreads=1)
    assert job_run(job_id=job.pk) == Job.State.SUCCEEDED
    job.refresh_from_db()
    assert job.result["messages"] == 4000 and job.messages_done == job.messages_total == 4000
    report = check(activity, Stream.objects.get(path=NY), ["clicks"], acknowledged=produce.acked)
    assert report.ok, report.summary()


def test_a_job_whose_worker_died_is_found_and_run_to_the_end(settings, spark, owner, activity,
                                                              clicks):
    from datetime import timedelta

    from django.utils import timezone

    from replication.services.jobs import jobs_stale

    Producer(owner, activity)(1000)
    job = copystream_start(actor=owner, source_path=activity.path, destination_path=NY)
    # As a worker killed mid-job leaves it: RUNNING, its record no longer moving.
    Job.objects.filter(pk=job.pk).update(state=Job.State.RUNNING,
                                         updated=timezone.now() - timedelta(minutes=10))
    settings.JOB_STALE_SECONDS = 300
    assert jobs_stale() == [job.pk]
    assert job_run(job_id=job.pk) == Job.State.SUCCEEDED
    assert jobs_stale() == []


def test_a_job_whose_queued_task_was_lost_with_the_broker_is_found_within_a_minute(
        settings, owner, activity, clicks):
    """A Redis restarted empty loses the tasks queued in it: a job no worker took is enqueued
    again after JOB_QUEUED_SECONDS, long before a running job counts as stale."""
    from datetime import timedelta

    from django.utils import timezone

    from replication.services.jobs import jobs_stale

    settings.JOB_QUEUED_SECONDS, settings.JOB_STALE_SECONDS = 60, 300
    lost = copystream_start(actor=owner, source_path=activity.path, destination_path=NY)
    fresh = copystream_start(actor=owner, source_path=activity.path,
                             destination_path="/mapr/newyork/other")
    running = copystream_start(actor=owner, source_path=activity.path,
                               destination_path="/mapr/newyork/third")
    two_minutes_ago = timezone.now() - timedelta(minutes=2)
    Job.objects.filter(pk=lost.pk).update(updated=two_minutes_ago)
    Job.objects.filter(pk=running.pk).update(state=Job.State.RUNNING, updated=two_minutes_ago)
    assert jobs_stale() == [lost.pk]  # not the one just queued, nor the one still running
    assert fresh.state == Job.State.QUEUED


def test_a_failing_job_records_why(spark, owner, activity, clicks):
    Producer(owner, activity)(100)
    job = copystream_start(actor=owner, source_path=activity.path, destination_path=NY)
    Stream.objects.filter(path=NY).delete()  # gone before the job ran
    assert job_run(job_id=job.pk) == Job.State.FAILED
    job.refresh_from_db()
    assert "deleted" in job.error and job.finished is not None


@pytest.fixture
def gateways(engine, newyork, celery_worker):

    engine.env["CELERY_QUEUE"] = celery_worker  # where the replicator's jobs go
    start_gateways(engine, newyork, "gw1", "gw2")
    return engine


def test_autosetup_copies_through_a_job_then_replicates(gateways, owner, activity, clicks):
    produce = Producer(owner, activity)
    produce(5000)
    gateways.replicator()
    link = replica_autosetup(actor=owner, source=activity, replica=NY)
    replica = Stream.objects.get(path=NY)
    seen = []

    def state() -> str:
        row = row_of(activity, replica)
        seen.append((row["replicaState"], row["copyTableCompletionPercentage"]))
        return row["replicaState"]

    wait_until(lambda: state() == ReplicaState.REPLICATING, timeout=180, every=0.2)
    assert seen[0][0] == ReplicaState.COPY_IN_PROGRESS
    percentages = [p for s, p in seen if s == ReplicaState.COPY_IN_PROGRESS]
    assert percentages == sorted(percentages) and seen[-1][1] == 100
    job = Job.objects.get(link=link)
    assert job.state == Job.State.SUCCEEDED and job.result["messages"] == 5000
    produce(700)  # from here on, the gateways
    wait_until(lambda: check(activity, replica, ["clicks"]).ok, timeout=60, every=0.2)
    report = check(activity, replica, ["clicks"], acknowledged=produce.acked)
    assert report.ok, report.summary()


def test_a_large_backlog_is_handed_to_spark_and_back_without_gap_or_duplicate(
        gateways, owner, activity, activity_ny, clicks):
    hand_off_a_large_backlog(gateways, owner, activity, activity_ny)


def hand_off_a_large_backlog(gateways, owner, activity, activity_ny,  # type: ignore[no-untyped-def]
                             settle: float = 60) -> Job:
    """30,000 messages behind a paused link, resumed while more are produced: the replicator
    hands the backlog to a catch-up job, then takes the link back. Returns the (first) job.
    Also run on a standalone Spark cluster by tests/workers/spark/test_cluster.py, whose
    slower jobs (spark-submit, an executor started per job) may leave a second backlog past
    the threshold, so a second job: `settle` is how long that may take."""
    gateways.env["STREAMGATE_CATCHUP_THRESHOLD"] = "3000"
    gateways.replicator()
    replica_add(actor=owner, source=activity, replica=activity_ny, paused=True)
    upstream_add(actor=owner, replica=activity_ny, source=activity)
    produce = Producer(owner, activity)
    for _ in range(15):
        produce(2000)  # 10,000 a partition: past the threshold
    stop = threading.Event()

    def keep_producing() -> None:  # during the hand-off and after it
        while not stop.is_set():
            produce(50)
            time.sleep(0.05)

    writer = threading.Thread(target=keep_producing)
    from replication.services import replica_resume

    replica_resume(actor=owner, source=activity, replica=activity_ny)
    writer.start()
    try:
        wait_until(lambda: Job.objects.filter(kind=Job.Kind.CATCHUP).exists(), timeout=30)
        wait_until(lambda: first_catchup().state == Job.State.SUCCEEDED,
                   timeout=180, every=0.2)
    finally:
        stop.set()
        writer.join()
    job = first_catchup()
    assert job.requested_by is None and job.result["messages"] >= 30_000 - 3 * 3000
    wait_until(lambda: check(activity, activity_ny, ["clicks"]).ok, timeout=settle, every=0.2)
    report = check(activity, activity_ny, ["clicks"], acknowledged=produce.acked)
    assert report.ok, report.summary()
    link = ReplicaLink.objects.get(source=activity, replica=activity_ny)
    assert link.state == ReplicaState.REPLICATING
    replica_pause(actor=owner, source=activity, replica=activity_ny)
    return job


def first_catchup() -> Job:
    return Job.objects.filter(kind=Job.Kind.CATCHUP).earliest("pk")


def test_seed_004_with_its_copystream_step_through_the_command_line(
        live_server, gateways, owner, sanfrancisco, newyork):
    """Seed 004 as written, `streamgate` in place of maprcli and of `mapr copystream`:
    messages produced before the replica existed arrive by the copy, later ones by the
    gateways."""
    from tests.streamgate.test_cli import STREAMGATE, rows, token_for

    env = {**os.environ, "STREAMGATE_URL": live_server.url}

    def sg(token: str, command: str, stdin: str = "", timeout: float = 60):
        done = subprocess.run([str(STREAMGATE), *command.split()], input=stdin, text=True,
                              capture_output=True, timeout=timeout,
                              env={**env, "STREAMGATE_TOKEN": token})
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        return done

    alice = token_for(owner)
    for cluster in (sanfrancisco, newyork):
        store_for(cluster)  # as `cluster create` leaves it
    gateways.replicator()
    sg(alice, "stream create -path /mapr/sanfrancisco/activity -defaultpartitions 2")
    sg(alice, "produce -path /mapr/sanfrancisco/activity -topic clicks",
       stdin="".join(f"early {i}\n" for i in range(400)))

    sg(alice, f"stream create -path {NY} -copymetafrom /mapr/sanfrancisco/activity")
    sg(alice, f"stream replica add -path /mapr/sanfrancisco/activity -replica {NY} -paused true")
    [replica] = rows(sg(alice, "stream replica list -path /mapr/sanfrancisco/activity -json"))
    assert replica["replicaPath"] == NY and replica["paused"] is True
    sg(alice, f"stream upstream add -path {NY} -upstream /mapr/sanfrancisco/activity")
    [upstream] = rows(sg(alice, f"stream upstream list -path {NY} -json"))
    assert upstream["stream"] == "/mapr/sanfrancisco/activity"
    copied = sg(alice, f"copystream -src /mapr/sanfrancisco/activity -dst {NY}", timeout=300)
    assert "copied 400 messages" in copied.stdout
    sg(alice, f"stream replica resume -path mapr/sanfrancisco/activity -replica {NY}")
    sg(alice, "produce -path /mapr/sanfrancisco/activity -topic clicks",
       stdin="".join(f"late {i}\n" for i in range(100)))

    source = Stream.objects.get(path="/mapr/sanfrancisco/activity")
    replica_stream = Stream.objects.get(path=NY)
    wait_until(lambda: check(source, replica_stream, ["clicks"], id_header=None).ok,
               timeout=60, every=0.2)
    diff = sg(alice, f"diffstreams -src /mapr/sanfrancisco/activity -dst {NY} -json",
              timeout=300)
    [job] = json.loads(diff.stdout)["data"]
    assert job["result"]["equal"] is True and job["result"]["compared"] == 500


def test_copystream_on_a_terminal_shows_progress_until_done(live_server, settings, spark,
                                                            owner, activity, clicks):
    """The embedded default's path too: with tasks eager, the job runs on a thread of the
    portal's process (on its Spark session), not inside the request."""
    import pty

    from tests.streamgate.test_cli import STREAMGATE, token_for

    settings.CELERY_TASK_ALWAYS_EAGER = True
    Producer(owner, activity)(3000)
    leader, follower = pty.openpty()
    done = subprocess.run(
        [str(STREAMGATE), "copystream", "-src", activity.path, "-dst", NY],
        stdout=follower, stderr=subprocess.PIPE, timeout=120,
        env={**os.environ, "STREAMGATE_URL": live_server.url, "STREAMGATE_TOKEN":
             token_for(owner)})
    os.close(follower)
    screen = os.read(leader, 1 << 16).decode()
    os.close(leader)
    assert done.returncode == 0, done.stderr
    assert "\rcopystream job" in screen and "QUEUED 0%" in screen
    assert "SUCCEEDED 100% (3,000 of 3,000 messages" in screen
    assert "copied 3,000 messages" in screen
