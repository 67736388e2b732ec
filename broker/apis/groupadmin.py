"""DeleteGroups (42) and OffsetDelete (47): a group's committed offsets deleted, as Kafka's
group coordinator deletes them.

A group's offsets are its cursors in the tenant's streams (broker/grouping.py says which a user
sees); both APIs delete them through `cursor_delete` (replication/services/cursors.py), the
service of `stream cursor delete`, with its permission rule (consumeperm or adminperm on each
stream). A group the user does not see is GROUP_ID_NOT_FOUND, another tenant's included.
DeleteGroups needs a group without members (NON_EMPTY_GROUP); OffsetDelete refuses the
partitions of topics an active group's members subscribe to (GROUP_SUBSCRIBED_TO_TOPIC).
"""

from __future__ import annotations

import struct
from typing import Any

from broker import errors
from broker.codec import build
from broker.dispatch import RequestHeader, handles, response_class
from broker.errors import KafkaError
from broker.grouping import (
    coordinated_key,
    forget_committed,
    state_of,
    streams_holding,
    visible,
)
from broker.session import Session
from replication.errors import StreamgateError
from replication.groups.model import GroupView
from replication.models import Stream
from replication.services.cursors import cursor_delete

NON_EMPTY_GROUP = errors.ErrorCode.non_empty_group
GROUP_ID_NOT_FOUND = errors.ErrorCode.group_id_not_found
GROUP_SUBSCRIBED_TO_TOPIC = errors.ErrorCode.group_subscribed_to_topic
CONSUMER = "consumer"


def decode_subscription(data: bytes) -> list[str]:
    """The topics of Kafka's ConsumerProtocolSubscription (version, [topic], user data, ...);
    [] for bytes that are not one."""
    try:
        (count,) = struct.unpack_from(">i", data, 2)
        pos, topics = 6, []
        for _ in range(max(count, 0)):
            (size,) = struct.unpack_from(">h", data, pos)
            topics.append(data[pos + 2:pos + 2 + size].decode())
            pos += 2 + size
        return topics
    except (struct.error, UnicodeDecodeError):
        return []


async def _live(session: Session, key: str) -> GroupView | None:
    """The group as its coordinator holds it, when it has members the user may see."""
    view = state_of(session).live(key)
    if view is None or not await visible(session, key):
        return None
    return view


def _delete_cursors(actor: Any, streams: list[Stream], group: str) -> int:
    return sum(cursor_delete(actor=actor, stream=stream, group=group) for stream in streams)


async def _delete_group(session: Session, group_id: str) -> errors.ErrorCode:
    key = await coordinated_key(session, group_id)
    state = state_of(session)
    coordinator = state.coordinator
    if not state.consumer.remove_group(key) or not coordinator.hold_empty(key):
        live = await _live(session, key)
        return NON_EMPTY_GROUP if live is not None else GROUP_ID_NOT_FOUND
    try:
        streams = await streams_holding(session, group_id)
        if not streams:
            return GROUP_ID_NOT_FOUND
        await session.run_sync(_delete_cursors, session.user, streams, group_id)
    finally:
        coordinator.release(key)
        forget_committed(session)
    return errors.NONE


def _group_code(problem: StreamgateError) -> errors.ErrorCode:
    """A refusal of the cursor service, as DeleteGroups names it: the group's, not a topic's."""
    code = errors.code_of(problem, {"group": errors.ErrorCode.invalid_group_id})
    if code in (None, errors.TOPIC_AUTHORIZATION_FAILED):
        return errors.GROUP_AUTHORIZATION_FAILED
    return code


@handles(42, 0, 2)
async def delete_groups(session: Session, header: RequestHeader, request: Any) -> Any:
    results = []
    for group_id in request.groups_names:
        try:
            code = await _delete_group(session, group_id)
        except KafkaError as error:
            code = error.code
        except StreamgateError as problem:
            code = _group_code(problem)
        results.append({"group_id": group_id, "error_code": code})
    return build(response_class(request), throttle_time=0, results=results)


async def _subscribed(session: Session, view: GroupView) -> set[tuple[str, str]]:
    """(stream uuid, topic) of every topic the group's members subscribe to."""
    names = {name for m in view.members for name in decode_subscription(m.metadata)}
    found = set()
    for name in names:
        resolved = await session.resolve(name)
        if resolved is not None:
            found.add((str(resolved.stream.uuid), resolved.topic))
    return found


async def _group_scope(session: Session, group_id: str) -> set[tuple[str, str]]:
    """The topics whose offsets the group may not have deleted now; KafkaError when the
    group may not have offsets deleted at all (Kafka's top-level error)."""
    key = await coordinated_key(session, group_id)
    live = await _live(session, key)
    if live is None:
        if not await streams_holding(session, group_id):
            raise KafkaError(GROUP_ID_NOT_FOUND, f"no group {group_id} of yours has offsets")
        return set()
    kip848 = state_of(session).consumer.get(key)
    if kip848 is not None:  # its members' subscriptions, as their connections resolved them
        return {(t.stream, t.topic) for m in kip848.members.values() for t in m.topics.values()}
    if live.protocol_type != CONSUMER:
        raise KafkaError(NON_EMPTY_GROUP, f"group {group_id} is active and is not a consumer "
                                          "group: stop its members first")
    return await _subscribed(session, live)


def _delete_partitions(actor: Any, stream: Stream, topic: str, group: str,
                       partitions: list[int]) -> dict[int, errors.ErrorCode]:
    codes = {}
    for partition in partitions:
        try:
            cursor_delete(actor=actor, stream=stream, group=group, topic=topic,
                          partition=partition)
            codes[partition] = errors.NONE
        except StreamgateError as problem:
            codes[partition] = errors.code_of(
                problem, {"partition": errors.UNKNOWN_TOPIC_OR_PARTITION}) or errors.INVALID_REQUEST
    return codes


async def _delete_topic(session: Session, group_id: str, topic: Any,
                        subscribed: set[tuple[str, str]]) -> dict[str, Any]:
    partitions = [p.partition_index for p in topic.partitions]
    resolved = await session.resolve(topic.name)
    if resolved is None:
        codes = dict.fromkeys(partitions, errors.UNKNOWN_TOPIC_OR_PARTITION)
    elif (str(resolved.stream.uuid), resolved.topic) in subscribed:
        codes = dict.fromkeys(partitions, GROUP_SUBSCRIBED_TO_TOPIC)
    else:
        codes = await session.run_sync(_delete_partitions, session.user, resolved.stream,
                                       resolved.topic, group_id, partitions)
    return {"name": topic.name, "partitions": [
        {"partition_index": p, "error_code": codes[p]} for p in partitions]}


@handles(47, 0, 0)
async def offset_delete(session: Session, header: RequestHeader, request: Any) -> Any:
    subscribed = await _group_scope(session, request.group_id)  # KafkaError: the whole answer
    try:
        topics = [await _delete_topic(session, request.group_id, t, subscribed)
                  for t in request.topics]
    finally:
        forget_committed(session)
    return build(response_class(request), throttle_time=0, topics=topics)
