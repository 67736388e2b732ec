"""FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, DescribeGroups, ListGroups.

DescribeGroups and ListGroups show what the user sees of the tenant's groups (broker/grouping.py):
a live group as the coordinator holds it, a group that only has committed offsets as Empty.
Each listener lists the groups it coordinates, as each Kafka broker does; admin clients ask
every broker and merge.

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
    committed_groups,
    coordinated_key,
    coordinator_node,
    group_key_of,
    state_of,
    visible,
)
from broker.session import Session
from replication.groups.board import Placement, split_key
from replication.groups.model import Err

log = structlog.get_logger(__name__)
INVALID_REQUEST = errors.ErrorCode.invalid_request
INVALID_GROUP_ID = errors.ErrorCode.invalid_group_id
NO_OPERATIONS = -(2**31)  # "not requested" (INT32_MIN)
# Kafka's AclOperation codes on a group a user who sees it may perform: READ (commit, join),
# DELETE (DeleteGroups, OffsetDelete), DESCRIBE. The same rule decides all three: consumeperm.
GROUP_OPERATIONS = sum(1 << code for code in (3, 6, 8))
CLASSIC = "classic"  # ListGroups v5's group types: the classic JoinGroup/SyncGroup protocol,
CONSUMER = "consumer"  # and KIP-848's (ConsumerGroupHeartbeat, consumergroups.py)


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
        if key_type not in (0, 1):
            entry |= {"error_code": INVALID_REQUEST,
                      "error_message": f"key type {key_type}: 0 (group) or 1 (transaction)"}
        elif key_type == 1:  # any listener serves any transaction: its state is the database's
            node = coordinator_node(session, "txn:" + key)
            entry |= {"node_id": node.node_id, "host": node.host, "port": node.port}
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
    if state_of(session).consumer.get(key) is not None:  # Kafka's answer for the other kind
        return build(response_class(request), error_code=int(Err.INCONSISTENT_GROUP_PROTOCOL),
                     member_id=request.member_id)
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
    operations = (GROUP_OPERATIONS if getattr(request, "include_authorized_operations", False)
                  else NO_OPERATIONS)
    described = [await _describe(session, group_id, operations) for group_id in request.groups]
    return build(response_class(request), groups=described)


async def _describe(session: Session, group_id: str, operations: int) -> dict[str, Any]:
    """Kafka answers a group it does not know as Dead with no error (before v6); a group the
    user may not see is answered the same way, so another tenant's is not even confirmed."""
    entry: dict[str, Any] = {"group_id": group_id, "group_state": "Dead", "protocol_type": "",
                             "protocol_data": "", "authorized_operations": NO_OPERATIONS}
    try:
        key = await coordinated_key(session, group_id)
    except KafkaError as error:
        return entry | {"error_code": error.code}
    view = state_of(session).live(key)
    if view is not None and await visible(session, key):
        return entry | {
            "group_state": view.state, "protocol_type": view.protocol_type,
            "protocol_data": view.protocol_name, "authorized_operations": operations,
            "members": [{"member_id": m.member_id, "group_instance_id": m.instance_id,
                         "client_id": m.client_id, "client_host": m.client_host,
                         "member_metadata": m.metadata, "member_assignment": m.assignment}
                        for m in view.members]}
    if group_id in await committed_groups(session):
        return entry | {"group_state": "Empty", "protocol_type": "consumer",
                        "authorized_operations": operations}
    return entry


@handles(16, 0, 5)
async def list_groups(session: Session, header: RequestHeader, request: Any) -> Any:
    states = {s.lower() for s in getattr(request, "states_filter", ())}
    types = {t.lower() for t in getattr(request, "types_filter", ())}
    listed = await _listed(session)
    groups = [g for g in listed.values() if (not states or g["group_state"].lower() in states)
              and (not types or g["group_type"] in types)]
    return build(response_class(request), groups=sorted(groups, key=lambda g: g["group_id"]))


async def _listed(session: Session) -> dict[str, dict[str, Any]]:
    """The groups this listener coordinates that the user sees, by group id."""
    state, tenant_key = state_of(session), await group_key_of(session, "")
    mine = session.listener.node_id
    listed: dict[str, dict[str, Any]] = {}
    for group_id in await committed_groups(session):
        if coordinator_node(session, tenant_key + group_id).node_id == mine:
            listed[group_id] = {"group_id": group_id, "protocol_type": "consumer",
                                "group_state": "Empty", "group_type": CLASSIC}
    for key in state.group_keys():
        view = state.live(key)
        if key.startswith(tenant_key) and view is not None and await visible(session, key):
            group_id = split_key(key)[1]
            kind = CLASSIC if state.consumer.get(key) is None else CONSUMER
            listed[group_id] = {"group_id": group_id, "protocol_type": view.protocol_type,
                                "group_state": view.state, "group_type": kind}
    return listed
