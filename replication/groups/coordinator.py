"""Kafka's classic consumer-group membership protocol, as the broker's GroupCoordinator runs it.

No wire code: the JoinGroup/SyncGroup/Heartbeat/LeaveGroup handlers of the Kafka listener
(broker/apis/groups.py) call a `Coordinator` on the listener's event loop. Every method runs to
its first `await` without yielding, so the state machine needs no lock: a JoinGroup or
SyncGroup only awaits its own future, which a later request (or a timer) completes.

States, as Kafka names them: Empty -> PreparingRebalance (members rejoin; completes when all
known members have, or at the rebalance timeout, dropping the rest) -> CompletingRebalance
(the leader got every member's metadata and computes the assignment; SyncGroup waits for it)
-> Stable. A member that stops heartbeating for its session timeout is removed and the group
rebalances. Assignment strategies (range, roundrobin, cooperative-sticky) live in the clients;
their metadata and assignments are opaque bytes here. A cooperative client rejoins right after
revoking partitions with changed metadata, which triggers the follow-up rebalance as in Kafka.
Groups exist in memory only: after a listener restart members are told UNKNOWN_MEMBER_ID or
ILLEGAL_GENERATION and rejoin, as after a Kafka coordinator moves. Committed offsets live in the
message store (broker/apis/commits.py) and survive.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable

from replication.groups.model import (
    Err,
    Group,
    GroupView,
    JoinResult,
    Limits,
    Member,
    MemberMeta,
    State,
    SyncResult,
)

__all__ = ["Coordinator", "Err", "GroupView", "JoinResult", "Limits", "State", "SyncResult"]


OnChange = Callable[[GroupView], None]


class Coordinator:
    """All groups one listener coordinates, keyed by a tenant-scoped group key."""

    def __init__(self, limits: Limits | None = None, on_change: OnChange | None = None) -> None:
        self.limits = limits or Limits()
        self._on_change = on_change
        self._groups: dict[str, Group] = {}
        self._held: set[str] = set()  # groups being deleted: no join until released

    # --- queries ---------------------------------------------------------------------------

    def describe(self, key: str) -> GroupView | None:
        group = self._groups.get(key)
        return group.view() if group else None

    def group_keys(self) -> list[str]:
        return sorted(self._groups)

    # --- DeleteGroups ----------------------------------------------------------------------

    def hold_empty(self, key: str) -> bool:
        """Whether the group has no member; if so, joins are refused until `release`, so no
        member joins while its offsets are deleted (Kafka marks the group Dead meanwhile)."""
        group = self._groups.get(key)
        if group is not None and group.members:
            return False
        self._held.add(key)
        return True

    def release(self, key: str) -> None:
        self._held.discard(key)

    def validate_commit(self, key: str, *, generation_id: int, member_id: str,
                        instance_id: str | None = None) -> Err:
        """OffsetCommit's group checks (Kafka's doCommitOffsets): a simple commit (generation
        -1, no member) needs a group that is not managing members."""
        group = self._groups.get(key)
        if group is None or group.state is State.EMPTY:
            return Err.NONE if generation_id < 0 else Err.ILLEGAL_GENERATION
        if group.state is State.COMPLETING_REBALANCE:
            return Err.REBALANCE_IN_PROGRESS
        if (fenced := self._fenced(group, member_id, instance_id)) is not Err.NONE:
            return fenced
        if member_id not in group.members:
            return Err.UNKNOWN_MEMBER_ID
        return Err.NONE if generation_id == group.generation else Err.ILLEGAL_GENERATION

    # --- JoinGroup -------------------------------------------------------------------------

    async def join(
        self, key: str, *, member_id: str, protocol_type: str,
        protocols: list[tuple[str, bytes]], session_timeout_ms: int,
        rebalance_timeout_ms: int = -1, instance_id: str | None = None,
        require_known_member_id: bool = False, client_id: str = "", client_host: str = "",
    ) -> JoinResult:
        if not key:
            return JoinResult(Err.INVALID_GROUP_ID, member_id=member_id)
        if key in self._held:  # being deleted: the client asks again, as for a Dead group
            return JoinResult(Err.COORDINATOR_NOT_AVAILABLE, member_id=member_id)
        limits = self.limits
        if not limits.min_session_ms <= session_timeout_ms <= limits.max_session_ms:
            return JoinResult(Err.INVALID_SESSION_TIMEOUT, member_id=member_id)
        group = self._groups.get(key)
        if group is None:
            if member_id:
                return JoinResult(Err.UNKNOWN_MEMBER_ID, member_id=member_id)
            group = self._groups[key] = Group(key)
        if not self._supports(group, protocol_type, protocols):
            return JoinResult(Err.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
        member = Member(member_id, instance_id or None, client_id, client_host,
                        session_timeout_ms,
                        rebalance_timeout_ms if rebalance_timeout_ms > 0 else session_timeout_ms,
                        list(protocols))
        if not member_id:
            return await self._join_new(group, member, protocol_type, require_known_member_id)
        return await self._join_known(group, member, protocol_type)

    def _supports(self, group: Group, protocol_type: str,
                  protocols: list[tuple[str, bytes]]) -> bool:
        if not protocol_type or not protocols:
            return False
        if not group.members:
            return True
        names = {name for name, _ in protocols}
        return protocol_type == group.protocol_type and bool(names & group.candidates())

    async def _join_new(self, group: Group, member: Member, protocol_type: str,
                        require_known: bool) -> JoinResult:
        member.member_id = f"{member.client_id or 'member'}-{uuid.uuid4()}"
        if member.instance_id and member.instance_id in group.static:
            return await self._replace_static(group, member, protocol_type)
        if require_known and not member.instance_id:
            # KIP-394: the client learns its id first, so a join whose response is lost
            # leaves no orphan member behind, only a pending id that expires.
            group.pending[member.member_id] = self._loop().call_later(
                member.session_timeout_ms / 1000, self._expire_pending, group, member.member_id)
            return JoinResult(Err.MEMBER_ID_REQUIRED, member_id=member.member_id)
        return await self._add_and_wait(group, member, protocol_type)

    async def _join_known(self, group: Group, member: Member, protocol_type: str) -> JoinResult:
        mid = member.member_id
        if mid in group.pending:
            group.pending.pop(mid).cancel()
            return await self._add_and_wait(group, member, protocol_type)
        if (fenced := self._fenced(group, mid, member.instance_id)) is not Err.NONE:
            return JoinResult(fenced, member_id=mid)
        current = group.members.get(mid)
        if current is None or group.state in (State.EMPTY, State.DEAD):
            return JoinResult(Err.UNKNOWN_MEMBER_ID, member_id=mid)
        same = current.protocols == member.protocols
        if group.state is State.COMPLETING_REBALANCE and same:
            return self._generation_result(group, current)
        if group.state is State.STABLE and same and mid != group.leader:
            return self._generation_result(group, current)
        self._update(current, member)
        if group.state is not State.PREPARING_REBALANCE:
            self._prepare_rebalance(group)
        return await self._wait_join(group, current)

    async def _replace_static(self, group: Group, member: Member,
                              protocol_type: str) -> JoinResult:
        """A restarted static member takes its instance's place under a new member id; the old
        id is fenced. Same protocols in a settled group: no rebalance (KIP-345)."""
        old = group.members.pop(group.static[member.instance_id or ""])
        self._cancel_expiry(old)
        for waiter in (old.join_waiter, old.sync_waiter):
            if waiter is not None and not waiter.done():
                waiter.set_result(JoinResult(Err.FENCED_INSTANCE_ID) if waiter is old.join_waiter
                                  else SyncResult(Err.FENCED_INSTANCE_ID))
        member.assignment = old.assignment
        group.members[member.member_id] = member
        group.static[member.instance_id or ""] = member.member_id
        if group.leader == old.member_id:
            group.leader = member.member_id
        if group.state is State.STABLE and old.protocols == member.protocols:
            self._schedule_expiry(group, member)
            self._changed(group)
            return self._generation_result(group, member)
        if group.state is not State.PREPARING_REBALANCE:
            self._prepare_rebalance(group)
        return await self._wait_join(group, member)

    async def _add_and_wait(self, group: Group, member: Member,
                            protocol_type: str) -> JoinResult:
        if not group.members:
            group.protocol_type = protocol_type
        group.members[member.member_id] = member
        if member.instance_id:
            group.static[member.instance_id] = member.member_id
        if group.state is not State.PREPARING_REBALANCE:
            self._prepare_rebalance(group)
        return await self._wait_join(group, member)

    async def _wait_join(self, group: Group, member: Member) -> JoinResult:
        # A member joining again while its earlier join waits (a client that gave up on it and
        # reconnected): the earlier request is answered, never left hanging.
        if member.join_waiter is not None and not member.join_waiter.done():
            member.join_waiter.set_result(JoinResult(Err.REBALANCE_IN_PROGRESS,
                                                     member_id=member.member_id))
        waiter = member.join_waiter = self._loop().create_future()
        self._changed(group)
        self._maybe_complete_join(group)
        return await waiter

    def _update(self, current: Member, new: Member) -> None:
        current.protocols = new.protocols
        current.session_timeout_ms = new.session_timeout_ms
        current.rebalance_timeout_ms = new.rebalance_timeout_ms
        current.client_id, current.client_host = new.client_id, new.client_host

    def _generation_result(self, group: Group, member: Member) -> JoinResult:
        members = []
        if member.member_id == group.leader:
            members = [MemberMeta(m.member_id, m.instance_id, m.metadata(group.protocol_name))
                       for m in group.members.values()]
        return JoinResult(Err.NONE, group.generation, group.protocol_type, group.protocol_name,
                          group.leader or "", member.member_id, members)

    # --- rebalancing -----------------------------------------------------------------------

    def _prepare_rebalance(self, group: Group) -> None:
        if group.state is State.COMPLETING_REBALANCE:
            for member in group.members.values():
                self._resolve_sync(member, SyncResult(Err.REBALANCE_IN_PROGRESS))
        loop = self._loop()
        was_empty = group.state is State.EMPTY
        group.state = State.PREPARING_REBALANCE
        timeout = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
        if group.join_deadline:
            group.join_deadline.cancel()
        group.join_deadline = loop.call_later(timeout / 1000, self._complete_join, group)
        group.hold_until = 0.0
        delay = min(self.limits.initial_delay_ms, timeout) / 1000
        if was_empty and delay > 0:
            group.hold_until = time.monotonic() + delay
            loop.call_later(delay, self._maybe_complete_join, group)

    def _maybe_complete_join(self, group: Group) -> None:
        if group.state is not State.PREPARING_REBALANCE or group.pending:
            return
        if time.monotonic() < group.hold_until:
            return
        if all(m.join_waiter is not None for m in group.members.values()):
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        """Kafka's onCompleteJoin: members that did not rejoin in time are dropped."""
        if group.state is not State.PREPARING_REBALANCE:
            return
        if group.join_deadline:
            group.join_deadline.cancel()
            group.join_deadline = None
        for mid in [mid for mid, m in group.members.items() if m.join_waiter is None]:
            self._remove(group, group.members[mid])
        for handle in group.pending.values():
            handle.cancel()
        group.pending.clear()
        group.generation += 1
        if not group.members:
            self._become_empty(group)
            return
        group.protocol_name = group.select_protocol()
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        group.state = State.COMPLETING_REBALANCE
        for member in group.members.values():
            waiter, member.join_waiter = member.join_waiter, None
            if waiter is not None and not waiter.done():
                waiter.set_result(self._generation_result(group, member))
            self._schedule_expiry(group, member)
        self._changed(group)

    def _become_empty(self, group: Group) -> None:
        group.state = State.EMPTY
        group.protocol_name = group.protocol_type = group.leader = None
        self._changed(group)
        # Nothing of an empty group needs keeping: its offsets are in the store.
        self._groups.pop(group.group_id, None)

    # --- SyncGroup -------------------------------------------------------------------------

    async def sync(
        self, key: str, *, generation_id: int, member_id: str,
        assignments: dict[str, bytes], instance_id: str | None = None,
        protocol_type: str | None = None, protocol_name: str | None = None,
    ) -> SyncResult:
        group = self._groups.get(key)
        if group is None or group.state in (State.EMPTY, State.DEAD):
            return SyncResult(Err.UNKNOWN_MEMBER_ID)
        if (fenced := self._fenced(group, member_id, instance_id)) is not Err.NONE:
            return SyncResult(fenced)
        member = group.members.get(member_id)
        if member is None:
            return SyncResult(Err.UNKNOWN_MEMBER_ID)
        if generation_id != group.generation:
            return SyncResult(Err.ILLEGAL_GENERATION)
        if (protocol_type and protocol_type != group.protocol_type) or (
                protocol_name and protocol_name != group.protocol_name):
            return SyncResult(Err.INCONSISTENT_GROUP_PROTOCOL)
        if group.state is State.PREPARING_REBALANCE:
            return SyncResult(Err.REBALANCE_IN_PROGRESS)
        if group.state is State.STABLE:
            self._schedule_expiry(group, member)
            return self._sync_result(group, member)
        self._resolve_sync(member, SyncResult(Err.REBALANCE_IN_PROGRESS))  # an earlier one
        waiter = member.sync_waiter = self._loop().create_future()
        if member_id == group.leader:
            for other in group.members.values():
                other.assignment = assignments.get(other.member_id, b"")
            group.state = State.STABLE
            for other in group.members.values():
                self._resolve_sync(other, self._sync_result(group, other))
            self._changed(group)
        return await waiter

    def _sync_result(self, group: Group, member: Member) -> SyncResult:
        return SyncResult(Err.NONE, member.assignment, group.protocol_type, group.protocol_name)

    def _resolve_sync(self, member: Member, result: SyncResult) -> None:
        waiter, member.sync_waiter = member.sync_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(result)

    # --- Heartbeat and LeaveGroup ----------------------------------------------------------

    def heartbeat(self, key: str, *, generation_id: int, member_id: str,
                  instance_id: str | None = None) -> Err:
        group = self._groups.get(key)
        if group is None or group.state in (State.EMPTY, State.DEAD):
            return Err.UNKNOWN_MEMBER_ID
        if (fenced := self._fenced(group, member_id, instance_id)) is not Err.NONE:
            return fenced
        member = group.members.get(member_id)
        if member is None:
            return Err.UNKNOWN_MEMBER_ID
        if generation_id != group.generation:
            return Err.ILLEGAL_GENERATION
        self._schedule_expiry(group, member)
        if group.state is State.PREPARING_REBALANCE:
            return Err.REBALANCE_IN_PROGRESS
        return Err.NONE

    def leave(self, key: str, members: list[tuple[str, str | None]]) -> list[Err]:
        """LeaveGroup (v3+ carries several members): an error per (member id, instance id)."""
        group = self._groups.get(key)
        errors = []
        for member_id, instance_id in members:
            if group is None:
                errors.append(Err.UNKNOWN_MEMBER_ID)
                continue
            if not member_id and instance_id:
                member_id = group.static.get(instance_id, "")
            if member_id in group.pending:
                group.pending.pop(member_id).cancel()
                errors.append(Err.NONE)
            elif (fenced := self._fenced(group, member_id, instance_id)) is not Err.NONE:
                errors.append(fenced)
            elif (member := group.members.get(member_id)) is None:
                errors.append(Err.UNKNOWN_MEMBER_ID)
            else:
                self._member_left(group, member)
                errors.append(Err.NONE)
        if group is not None:
            self._maybe_complete_join(group)
        return errors

    # --- members leaving -------------------------------------------------------------------

    def _member_left(self, group: Group, member: Member) -> None:
        self._remove(group, member)
        if group.state in (State.STABLE, State.COMPLETING_REBALANCE):
            self._prepare_rebalance(group)
        self._maybe_complete_join(group)
        self._changed(group)

    def _remove(self, group: Group, member: Member) -> None:
        group.members.pop(member.member_id, None)
        if member.instance_id and group.static.get(member.instance_id) == member.member_id:
            del group.static[member.instance_id]
        self._cancel_expiry(member)
        if member.join_waiter is not None and not member.join_waiter.done():
            member.join_waiter.set_result(JoinResult(Err.UNKNOWN_MEMBER_ID))
        self._resolve_sync(member, SyncResult(Err.UNKNOWN_MEMBER_ID))

    def _schedule_expiry(self, group: Group, member: Member) -> None:
        self._cancel_expiry(member)
        member.expiry = self._loop().call_later(member.session_timeout_ms / 1000, self._expire,
                                                group, member)

    def _cancel_expiry(self, member: Member) -> None:
        if member.expiry is not None:
            member.expiry.cancel()
            member.expiry = None

    def _expire(self, group: Group, member: Member) -> None:
        if group.members.get(member.member_id) is not member:
            return
        if member.awaiting():
            self._schedule_expiry(group, member)
            return
        self._member_left(group, member)

    def _expire_pending(self, group: Group, member_id: str) -> None:
        if group.pending.pop(member_id, None) is not None:
            self._maybe_complete_join(group)
            if not group.members and group.state is State.EMPTY:
                self._groups.pop(group.group_id, None)

    def _fenced(self, group: Group, member_id: str, instance_id: str | None) -> Err:
        if instance_id and group.static.get(instance_id, member_id) != member_id:
            return Err.FENCED_INSTANCE_ID
        return Err.NONE

    def _changed(self, group: Group) -> None:
        if self._on_change is not None:
            self._on_change(group.view())

    @staticmethod
    def _loop() -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()
