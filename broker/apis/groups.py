"""FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, DescribeGroups, ListGroups.

The membership protocol runs in the listener's `Coordinator` (replication/groups/coordinator.py).
Group ids are per tenant: the coordinator's key is `<tenant id>:<group id>`, so another tenant's
group of the same name is another group. With several listeners, a group's coordinator is
one live listener chosen by rendezvous hashing of that key over the live node ids; the others
answer NOT_COORDINATOR and the client asks FindCoordinator again, as after a Kafka broker dies.
"""

from __future__ import annotations

import datetime
import struct
from typing import Any

import structlog

from broker import errors
from broker.codec import build
from broker.dispatch import RequestHeader, handles, response_class
from broker.errors import KafkaError
from broker.grouping import (
    coordinated_key,
    coordinator_node,
    group_key_of,
    readable_streams,
    state_of,
)
from broker.session import Session
from replication.groups.board import Placement, split_key

log = structlog.get_logger(__name__)
# Kafka's answer to a transaction coordinator lookup it may not serve. Not retriable, so a
# transactional producer fails at once with Kafka's own error instead of retrying until its
# timeout (COORDINATOR_NOT_AVAILABLE would make librdkafka retry).
NO_TRANSACTIONS = errors.ErrorCode.transactional_id_authorization_failed
INVALID_GROUP_ID = errors.ErrorCode.invalid_group_id


