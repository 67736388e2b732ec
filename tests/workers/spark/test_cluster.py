"""The bulk jobs on a real standalone Spark cluster (workers.spark.standalone: a master and a
worker on loopback, started with pyspark's spark-class), submitted through SPARK_MASTER_URL as
compose.yaml runs them: spark-submit from the Celery side, the executors in the worker's JVM.
One cluster for the module; each job's application is found in the master's list and its
executors in the worker's, which proves the tasks ran there and not in the driver."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from replication.engine.factory import open_store
from replication.engine.store import Record
from replication.models import Job, Stream
from replication.services.jobs import copystream_start, diffstreams_start
from replication.stores import default_store_url, store_for, store_url
from tests.workers.conftest import wait_until
from tests.workers.spark.test_jobs import copied, corrupt
from tests.workers.test_jobs import NY, gateways, hand_off_a_large_backlog  # noqa: F401
from tests.workers.test_replication import check
from workers.jobs import job_run
from workers.spark import standalone

pytestmark = pytest.mark.django_db(transaction=True)
HERE = str(Path(__file__).resolve().parents[3]).encode()  # in our Spark processes' paths


@pytest.fixture(scope="module")
def cluster():
    with standalone.start(cores=2) as running:
        yield running


@pytest.fixture
def spark_master(cluster, settings, monkeypatch):
    """Jobs of this process and of Celery workers started after it go to the cluster."""
    if cluster.worker is None:  # a test before this one lost it
        cluster.start_worker()
    for name, value in cluster.client_environment.items():
        monkeypatch.setenv(name, value)
    settings.SPARK_MASTER_URL = cluster.master_url
    return cluster


@pytest.fixture
def celery_worker(spark_master, celery_worker):  # the workers' own, on the cluster
    return celery_worker


def applications(cluster) -> set[str]:
    state = cluster.state()
    return {app["id"] for app in state["activeapps"] + state["completedapps"]}


def run_on_cluster(cluster, job: Job) -> tuple[Job, str]:
    """Runs the job as a Celery worker does; returns it ended, and its Spark application."""
    before = applications(cluster)
    assert job_run(job_id=job.pk) == Job.State.SUCCEEDED, Job.objects.get(pk=job.pk).error
    (app,) = applications(cluster) - before
    assert_ran_on_the_worker(cluster, app)
    job.refresh_from_db()
    return job, app


def assert_ran_on_the_worker(cluster, app: str) -> None:
    executors = cluster.executors_of(app)
    assert executors, f"no executor of {app} on the worker: the driver ran the tasks itself"
    # The tasks ran in these executors: Spark counts them per executor, in its event log too,
    # but the worker launched each of them for this application alone.
    assert all(e["appid"] == app and e["appdesc"]["name"] == "streamgate" for e in executors)


# --- a password in a store URL appears on no command line ------------------------------------


class CommandLines(threading.Thread):
    """Reads every process's /proc/PID/cmdline while a job runs: which Spark processes it saw
    and any command line holding the secret."""

    KINDS = {"driver JVM": "org.apache.spark.deploy.SparkSubmit",
             "driver": "_job.py", "worker": "org.apache.spark.deploy.worker.Worker",
             "executor": "CoarseGrainedExecutorBackend", "python worker": "pyspark.daemon"}

    def __init__(self, secret: str) -> None:
        super().__init__(daemon=True)
        self.secret, self.seen, self.leaks = secret.encode(), set(), set()
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.05):
            for path in Path("/proc").glob("[0-9]*/cmdline"):
                try:
                    line = path.read_bytes()
                except OSError:  # gone meanwhile
                    continue
                if HERE in line:  # this checkout's processes, not another's Spark
                    self.seen |= {k for k, mark in self.KINDS.items() if mark.encode() in line}
                if self.secret in line:
                    self.leaks.add(line.replace(b"\0", b" ").decode(errors="replace"))

    def __enter__(self) -> CommandLines:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.join()


@pytest.fixture
def secret_stores(transactional_db, sanfrancisco, newyork):
    """Both clusters' stores reached as a PostgreSQL role with a password (the local server
    trusts loopback, so any password lets it in: what matters is where the URL travels)."""
    role, password = f"sg_spark_{uuid.uuid4().hex[:8]}", f"pw-{uuid.uuid4().hex}"
    admin = psycopg.connect(default_store_url("x").rsplit("/", 1)[0] + "/postgres",
                            autocommit=True)
    admin.execute(sql.SQL("CREATE ROLE {} LOGIN SUPERUSER PASSWORD {}").format(
        sql.Identifier(role), sql.Literal(password)))
    names = []
    for cluster in (sanfrancisco, newyork):
        url = default_store_url(f"{cluster.name}_secret")
        names.append(url.rsplit("/", 1)[1])
        cluster.store_url = url.replace("//postgres@", f"//{role}:{password}@", 1)
        assert password in cluster.store_url
        cluster.save()
    yield password
    for name in names:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            sql.Identifier(name)))
    admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
    admin.close()


def fill(stream: Stream, messages: int, batch: int = 5000) -> None:
    """Messages straight into the stream's store (the jobs read nothing else)."""
    store = store_for(stream.cluster)
    store.ensure_topic(stream.uuid, "clicks", 3)  # as the clicks fixture's topic has it
    for start in range(0, messages, batch):
        store.append(stream.uuid, "clicks", [
            Record(value=b"value %d " % i * 4, key=b"k%d" % (i % 7),
                   headers=(("id", b"%d" % i),)) for i in range(start, start + batch)
        ], origin=stream.uuid, producer="p1")


