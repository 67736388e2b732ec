"""ConsumerGroupHeartbeat and ConsumerGroupDescribe: KIP-848's consumer groups
(`group.protocol=consumer`), run by the listener's `ConsumerGroups`
(replication/groups/consumer.py) beside the classic protocol's coordinator.

Each heartbeat resolves the member's subscription with its own connection: names as every
other API resolves them (MapR paths, or plain names in the default stream), a regex against
the topics the user may consume from. Resolving at every heartbeat is how a topic created, or
given partitions, after the member subscribed joins the assignment, as Kafka's metadata image
does. Topics are named by the ids Metadata answers with.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import regex
from django.conf import settings

from broker import errors
from broker.apis.groups import GROUP_OPERATIONS, NO_OPERATIONS, client_host
from broker.apis.metadata import topic_id
from broker.codec import build
from broker.dispatch import RequestHeader, handles, response_class
from broker.errors import KafkaError
from broker.grouping import coordinated_key, state_of, visible
from broker.session import Session
from replication.errors import StreamgateError
from replication.groups.board import Placement
from replication.groups.consumer import Beat, Err, Group, Subscribed
from replication.services.names import ResolvedTopic, topic_listing

MATCH_SECONDS = 0.05  # one subscribed regex against one topic name
CLASSIC_GROUP = "this group id is a classic group's (JoinGroup): a member of the consumer " \
                "protocol needs another group id, or the classic group to empty first"


@handles(68, 1, 1)
async def consumer_group_heartbeat(session: Session, header: RequestHeader,
                                   request: Any) -> Any:
    key = await coordinated_key(session, request.group_id)
    state = state_of(session)
    classic = state.coordinator.describe(key)
    if classic is not None and classic.members:
        raise KafkaError(errors.ErrorCode.group_id_not_found, CLASSIC_GROUP)
    groups = state.consumer
    topics = None
    if request.member_epoch >= 0:
        names, regex = request.subscribed_topic_names, request.subscribed_topic_regex
        if names is None and regex is None:
            names, regex = groups.subscription(key, request.member_id)
        topics = await _subscribed(session, names or (), regex or None)
    owned = None
    if request.topic_partitions is not None:
        owned = {t.topic_id: frozenset(t.partitions) for t in request.topic_partitions
                 if t.partitions}
    rebalance = request.rebalance_timeout
    result = groups.heartbeat(key, Beat(
        member_id=request.member_id, epoch=request.member_epoch,
        instance_id=request.instance_id, rack_id=request.rack_id,
        rebalance_timeout_ms=int(rebalance.total_seconds() * 1000) if rebalance else -1,
        names=tuple(request.subscribed_topic_names)
        if request.subscribed_topic_names is not None else None,
        regex=request.subscribed_topic_regex, assignor=request.server_assignor, owned=owned,
        client_id=session.client_id, client_host=client_host(session)), topics)
    assignment = None
    if result.assignment is not None:
        assignment = {"topic_partitions": [
            {"topic_id": tid, "partitions": sorted(partitions)}
            for tid, partitions in sorted(result.assignment.items(), key=lambda t: str(t[0]))]}
        group = groups.get(key)
        if group is not None:
            _place(session, group, result.member_id)
    return build(response_class(request), error_code=int(result.error),
                 error_message=result.message or None, member_id=result.member_id,
                 member_epoch=result.epoch, heartbeat_interval=settings.KAFKA_CONSUMER_HEARTBEAT_MS,
                 assignment=assignment)


def _matching(actor: Any, cluster: str | None, default_stream: str | None,
              expression: str) -> list[ResolvedTopic]:
    """The topics the actor may consume from whose names `expression` matches whole (in the
    thread pool). Kafka matches with RE2, in linear time; Python's engine can backtrack for
    ever, so each match has MATCH_SECONDS, and a subscription that needs more is refused."""
    try:
        pattern = regex.compile(expression)
    except (regex.error, OverflowError, RecursionError) as error:
        raise KafkaError(errors.ErrorCode.invalid_regular_expression, f"the subscribed regex "
                         f"{expression!r} does not compile: {error}") from error
    listing = topic_listing(actor=actor, cluster=cluster, default_stream=default_stream,
                            perms=("consumeperm",))
    try:
        return [r for r in listing if pattern.fullmatch(r.client_name, timeout=MATCH_SECONDS)]
    except TimeoutError as error:
        raise KafkaError(errors.ErrorCode.invalid_regular_expression,
                         f"the subscribed regex {expression!r} takes too long to match a topic "
                         "name: simplify it") from error


async def _subscribed(session: Session, names: tuple[str, ...] | list[str],
                      expression: str | None) -> dict[UUID, Subscribed]:
    found: list[ResolvedTopic] = []
    for name in dict.fromkeys(names):
        try:
            resolved = await session.resolve(name)
        except StreamgateError:  # not a topic name: it subscribes to nothing, as in Kafka
            continue
        if resolved is not None and resolved.record is not None:
            found.append(resolved)
    if expression:
        listener = session.listener
        found += await session.run_sync(_matching, session.user, listener.cluster,
                                         listener.default_stream, expression)
    return {topic_id(r.record): Subscribed(topic_id(r.record), r.client_name, r.partitions,
                                           str(r.stream.uuid), r.stream.path, r.topic)
            for r in found}


def _place(session: Session, group: Group, member_id: str) -> None:
    """The member's partitions on the board, for `stream assign list` and the portal."""
    member = group.members.get(member_id)
    if member is None:
        return
    placements = [Placement(t.stream, t.path, t.topic, p, t.name)
                  for tid, partitions in member.assigned.items()
                  if (t := member.topics.get(tid)) is not None for p in sorted(partitions)]
    state_of(session).board.placed(group.key, member_id, placements)