def millis(value: datetime.timedelta | int | None, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    return int(value)


def client_host(session: Session) -> str:
    return "/" + session.peer.rpartition(":")[0]


def decode_assignment(data: bytes) -> list[tuple[str, list[int]]]:
    """Kafka's ConsumerProtocolAssignment (version, [topic, [partition]], user data); [] for
    anything else, as a non-consumer protocol's assignment means nothing here."""
    try:
        pos, out = 2, []
        (count,) = struct.unpack_from(">i", data, pos)
        pos += 4
        for _ in range(max(count, 0)):
            (size,) = struct.unpack_from(">h", data, pos)
            topic = data[pos + 2:pos + 2 + size].decode()
            pos += 2 + size
            (parts,) = struct.unpack_from(">i", data, pos)
            partitions = list(struct.unpack_from(f">{max(parts, 0)}i", data, pos + 4))
            pos += 4 + 4 * max(parts, 0)
            out.append((topic, partitions))
        return out
    except (struct.error, UnicodeDecodeError):
        return []


@handles(10, 0, 4)
async def find_coordinator(session: Session, header: RequestHeader, request: Any) -> Any:
    keys = list(request.coordinator_keys) if request.__version__ >= 4 else [request.key]
    key_type = getattr(request, "key_type", 0)
    found = []
    for key in keys:
        entry: dict[str, Any] = {"key": key, "node_id": -1, "host": "", "port": -1}
        if key_type != 0:
            entry |= {"error_code": NO_TRANSACTIONS,
                      "error_message": "transactions are not supported here (idempotent "
                                       "producers are): only group coordinators exist"}
        elif not key:
            entry |= {"error_code": INVALID_GROUP_ID, "error_message": "empty group id"}
        else:
            node = coordinator_node(session, await group_key_of(session, key))
            entry |= {"node_id": node.node_id, "host": node.host, "port": node.port}
        found.append(entry)
    if request.__version__ >= 4:
        return build(response_class(request), coordinators=found)
    first = found[0]
    return build(response_class(request), error_code=first.get("error_code", errors.NONE),
                 error_message=first.get("error_message"), node_id=first["node_id"],
                 host=first["host"], port=first["port"])


@handles(11, 0, 9)
async def join_group(session: Session, header: RequestHeader, request: Any) -> Any:
    key = await coordinated_key(session, request.group_id)
    session_ms = millis(request.session_timeout, 10_000)
    result = await state_of(session).coordinator.join(
        key, member_id=request.member_id, protocol_type=request.protocol_type,
        protocols=[(p.name, p.metadata) for p in request.protocols],
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=millis(getattr(request, "rebalance_timeout", None), session_ms),
        instance_id=getattr(request, "group_instance_id", None),
        require_known_member_id=request.__version__ >= 4,
        client_id=session.client_id, client_host=client_host(session))
    nullable = request.__version__ >= 7
    return build(
        response_class(request), error_code=int(result.error),
        generation_id=result.generation_id,
        protocol_type=result.protocol_type if nullable else result.protocol_type or "",
        protocol_name=result.protocol_name if nullable else result.protocol_name or "",
        leader=result.leader, member_id=result.member_id,
        members=[{"member_id": m.member_id, "group_instance_id": m.instance_id,
                  "metadata": m.metadata} for m in result.members])


@handles(14, 0, 5)
async def sync_group(session: Session, header: RequestHeader, request: Any) -> Any:
    key = await coordinated_key(session, request.group_id)
    result = await state_of(session).coordinator.sync(
        key, generation_id=request.generation_id, member_id=request.member_id,
        assignments={a.member_id: a.assignment for a in request.assignments},
        instance_id=getattr(request, "group_instance_id", None),
        protocol_type=getattr(request, "protocol_type", None),
        protocol_name=getattr(request, "protocol_name", None))
    if result.error == 0:
        await _place(session, key, request.member_id, result.assignment)
    return build(response_class(request), error_code=int(result.error),
                 protocol_type=result.protocol_type, protocol_name=result.protocol_name,
                 assignment=result.assignment)


async def _place(session: Session, key: str, member_id: str, assignment: bytes) -> None:
    """Resolve the member's assigned topics with its own connection, for `stream assign
    list`. Never fails the sync: the board is a view."""
    placements = []
    try:
        for name, partitions in decode_assignment(assignment):
            resolved = await session.resolve(name)
            if resolved is None:
                continue
            placements += [Placement(str(resolved.stream.uuid), resolved.stream.path,
                                     resolved.topic, p, name) for p in partitions]
    except Exception:  # a view must never break the protocol
        log.exception("group_placement_failed", group=key)
        return
    state_of(session).board.placed(key, member_id, placements)


@handles(12, 0, 4)
async def heartbeat(session: Session, header: RequestHeader, request: Any) -> Any:
    key = await coordinated_key(session, request.group_id)
    error = state_of(session).coordinator.heartbeat(
        key, generation_id=request.generation_id, member_id=request.member_id,
        instance_id=getattr(request, "group_instance_id", None))
    return build(response_class(request), error_code=int(error))


@handles(13, 0, 5)
async def leave_group(session: Session, header: RequestHeader, request: Any) -> Any:
    key = await coordinated_key(session, request.group_id)
    if request.__version__ < 3:
        members = [(request.member_id, None)]
    else:
        members = [(m.member_id, m.group_instance_id) for m in request.members]
    results = state_of(session).coordinator.leave(key, members)
    if request.__version__ < 3:
        return build(response_class(request), error_code=int(results[0]))
    return build(response_class(request), members=[
        {"member_id": mid, "group_instance_id": iid, "error_code": int(error)}
        for (mid, iid), error in zip(members, results, strict=True)])


@handles(15, 0, 5)
async def describe_groups(session: Session, header: RequestHeader, request: Any) -> Any:
    state = state_of(session)
    described = []
    for group_id in request.groups:
        entry: dict[str, Any] = {"group_id": group_id, "group_state": "Dead",
                                 "authorized_operations": -(2**31)}
        try:
            key = await coordinated_key(session, group_id)
        except KafkaError as error:
            described.append(entry | {"error_code": error.code})
            continue
        view = state.coordinator.describe(key)
        if view is not None and await _visible(session, key):
            entry |= {"group_state": view.state, "protocol_type": view.protocol_type,
                      "protocol_data": view.protocol_name, "members": [
                          {"member_id": m.member_id, "group_instance_id": m.instance_id,
                           "client_id": m.client_id, "client_host": m.client_host,
                           "member_metadata": m.metadata, "member_assignment": m.assignment}
                          for m in view.members]}
        elif group_id in await _committed_groups(session):
            entry |= {"group_state": "Empty", "protocol_type": "consumer"}
        described.append(entry)
    return build(response_class(request), groups=described)


@handles(16, 0, 4)
async def list_groups(session: Session, header: RequestHeader, request: Any) -> Any:
    state, tenant_key = state_of(session), await group_key_of(session, "")
    wanted = {s.lower() for s in getattr(request, "states_filter", ())}
    listed: dict[str, dict[str, Any]] = {}
    for group_id in await _committed_groups(session):
        listed[group_id] = {"group_id": group_id, "protocol_type": "consumer",
                            "group_state": "Empty"}
    for key in state.coordinator.group_keys():
        view = state.coordinator.describe(key)
        if key.startswith(tenant_key) and view is not None and await _visible(session, key):
            group_id = split_key(key)[1]
            listed[group_id] = {"group_id": group_id, "protocol_type": view.protocol_type,
                                "group_state": view.state}
    groups = [g for g in listed.values() if not wanted or g["group_state"].lower() in wanted]
    return build(response_class(request), groups=sorted(groups, key=lambda g: g["group_id"]))


async def _visible(session: Session, key: str) -> bool:
    """A live group shows to a tenant's user when it reads none of the stream, or one the
    user may read (consumeperm)."""
    streams = state_of(session).board.streams_of(key)
    return not streams or bool(streams & await readable_streams(session))


async def _committed_groups(session: Session) -> set[str]:
    from broker.grouping import committed_groups

    return await committed_groups(session)