def test_copystream_and_diffstreams_with_repair_run_on_the_workers_executors_and_no_command_line_shows_a_password(  # noqa: E501
        spark_master, secret_stores, owner, activity, clicks):
    fill(activity, 20_000)
    with CommandLines(secret_stores) as copy_lines:
        job, _ = run_on_cluster(spark_master, copystream_start(
            actor=owner, source_path=activity.path, destination_path=NY))
    assert job.result["messages"] == 20_000
    copy = Stream.objects.get(path=NY)
    assert check(activity, copy, ["clicks"]).ok

    # One changed message and one partition missing its end: found, repaired, proven equal.
    dst_url = copy.cluster.store_url
    corrupt(dst_url, copy.uuid, "clicks", 1, 77)
    high = store_for(copy.cluster).watermarks(copy.uuid, "clicks")[2][1]
    store_for(copy.cluster).truncate(copy.uuid, "clicks", 2, high - 10)
    with CommandLines(secret_stores) as diff_lines:
        job, _ = run_on_cluster(spark_master, diffstreams_start(
            actor=owner, source_path=activity.path, destination_path=NY, repair=True))
    assert job.result["equal"] is False and job.result["differing"] == 2
    assert job.result["equalAfterRepair"] is True
    report = check(activity, copy, ["clicks"], id_header="id")
    assert report.ok, report.summary()

    for lines in (copy_lines, diff_lines):
        assert set(CommandLines.KINDS) <= lines.seen, lines.seen  # we looked while it ran
        assert lines.leaks == set()


# --- the catch-up hand-off, by the engine's processes and a Celery worker -----------------------


def test_a_large_backlog_is_handed_to_the_cluster_and_back(
        spark_master, gateways, owner, activity, activity_ny, clicks):  # noqa: F811
    before = applications(spark_master)
    job = hand_off_a_large_backlog(gateways, owner, activity, activity_ny, settle=240)
    assert job.kind == Job.Kind.CATCHUP
    apps = applications(spark_master) - before
    # One application per catch-up job: a job taking long (on 2 busy cores, a minute) leaves
    # a second backlog past the threshold, handed off again.
    assert 1 <= len(apps) == Job.objects.filter(kind=Job.Kind.CATCHUP).count()
    for app in apps:
        assert_ran_on_the_worker(spark_master, app)


# --- a worker killed -9 in the middle of a copy ----------------------------------------------


TOTAL = 240_000