@handles(69, 0, 0)
async def consumer_group_describe(session: Session, header: RequestHeader, request: Any) -> Any:
    operations = (GROUP_OPERATIONS if request.include_authorized_operations
                  else NO_OPERATIONS)
    return build(response_class(request), groups=[
        await _describe(session, group_id, operations) for group_id in request.group_ids])


async def _describe(session: Session, group_id: str, operations: int) -> dict[str, Any]:
    entry: dict[str, Any] = {"group_id": group_id, "group_state": "Dead", "assignor_name": "",
                             "authorized_operations": NO_OPERATIONS}
    try:
        key = await coordinated_key(session, group_id)
    except KafkaError as error:
        return entry | {"error_code": error.code, "error_message": error.message}
    group = state_of(session).consumer.get(key)
    if group is None or not await visible(session, key):
        # Not one of this protocol's groups: admin clients ask DescribeGroups next.
        return entry | {"error_code": Err.GROUP_ID_NOT_FOUND,
                        "error_message": f"no consumer-protocol group {group_id!r}"}
    return entry | {
        "group_state": group.state, "group_epoch": group.epoch,
        "assignment_epoch": group.target_epoch, "assignor_name": group.assignor,
        "authorized_operations": operations,
        "members": [{
            "member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
            "member_epoch": m.epoch, "client_id": m.client_id, "client_host": m.client_host,
            "subscribed_topic_names": list(m.names), "subscribed_topic_regex": m.regex,
            "assignment": {"topic_partitions": _named(m.assigned, m.topics)},
            "target_assignment": {"topic_partitions": _named(group.target.get(mid, {}),
                                                             m.topics)},
        } for mid, m in group.members.items() if not m.left]}


def _named(assigned: dict[UUID, frozenset[int]],
           topics: dict[UUID, Subscribed]) -> list[dict[str, Any]]:
    return [{"topic_id": tid, "topic_name": topics[tid].name if tid in topics else "",
             "partitions": sorted(partitions)}
            for tid, partitions in sorted(assigned.items(), key=lambda t: str(t[0]))]
