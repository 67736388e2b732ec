"""Celery tasks: each takes ids, loads, calls one service, and is safe to run twice."""

from __future__ import annotations

import structlog
from celery import shared_task

from replication.engine.store import Applied, Misordered
from replication.lag_history import gateways_record, lag_record
from replication.models import Stream
from replication.presence import Presence, presence
from replication.services.engine import batch_apply
from replication.services.messages import stream_expire
from replication.services.wire import link_wire_refusal
from workers.gateway import parse_gateway, tally

log = structlog.get_logger(__name__)


class WireRefused(Exception):
    """The link asks for what the connections to its stores no longer give (wire.py)."""


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
    ids = list(Stream.objects.exclude(ttl=0).values_list("pk", flat=True))
    for stream_id in ids:
        expire_stream_task.delay(stream_id)
    return len(ids)


@shared_task(name="workers.tasks.apply_batch_task", acks_late=True, ignore_result=True)
def apply_batch_task(
    link_id: int, topic: str, partition: int, start: int, end: int, *, gateway: str = "",
    ticket: str = "", reply_to: str = "",
) -> int:
    """A gateway applies [start, end) of one partition to a replica. Safe to run any number of
    times, on any number of gateways at once: the replica keeps each message once (trim under
    the partition's lock). Acknowledges to the replicator with what happened."""
    result: dict = {"ticket": ticket, "gateway": gateway.partition("/")[2], "link": link_id}
    try:
        refusal = link_wire_refusal(link_id=link_id)
        if refusal:  # -networkencryption true, and a store now allows plaintext
            raise WireRefused(refusal)
        applied = batch_apply(link_id=link_id, topic=topic, partition=partition, start=start,
                              end=end)
    except Misordered as error:  # the replica is not where the plan thought: re-plan
        applied, result["error"], result["misordered"] = Applied({}), str(error), True
    except Exception as error:
        log.warning("apply_failed", link=link_id, topic=topic, partition=partition,
                    error=str(error))
        applied, result["error"] = Applied({}), f"{type(error).__name__}: {error}"
    result["applied"] = applied.count
    if gateway:
        tally.add(parse_gateway(gateway), batches=1, messages=applied.count,
                  nbytes=applied.bytes,
                  errors=int("error" in result and "misordered" not in result))
    signals = presence()
    if applied.count:
        _announce_applied(signals, link_id)
    if ticket:
        signals.ack(result, reply_to)
    return applied.count


def _announce_applied(signals: Presence, link_id: int) -> None:
    # Producers waiting for a synchronous replica re-read its ends now (replication/services/
    # sync.py); they re-check on a timer too, so a lost notification only slows them.
    try:
        signals.applied([link_id])
    except Exception as error:
        log.warning("applied_notify_failed", link=link_id, error=str(error))


@shared_task(name="workers.tasks.record_lag_task", ignore_result=True)
def record_lag_task() -> int:
    """Beat's entry: one sample of every agreed link's lag and of the gateways' counters, for
    the portal's charts and throughput (replication/lag_history.py). A missed run only leaves
    a gap in a chart."""
    gateways_record()
    return lag_record()


@shared_task(name="workers.tasks.run_job_task", acks_late=True, ignore_result=True)
def run_job_task(job_id: int) -> str:
    """Runs a copystream, diffstreams or catch-up job; a redelivery (its worker died) runs it
    again, which leaves the destination exactly as one run would."""
    from workers.jobs import job_run

    return job_run(job_id=job_id)


@shared_task(name="workers.tasks.resume_jobs_task")
def resume_jobs_task() -> int:
    """Beat's safety net: an active job whose record stopped moving lost its worker."""
    from replication.services.jobs import jobs_stale
    from workers.jobs import job_enqueue

    stale = jobs_stale()
    for job_id in stale:
        job_enqueue(job_id)
    return len(stale)