def test_a_worker_killed_mid_copy_has_its_tasks_rerun_and_the_copy_ends_equal(
        spark_master, owner, activity, clicks):
    fill(activity, TOTAL)
    job = copystream_start(actor=owner, source_path=activity.path, destination_path=NY,
                           numthreads=1)  # one task, committing partition after partition
    replica = Stream.objects.get(path=NY)
    url = store_url(replica.cluster)
    destination, replica = open_store(url), replica.uuid
    killed_at: list[int] = []

    def kill_mid_copy() -> None:
        try:
            with psycopg.connect(url) as hold:
                wait_until(lambda: copied(destination, replica) > 0, timeout=180, every=0.01)
                # The copy's next chunk waits for this lock: however fast the copy, the kill
                # lands in its middle (unheld, 240,000 messages were all copied before the
                # worker died on a quiet machine).
                hold.execute("LOCK TABLE partitions IN EXCLUSIVE MODE")
                spark_master.kill_worker()  # the node lost: worker, executor, Python workers
                time.sleep(1)  # the driver notices its executor gone, the master its worker
            # Read once the lost attempt is over: a COMMIT it had sent lands after the kill,
            # once the lock is gone.
            time.sleep(2)
            killed_at.append(copied(destination, replica))
            spark_master.restart_worker()
        finally:
            destination.close()

    killer = threading.Thread(target=kill_mid_copy)
    killer.start()
    try:
        before = applications(spark_master)
        assert job_run(job_id=job.pk) == Job.State.SUCCEEDED, Job.objects.get(pk=job.pk).error
    finally:
        killer.join()
    assert killed_at and 0 < killed_at[0] < TOTAL, f"killed too late: {killed_at}"
    (app,) = applications(spark_master) - before
    assert_ran_on_the_worker(spark_master, app)  # the restarted worker ran the retry
    report = check(activity, Stream.objects.get(path=NY), ["clicks"], id_header="id")
    assert report.ok, report.summary()
    job.refresh_from_db()
    # The retry copied what the lost attempt had not committed, nothing twice.
    assert job.result["messages"] + killed_at[0] == TOTAL


# --- a cluster without a worker --------------------------------------------------------------


def test_a_job_with_no_executor_for_its_wait_fails_naming_why_and_frees_its_worker(
        spark_master, owner, activity, clicks, monkeypatch):
    """The soak's stuck catch-up: the only worker lost and not back, the driver waited for
    resources for ever, and the Celery worker with it. Now it gives up after the wait."""
    fill(activity, 1000)
    job = copystream_start(actor=owner, source_path=activity.path, destination_path=NY)
    monkeypatch.setenv("STREAMGATE_SPARK_EXECUTOR_WAIT", "5")
    spark_master.kill_worker()
    started = time.monotonic()
    assert job_run(job_id=job.pk) == Job.State.FAILED
    took = time.monotonic() - started
    job.refresh_from_db()
    assert "no Spark executor for 5 s" in job.error and spark_master.master_url in job.error
    assert took < 5 + 60, f"{took:.1f} s: the driver's start and the wait, no more"
    spark_master.start_worker()  # and the same job runs when a worker is back
    monkeypatch.delenv("STREAMGATE_SPARK_EXECUTOR_WAIT")  # executors start slowly when loaded
    job.state = Job.State.QUEUED
    job.save()
    assert job_run(job_id=job.pk) == Job.State.SUCCEEDED, Job.objects.get(pk=job.pk).error


# --- Spark called from a long-lived process ----------------------------------------------------


def test_spark_borrowed_by_a_long_lived_process_leaves_the_cluster_free_for_the_next_job(
        spark_master, owner, activity, clicks):
    """The soak's starved catch-ups: a failback's copy in the portal process kept its Spark
    application, and with it every core of the worker, for the life of the process. A process
    of its own (this one holds the tests' local context: one per process) borrows a context,
    runs a call on the cluster and lives on; meanwhile the next job gets the cores."""
    import subprocess
    import sys

    script = ("import sys, time\n"
              "from workers.spark.session import borrowed_context\n"
              "with borrowed_context(sys.argv[1]) as spark:\n"
              "    assert spark.parallelize(range(8), 2).map(lambda x: x).count() == 8\n"
              "print('called', flush=True)\n"
              "time.sleep(300)\n")
    before = applications(spark_master)
    portal = subprocess.Popen([sys.executable, "-c", script, spark_master.master_url],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert portal.stdout is not None and portal.stdout.readline().strip() == "called"
        (app,) = applications(spark_master) - before
        assert_ran_on_the_worker(spark_master, app)
        wait_until(lambda: not spark_master.state()["activeapps"], timeout=30)
        fill(activity, 1000)
        job = copystream_start(actor=owner, source_path=activity.path, destination_path=NY)
        assert job_run(job_id=job.pk) == Job.State.SUCCEEDED, Job.objects.get(pk=job.pk).error
    finally:
        portal.kill()
        portal.wait()
