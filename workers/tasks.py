"""Celery tasks: each takes ids, loads, calls one service, and is safe to run twice."""

from __future__ import annotations

import structlog
from celery import shared_task

from replication.engine.store import Misordered
from replication.models import Stream
from replication.services.engine import batch_apply
from replication.services.messages import stream_expire
from workers.gateway import parse_gateway, tally
from workers.presence import presence

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
        applied = batch_apply(link_id=link_id, topic=topic, partition=partition, start=start,
                              end=end)
    except Misordered as error:  # the replica is not where the plan thought: re-plan
        applied, result["error"], result["misordered"] = 0, str(error), True
    except Exception as error:
        log.warning("apply_failed", link=link_id, topic=topic, partition=partition,
                    error=str(error))
        applied, result["error"] = 0, f"{type(error).__name__}: {error}"
    result["applied"] = applied
    if gateway:
        tally.add(parse_gateway(gateway), batches=1, messages=applied,
                  errors=int("error" in result and "misordered" not in result))
    if ticket:
        presence().ack(result, reply_to)
    return applied
