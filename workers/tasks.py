"""Celery tasks: each takes ids, loads, calls one service, and is safe to run twice."""

from __future__ import annotations

import threading
from typing import Any

import structlog
from celery import shared_task
from django.conf import settings
from django.db import connection
from django.db.models import Count

from operations.throughput import throughput_record
from replication.lag_history import gateways_record, lag_record
from replication.models import Cluster, Stream
from replication.services.compaction import compacted_streams, stream_compact
from replication.services.jobs import jobs_stale
from replication.services.partitionmove import moves_recover
from replication.services.purge import stream_expire, streams_to_expire
from replication.services.rebalance import rebalance_run, rebalances_stale
from replication.services.verify import links_verify_due
from replication.transport import GatewayId
from workers.compaction import SparkPasses
from workers.moves import spark_bulk
from workers.replication.applier import batch_serve

log = structlog.get_logger(__name__)


@shared_task(name="workers.tasks.expire_stream_task", acks_late=True)
def expire_stream_task(stream_id: int) -> int:
    stream = Stream.objects.select_related("cluster").filter(pk=stream_id).first()
    if stream is None:
        return 0  # deleted since it was queued: nothing left to expire
    deleted = stream_expire(stream=stream)
    if deleted:
        log.info("retention", stream=stream.path, deleted=deleted)
    return deleted


@shared_task(name="workers.tasks.expire_messages_task")
def expire_messages_task() -> int:
    """Beat's entry: one expire task per stream with a ttl, so a big stream delays no other."""
    ids = streams_to_expire()
    for stream_id in ids:
        expire_stream_task.delay(stream_id)
    return len(ids)


@shared_task(name="workers.tasks.compact_stream_task", acks_late=True)
def compact_stream_task(stream_id: int) -> int:
    """One compaction pass over a stream (replication/services/compaction.py), its large
    partitions on Spark; safe to run twice: a second pass finds nothing more to remove."""
    stream = Stream.objects.select_related("cluster").filter(pk=stream_id).first()
    if stream is None:
        return 0  # deleted since it was queued
    # Large partitions' passes run on Spark (workers/compaction.py), their progress noted.
    done = stream_compact(stream=stream, passes=SparkPasses.from_settings(stream.path))
    if done.removed or done.skipped:
        log.info("compaction", stream=stream.path, partitions=done.partitions,
                 removed=done.removed, reclaimed=done.reclaimed, skipped=done.skipped)
    return done.removed


@shared_task(name="workers.tasks.compact_streams_task")
def compact_streams_task() -> int:
    """Beat's entry: one compaction task per stream with a compacted topic, so a big stream
    delays no other."""
    ids = list(compacted_streams().values_list("pk", flat=True))
    for stream_id in ids:
        compact_stream_task.delay(stream_id)
    return len(ids)


@shared_task(name="workers.tasks.apply_batch_task", acks_late=True, ignore_result=True)
def apply_batch_task(
    link_id: int, topic: str, partition: int, start: int, end: int, *, gateway: str = "",
    ticket: str = "", reply_to: str = "",
) -> int:
    """A gateway applies [start, end) of one partition to a replica (workers/replication/
    applier.py); the
    replicator sends its batches on the gateway's own list instead, except in embedded mode,
    where this task runs them eagerly. Safe to run any number of times, anywhere."""
    return batch_serve(link_id=link_id, topic=topic, partition=partition, start=start, end=end,
                       gateway=gateway, tickets=[ticket] if ticket else [], reply_to=reply_to)


@shared_task(name="workers.tasks.record_lag_task", ignore_result=True)
def record_lag_task() -> int:
    """Beat's entry: one sample of every agreed link's lag and of the gateways' counters, for
    the portal's charts and throughput (replication/lag_history.py). A missed run only leaves
    a gap in a chart."""
    gateways_record()
    sampled = lag_record()
    throughput_record()  # every 30 s of these runs (operations/throughput.py)
    return sampled


@shared_task(name="workers.tasks.verify_links_task", ignore_result=True)
def verify_links_task() -> int:
    """Beat's entry: verify the agreed links whose interval has passed, incrementally
    (replication/services/verify.py); a divergence becomes an alarm at the next evaluation."""
    return links_verify_due()


@shared_task(name="workers.tasks.run_job_task", acks_late=True, ignore_result=True)
def run_job_task(job_id: int) -> str:
    """Runs a copystream, diffstreams or catch-up job; a redelivery (its worker died) runs it
    again, which leaves the destination exactly as one run would."""
    from workers.jobs import job_run  # here, not at start-up: workers.jobs loads PySpark

    return job_run(job_id=job_id)


@shared_task(name="workers.tasks.resume_jobs_task")
def resume_jobs_task() -> int:
    """Beat's safety net: an active job, or rebalance, drain or move run, whose record
    stopped moving lost its worker."""
    stale, runs = jobs_stale(), rebalances_stale()
    for job_id in stale:
        job_enqueue(job_id)
    for run_id in runs:
        rebalance_enqueue(run_id)
    return len(stale) + len(runs)


@shared_task(name="workers.tasks.rebalance_task", acks_late=True, ignore_result=True)
def rebalance_task(rebalance_id: int) -> str:
    """Runs a store group rebalance or drain; a redelivery (its worker died) goes on from the
    first move not done."""
    return rebalance_run(rebalance_id=rebalance_id, bulk=spark_bulk)


@shared_task(name="workers.tasks.recover_moves_task")
def recover_moves_task() -> int:
    """Beat's sweep: partitions whose move died between its cut-over and its switch take
    writes again at their source (replication/services/partitionmove.py moves_recover)."""
    clusters = Cluster.objects.annotate(groups=Count("store_groups")).filter(groups__gte=2)
    return sum(moves_recover(cluster) for cluster in clusters)


def job_enqueue(job_id: int) -> None:
    _in_background(run_job_task, f"job-{job_id}", job_id)


def rebalance_enqueue(rebalance_id: int) -> None:
    _in_background(rebalance_task, f"rebalance-{rebalance_id}", rebalance_id)


def _in_background(task: Any, name: str, *args: Any) -> None:
    """Celery in production; a thread in embedded mode, where tasks would otherwise run
    eagerly inside the request that asked for the work."""
    def run_here() -> None:
        try:
            task(*args)
        finally:
            connection.close()  # the thread's own; nothing else will close it

    if settings.CELERY_TASK_ALWAYS_EAGER:
        threading.Thread(target=run_here, daemon=True, name=name).start()
    else:
        task.delay(*args)


def send_eagerly(outbox: list[tuple[GatewayId, dict]]) -> None:
    """Embedded mode (no Redis): the gateways live in this process and Celery runs its tasks
    eagerly, so each batch applies here and now (replication/transport/batchqueue.py
    LocalBatches)."""
    for gateway, batch in outbox:
        apply_batch_task.apply_async(
            args=(batch["link"], batch["topic"], batch["partition"], batch["start"],
                  batch["end"]),
            kwargs={"gateway": "/".join(gateway), "ticket": batch["ticket"],
                    "reply_to": batch["reply_to"]})
