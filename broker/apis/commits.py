"""OffsetCommit and OffsetFetch: a Kafka group's offsets are the stream's committed cursors.

They go through `cursors_commit` / `cursors_fetch` (replication/services/cursors.py) with the
same checks as every other interface (consumeperm, topic, partition, offset), so
`streamgate consume -group`, the REST API and `stream cursor list` see the same cursors, and
they replicate: a group failing over to a replica resumes where it committed. The cursor is
stored under the Kafka group id in each stream, with the commit's metadata string (null kept
as an empty string, as Kafka keeps it). Any offset from 0 up is kept as committed, as Kafka
keeps it: where to read next is the consumer's business.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from broker import errors
from broker.codec import build
from broker.dispatch import RequestHeader, handles, response_class
from broker.errors import KafkaError
from broker.grouping import coordinated_key, state_of
from broker.session import Session
from replication.engine.store import Committed
from replication.errors import InvalidInput, StreamgateError
from replication.services.cursors import cursors_commit, cursors_fetch
from replication.services.names import ResolvedTopic, topic_listing

UNKNOWN = errors.UNKNOWN_TOPIC_OR_PARTITION
Codes = dict[tuple[str, int], int]  # (client's topic name, partition) -> error code
# (client's topic name, partition, offset, metadata, leader epoch)
Commit = tuple[str, int, int, str, int]
INPUT_CODES = {"offset": errors.OFFSET_OUT_OF_RANGE,
               "metadata": errors.ErrorCode.offset_metadata_too_large}


def code_of(problem: StreamgateError | None) -> int:
    """Its class's code; refused input is a negative offset, metadata too large, or else a
    partition or topic the group cannot have."""
    if problem is None:
        return errors.NONE
    if problem.kafka_error == InvalidInput.kafka_error:
        return INPUT_CODES.get(problem.field or "", UNKNOWN)
    return errors.ErrorCode[problem.kafka_error]


async def _resolve_all(session: Session, names: list[str]) -> dict[str, ResolvedTopic | None]:
    return {name: await session.resolve(name) for name in dict.fromkeys(names)}


@handles(8, 2, 9)
async def offset_commit(session: Session, header: RequestHeader, request: Any) -> Any:
    generation = getattr(request, "generation_id_or_member_epoch", None)
    if generation is None:
        generation = request.generation_id
    try:  # OffsetCommit has no request-level error: NOT_COORDINATOR goes to every partition
        key = await coordinated_key(session, request.group_id)
        refused = state_of(session).validate_commit(
            key, generation_id=generation, member_id=request.member_id,
            instance_id=getattr(request, "group_instance_id", None))
    except KafkaError as error:
        refused = int(error.code)
    wanted = [(t.name, p.partition_index, p.committed_offset, p.committed_metadata or "",
               getattr(p, "committed_leader_epoch", -1))  # v6 and later carry it
              for t in request.topics for p in t.partitions]
    codes: Codes = {(n, p): refused for n, p, *_ in wanted}
    if not refused:
        codes = await _commit(session, request.group_id, wanted)
    return build(response_class(request), topics=[
        {"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                         "error_code": codes[(t.name, p.partition_index)]}
                                        for p in t.partitions]}
        for t in request.topics])


async def _commit(session: Session, group: str, wanted: list[Commit]) -> Codes:
    resolved = await _resolve_all(session, [name for name, *_ in wanted])
    codes: Codes = {}
    per_stream: dict[int, list[Commit]] = defaultdict(list)
    streams, names = {}, {}
    for name, partition, *kept in wanted:
        found = resolved[name]
        if found is None:
            codes[(name, partition)] = UNKNOWN
            continue
        streams[found.stream.pk] = found.stream
        names[(found.stream.pk, found.topic)] = name
        per_stream[found.stream.pk].append((found.topic, partition, *kept))
    for pk, commits in per_stream.items():
        try:
            results = await session.run_sync(cursors_commit, actor=session.user,
                                             stream=streams[pk], group=group, commits=commits)
        except StreamgateError as problem:
            results = {(t, p): problem for t, p, *_ in commits}
        for (topic, partition), problem in results.items():
            codes[(names[(pk, topic)], partition)] = code_of(problem)
    return codes


@handles(9, 1, 9)
async def offset_fetch(session: Session, header: RequestHeader, request: Any) -> Any:
    if request.__version__ >= 8:
        groups = []
        for group in request.groups:
            try:
                await _check_member(session, group)
                topics = await _fetch_group(session, group.group_id, group.topics)
                groups.append({"group_id": group.group_id, "topics": topics})
            except KafkaError as error:
                groups.append({"group_id": group.group_id, "error_code": error.code})
        return build(response_class(request), groups=groups)
    try:
        topics = await _fetch_group(session, request.group_id, request.topics)
    except KafkaError as error:
        if request.__version__ >= 2:
            raise  # the response's own error_code carries it
        topics = [{"name": t.name, "partitions": [_fetched(p, None, error.code)
                                                  for p in t.partition_indexes]}
                  for t in request.topics or ()]  # v1 has per-partition errors only
    return build(response_class(request), topics=topics)


async def _check_member(session: Session, group: Any) -> None:
    """OffsetFetch v9 names the KIP-848 member asking (require_stable reads): it must be
    current, as for a commit."""
    member_id = getattr(group, "member_id", None)
    if not member_id:
        return
    key = await coordinated_key(session, group.group_id)
    consumer = state_of(session).consumer
    if consumer.get(key) is not None and (
            refused := consumer.validate(key, member_id, group.member_epoch)):
        raise KafkaError(int(refused), "the member is not current: heartbeat again")


async def _fetch_group(session: Session, group: str, topics: Any) -> list[dict[str, Any]]:
    await coordinated_key(session, group)
    if topics is None:  # every topic the group has committed in and the user may read
        return await _fetch_all(session, group)
    asked = [(t.name, list(t.partition_indexes)) for t in topics]
    resolved = await _resolve_all(session, [name for name, _ in asked])
    out = []
    for name, partitions in asked:
        found = resolved[name]
        offsets: dict[tuple[str, int], Committed | None] = {}
        code = errors.NONE
        if found is None:
            code = UNKNOWN
        else:
            try:
                offsets = await session.run_sync(
                    cursors_fetch, actor=session.user, stream=found.stream, group=group,
                    partitions=[(found.topic, p) for p in partitions])
            except StreamgateError as problem:
                code = code_of(problem)
        topic = found.topic if found else name
        out.append({"name": name, "partitions": [
            _fetched(p, offsets.get((topic, p)), code) for p in partitions]})
    return out


def _fetched(partition: int, cursor: Committed | None, code: int) -> dict[str, Any]:
    return {"partition_index": partition,
            "committed_offset": -1 if cursor is None else cursor.offset,
            # As committed (a consumer commits its position with the epoch of the batch it
            # read, 0 here: a partition never changes leader); -1 when none was given.
            "committed_leader_epoch": -1 if cursor is None else cursor.leader_epoch,
            "metadata": "" if cursor is None else cursor.metadata,
            "error_code": code}


async def _fetch_all(session: Session, group: str) -> list[dict[str, Any]]:
    listing = await session.run_sync(
        topic_listing, actor=session.user, cluster=session.listener.cluster,
        default_stream=session.listener.default_stream, perms=("consumeperm",))
    by_stream: dict[int, list[ResolvedTopic]] = defaultdict(list)
    for resolved in listing:
        by_stream[resolved.stream.pk].append(resolved)
    out = []
    for topics in by_stream.values():
        offsets = await session.run_sync(cursors_fetch, actor=session.user,
                                         stream=topics[0].stream, group=group)
        for resolved in topics:
            mine = sorted((p, c) for (t, p), c in offsets.items() if t == resolved.topic)
            if mine:
                out.append({"name": resolved.client_name, "partitions": [
                    _fetched(p, c, errors.NONE) for p, c in mine]})
    return out
