"""ListOffsets (key 2): earliest (-2), latest (-1), the largest timestamp (-3, KIP-734, from
v7) and by timestamp, through partition_offsets (consumeperm, as every read); latest is the
last stable offset for a read_committed client (isolation_level 1)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser

from broker import errors
from broker.apis.produce import error_of
from broker.codec import build
from broker.dispatch import RequestHeader, handles, response_class
from broker.session import Session
from replication.services.fetching import partition_offsets
from replication.services.names import ResolvedTopic


def _entry(partition: int, code: Any, offset: int = -1, ts: int = -1) -> dict[str, Any]:
    return {"partition_index": partition, "error_code": code, "offset": offset,
            "timestamp": ts, "leader_epoch": -1, "old_style_offsets": [offset]}


def list_topic(actor: AbstractBaseUser, resolved: ResolvedTopic | None,
               partitions: Any, committed: bool = False) -> list[dict[str, Any]]:
    if resolved is None:
        return [_entry(p.partition_index, errors.UNKNOWN_TOPIC_OR_PARTITION) for p in partitions]
    try:
        found = partition_offsets(actor=actor, stream=resolved.stream, topic=resolved.topic,
                                  queries=[(p.partition_index, p.timestamp) for p in partitions],
                                  committed=committed)
    except Exception as error:  # consumeperm, or the topic is gone
        code = error_of(error)[0]
        return [_entry(p.partition_index, code) for p in partitions]
    return [_entry(p, error_of(e)[0], -1, -1) if e else _entry(p, errors.NONE, off, ts)
            for p, e, off, ts in found]


def list_request(actor: AbstractBaseUser, topics: list[tuple[ResolvedTopic | None, Any]],
                 committed: bool = False) -> list[list[dict[str, Any]]]:
    return [list_topic(actor, resolved, t.partitions, committed) for resolved, t in topics]


@handles(2, 1, 7)
async def list_offsets(session: Session, header: RequestHeader, request: Any) -> Any:
    topics = [(await session.resolve(t.name), t) for t in request.topics]
    answers = await session.run_sync(list_request, session.user, topics,
                                     getattr(request, "isolation_level", 0) == 1)
    return build(response_class(request), throttle_time=0, topics=[
        {"name": t.name, "partitions": parts}
        for (_, t), parts in zip(topics, answers, strict=True)])
