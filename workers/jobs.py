"""Running a Job: its record becomes a Spark spec, Spark runs it (a session in this process in
local mode, spark-submit against SPARK_MASTER_URL), and progress flows back into the record,
the replica link it serves and the browser."""

from __future__ import annotations

import json
import subprocess
import threading
import time

import structlog
from django.conf import settings
from django.db import connection
from django.utils import timezone

from replication import placement
from replication.models import Job, ReplicaState, carried_topics
from replication.services.jobs import job_finished, publish_job_event
from replication.stores import store_for
from workers.compare import side
from workers.spark import Spec
from workers.spark.submit import PREFIX, submit_command, submit_environment

log = structlog.get_logger(__name__)
ENTRY = {Job.Kind.COPYSTREAM: "copystream_job.py", Job.Kind.CATCHUP: "copystream_job.py",
         Job.Kind.DIFFSTREAMS: "diffstreams_job.py"}
WRITE_EVERY = 0.5  # seconds between progress writes to the record


def job_run(*, job_id: int) -> str:
    """Run the job unless it already ended. Safe to run again after a crash, or twice at
    once: every copy chunk is idempotent (workers/spark/pg.py)."""
    job = Job.objects.select_related("source__cluster", "destination__cluster", "link").filter(
        pk=job_id).first()
    if job is None or not job.is_active:
        return job.state if job else "gone"
    if job.source is None or job.destination is None:
        return _end(job, Job.State.FAILED, error="its source or destination stream was deleted")
    job.state, job.started = Job.State.RUNNING, job.started or timezone.now()
    job.save(update_fields=["state", "started", "updated"])
    publish_job_event(job)
    try:
        result = _execute(job, _spec(job), _Writer(job))
    except Exception as error:
        log.warning("job_failed", job=job.pk, kind=job.kind, error=str(error))
        return _end(job, Job.State.FAILED, error=f"{type(error).__name__}: {error}"[:4000])
    return _end(job, Job.State.SUCCEEDED, result=result)


def _spec(job: Job) -> Spec:
    source, destination = job.source, job.destination
    topics = {t.name: (t.partitions, t.origin_uuid) for t in source.topics.all()}
    # A catch-up or a link's repair moves only what the link carries: never back to where a
    # topic comes from (invariant 3; a multi-master pair's own topics are not the source's).
    if job.kind == Job.Kind.CATCHUP or job.options.get("link"):
        kept = carried_topics(destination.uuid, {n: o for n, (_, o) in topics.items()})
        topics = {n: v for n, v in topics.items() if n in kept}
    for cluster in (source.cluster, destination.cluster):
        store_for(cluster)  # creates the store's database on first use
    if placement.view_of(destination.cluster.name) is not None:
        # Its topics placed on its store groups before the job plans (issue 33).
        for name, (count, _) in topics.items():
            store_for(destination.cluster).ensure_topic(destination.uuid, name, count)
    return Spec(
        side(source),
        side(destination),
        {name: count for name, (count, _) in topics.items()},
        link=str(job.link_id or ""),
        threads=job.options.get("numthreads"),
        repair=bool(job.options.get("repair")),
    )


def _execute(job: Job, spec: Spec, progress: _Writer) -> dict:
    if settings.SPARK_MASTER_URL:
        return _submit(job, spec, progress)
    from workers.spark import copystream, diffstreams, spark_context

    run = diffstreams if job.kind == Job.Kind.DIFFSTREAMS else copystream
    return run(spark_context(), spec, progress)


def _submit(job: Job, spec: Spec, progress: _Writer) -> dict:
    """spark-submit the job's entry file; its driver prints progress and the result as JSON
    lines (workers/spark/submit.py)."""
    argv = submit_command(ENTRY[job.kind], settings.SPARK_MASTER_URL)
    env = submit_environment(spec)  # the spec there, never in argv (ps shows argv to all)
    outcome: dict = {}
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env) as driver:
        for line in driver.stdout or ():
            if line.startswith(PREFIX):
                outcome = json.loads(line[len(PREFIX):])
                if outcome["kind"] == "progress":
                    progress(*outcome["figures"])
    if outcome.get("kind") == "result":
        return outcome["result"]
    raise RuntimeError(outcome.get("error") or f"spark-submit exited with {driver.returncode}")


class _Writer:
    """Progress into the job's record (and its link's copy percentage), at most every
    WRITE_EVERY seconds and always at 100%. Called from Spark's progress thread."""

    def __init__(self, job: Job) -> None:
        self.job, self.last, self.owner = job, 0.0, threading.current_thread()

    def __call__(self, done: int, total: int, done_bytes: int, total_bytes: int) -> None:
        now = time.monotonic()
        if now - self.last < WRITE_EVERY and done < total:
            return
        self.last = now
        job = self.job
        job.messages_done, job.messages_total = done, total
        job.bytes_done, job.bytes_total = done_bytes, total_bytes
        try:
            job.save(update_fields=["messages_done", "messages_total", "bytes_done",
                                    "bytes_total", "updated"])
            if job.link_id:
                type(job.link).objects.filter(
                    pk=job.link_id, state=ReplicaState.COPY_IN_PROGRESS
                ).update(copy_percentage=job.percent)
            publish_job_event(job)
        finally:
            if threading.current_thread() is not self.owner:
                connection.close()  # the progress thread's own: it must not outlive the job


def _end(job: Job, state: str, *, result: dict | None = None, error: str = "") -> str:
    job.state, job.finished, job.error = state, timezone.now(), error
    job.result = result or {}
    if state == Job.State.SUCCEEDED and job.kind != Job.Kind.DIFFSTREAMS:
        job.messages_done = job.messages_total
    # What the end means first (the link replicating again, a repaired replica verified), so
    # whoever sees the job ended sees its effect too; a crash in between leaves the job
    # active, to be run again (every step is idempotent).
    job_finished(job=job)
    job.save()
    publish_job_event(job)
    log.info("job_ended", job=job.pk, kind=job.kind, state=state)
    return state
