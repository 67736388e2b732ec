"""Celery tasks: each takes ids, loads, calls one service, and is safe to run twice."""

from __future__ import annotations

import structlog
from celery import shared_task

from replication.models import Stream
from replication.services.messages import stream_expire

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
