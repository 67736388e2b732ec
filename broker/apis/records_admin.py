"""DeleteRecords (21) and DescribeProducers (61): a partition's log start moved, and the
idempotent producers it has seen.

DeleteRecords is MapR's `stream purge` cut at the caller's offsets: `records_delete`
(replication/services/purge.py), with the purge's rule (adminperm; what an agreed replica has
not received yet stays, so the low watermark answered may be below the offset asked) and its
audit. An offset past the high watermark is OFFSET_OUT_OF_RANGE, as Kafka answers; -1 cuts at
the high watermark. DescribeProducers reads the stores' producer states (consumeperm).
"""

from __future__ import annotations

from typing import Any

from broker import errors
from broker.codec import build
from broker.dispatch import RequestHeader, handles, response_class
from broker.session import Session
from replication.errors import StreamgateError
from replication.services.names import ResolvedTopic
from replication.services.producers import partition_producers
from replication.services.purge import records_delete

FIELD_CODES = {"offset": errors.OFFSET_OUT_OF_RANGE,
               "partition": errors.UNKNOWN_TOPIC_OR_PARTITION}


def _code(problem: StreamgateError) -> errors.ErrorCode:
    return errors.code_of(problem, FIELD_CODES) or errors.INVALID_REQUEST


def _delete_topic(actor: Any, resolved: ResolvedTopic, offsets: dict[int, int]
                  ) -> dict[int, tuple[errors.ErrorCode, int]]:
    try:
        results = records_delete(actor=actor, stream=resolved.stream, topic=resolved.topic,
                                 offsets=offsets)
    except StreamgateError as problem:
        return dict.fromkeys(offsets, (_code(problem), -1))
    return {p: (errors.NONE, found) if isinstance(found, int) else (_code(found), -1)
            for p, found in results.items()}


async def _deleted(session: Session, topic: Any) -> dict[str, Any]:
    offsets = {p.partition_index: p.offset for p in topic.partitions}
    resolved = await session.resolve(topic.name)
    if resolved is None:
        results = dict.fromkeys(offsets, (errors.UNKNOWN_TOPIC_OR_PARTITION, -1))
    else:
        results = await session.run_sync(_delete_topic, session.user, resolved, offsets)
    return {"name": topic.name, "partitions": [
        {"partition_index": p, "error_code": code, "low_watermark": low}
        for p, (code, low) in results.items()]}


@handles(21, 0, 2)
async def delete_records(session: Session, header: RequestHeader, request: Any) -> Any:
    topics = [await _deleted(session, t) for t in request.topics]
    return build(response_class(request), throttle_time=0, topics=topics)


def _producers(actor: Any, resolved: ResolvedTopic, partition: int) -> dict[str, Any]:
    entry: dict[str, Any] = {"partition_index": partition, "error_code": errors.NONE}
    try:
        found = partition_producers(actor=actor, stream=resolved.stream, topic=resolved.topic,
                                    partition=partition)
    except StreamgateError as problem:
        return entry | {"error_code": _code(problem), "error_message": problem.desc}
    return entry | {"active_producers": [
        {"producer_id": p.producer_id, "producer_epoch": p.epoch,
         "last_sequence": p.last_sequence, "last_timestamp": p.last_timestamp_ms,
         "coordinator_epoch": -1, "current_txn_start_offset": -1} for p in found]}


async def _described(session: Session, topic: Any) -> dict[str, Any]:
    resolved = await session.resolve(topic.name)
    if resolved is None:
        partitions = [{"partition_index": p, "error_code": errors.UNKNOWN_TOPIC_OR_PARTITION,
                       "error_message": f"no topic {topic.name} of yours"}
                      for p in topic.partition_indexes]
    else:
        partitions = [await session.run_sync(_producers, session.user, resolved, p)
                      for p in topic.partition_indexes]
    return {"name": topic.name, "partitions": partitions}


@handles(61, 0, 0)
async def describe_producers(session: Session, header: RequestHeader, request: Any) -> Any:
    topics = [await _described(session, t) for t in request.topics]
    return build(response_class(request), throttle_time=0, topics=topics)
