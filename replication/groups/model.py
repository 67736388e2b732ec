"""The coordinator's data: Kafka's group states, members, and what the APIs answer with."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from enum import Enum, IntEnum


class Err(IntEnum):
    """Kafka error codes the coordinator answers with."""

    NONE = 0
    COORDINATOR_NOT_AVAILABLE = 15
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    MEMBER_ID_REQUIRED = 79
    FENCED_INSTANCE_ID = 82


class State(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True)
class Limits:
    """Kafka's group.min/max.session.timeout.ms and group.initial.rebalance.delay.ms."""

    min_session_ms: int = 6_000
    max_session_ms: int = 1_800_000
    initial_delay_ms: int = 0


@dataclass
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_waiter: asyncio.Future[JoinResult] | None = None
    sync_waiter: asyncio.Future[SyncResult] | None = None
    expiry: asyncio.TimerHandle | None = None

    def metadata(self, protocol: str | None) -> bytes:
        return next((meta for name, meta in self.protocols if name == protocol), b"")

    def awaiting(self) -> bool:
        """A member blocked in JoinGroup or SyncGroup is alive (Kafka's shouldKeepAlive)."""
        return any(w is not None and not w.done() for w in (self.join_waiter, self.sync_waiter))


@dataclass(frozen=True)
class MemberMeta:
    member_id: str
    instance_id: str | None
    metadata: bytes


@dataclass(frozen=True)
class JoinResult:
    error: Err
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    members: list[MemberMeta] = field(default_factory=list)  # the leader's only


@dataclass(frozen=True)
class SyncResult:
    error: Err
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(frozen=True)
class MemberView:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupView:
    """What DescribeGroups and `stream assign list` show of a group."""

    group_id: str
    state: str
    generation_id: int
    protocol_type: str
    protocol_name: str
    leader: str
    members: list[MemberView]


@dataclass
class Group:
    group_id: str
    state: State = State.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending: dict[str, asyncio.TimerHandle] = field(default_factory=dict)  # MEMBER_ID_REQUIRED
    static: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    join_deadline: asyncio.TimerHandle | None = None
    hold_until: float = 0.0  # initial rebalance delay of a group that was empty

    def candidates(self) -> set[str]:
        """Protocols every member supports."""
        sets = [{name for name, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def select_protocol(self) -> str:
        """Kafka's vote: each member votes for its most preferred candidate; most votes win."""
        candidates = self.candidates()
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = next(name for name, _ in member.protocols if name in candidates)
            votes[choice] = votes.get(choice, 0) + 1
        return max(sorted(votes), key=lambda name: votes[name])

    def view(self) -> GroupView:
        members = [MemberView(m.member_id, m.instance_id, m.client_id, m.client_host,
                              m.metadata(self.protocol_name), m.assignment)
                   for m in self.members.values()]
        return GroupView(self.group_id, self.state.value, self.generation,
                         self.protocol_type or "", self.protocol_name or "", self.leader or "",
                         members)
