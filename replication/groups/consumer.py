"""Kafka's consumer-group protocol of KIP-848 (ConsumerGroupHeartbeat), as Kafka 4's group
coordinator runs it: the coordinator assigns, members reconcile one heartbeat at a time.

No wire code: the Kafka listener (broker/apis/consumergroups.py) resolves each member's
subscription with the member's own connection (its tenant, default stream and ACEs) into
`Subscribed` topics and calls `ConsumerGroups.heartbeat` on its event loop; nothing here
awaits, so no lock is needed.

- The group epoch grows with every change of membership or of what the members subscribe to
  (a topic created, deleted or given partitions); the target assignment is recomputed for it by
  the server-side assignor the members asked for (uniform by default, or range).
- A member reaches the target in steps, as Kafka's CurrentAssignmentBuilder does: first it is
  told to give up what the target moves away (its epoch unchanged), then, once its heartbeat
  shows it no longer owns them, it takes the target epoch and every partition of its target
  that no other member still holds; the rest it gets at a later heartbeat, when released.
- A member that stops heartbeating for the session timeout, or does not give up its partitions
  within its rebalance timeout, is removed; a static member (instance id) that leaves with
  epoch -2 keeps its place for the session timeout and its successor takes it over.

Groups are in memory only, as the classic coordinator's: after a listener restart members get
UNKNOWN_MEMBER_ID and join again with epoch 0. Committed offsets are the stream's cursors.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from uuid import UUID

from replication.groups.assignors import (
    ASSIGNORS,
    Assignment,
    encode_assignment,
    intersect,
    minus,
    overlaps,
    ranges,
    uniform,
    union,
    within,
)
from replication.groups.model import GroupView, MemberView


class Err(IntEnum):
    NONE = 0
    INVALID_REQUEST = 42
    GROUP_ID_NOT_FOUND = 69
    UNKNOWN_MEMBER_ID = 25
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113


@dataclass(frozen=True)
class Subscribed:
    """A topic a member subscribes to, as its connection resolved it."""

    topic_id: UUID
    name: str  # the name the member's client knows it by
    partitions: int
    stream: str = ""  # the stream's uuid, path and the topic's name inside it (the board's)
    path: str = ""
    topic: str = ""


@dataclass(frozen=True)
class Settings:
    """Kafka's group.consumer.session.timeout.ms and group.consumer.heartbeat.interval.ms."""

    session_ms: int = 45_000
    heartbeat_ms: int = 5_000


@dataclass
class Member:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = 300_000
    names: tuple[str, ...] = ()
    regex: str | None = None
    assignor: str | None = None
    topics: dict[UUID, Subscribed] = field(default_factory=dict)
    epoch: int = 0
    previous_epoch: int = -1
    assigned: Assignment = field(default_factory=dict)  # what it may own now
    revoking: Assignment = field(default_factory=dict)  # what it must give up first
    owned: Assignment = field(default_factory=dict)  # what its last full heartbeat said
    sent: Assignment | None = None  # the assignment last answered with
    left: bool = False  # a static member gone with epoch -2, its place kept
    expiry: asyncio.TimerHandle | None = None
    revoke_deadline: asyncio.TimerHandle | None = None


@dataclass
class Group:
    key: str
    epoch: int = 0
    target_epoch: int = 0
    target: dict[str, Assignment] = field(default_factory=dict)
    members: dict[str, Member] = field(default_factory=dict)
    static: dict[str, str] = field(default_factory=dict)  # instance id -> member id

    @property
    def topics(self) -> dict[UUID, Subscribed]:
        """Every subscribed topic, with the most partitions any member's connection saw
        (partitions are only ever added; a member may have resolved it before)."""
        found: dict[UUID, Subscribed] = {}
        for member in self.members.values():
            for tid, topic in member.topics.items():
                if tid not in found or topic.partitions > found[tid].partitions:
                    found[tid] = topic
        return found

    @property
    def assignor(self) -> str:
        asked = sorted(m.assignor for m in self.members.values() if m.assignor)
        return max(asked, key=asked.count) if asked else ASSIGNORS[0]

    @property
    def state(self) -> str:
        """Kafka's ConsumerGroupState names."""
        if not self.members:
            return "Empty"
        if self.target_epoch != self.epoch:
            return "Assigning"
        if any(m.epoch != self.target_epoch or m.revoking or m.assigned != self.target.get(mid)
               for mid, m in self.members.items()):
            return "Reconciling"
        return "Stable"


@dataclass(frozen=True)
class Beat:
    """One ConsumerGroupHeartbeat, its fields as the protocol defines them (None: unchanged)."""

    member_id: str
    epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    names: tuple[str, ...] | None = None
    regex: str | None = None
    assignor: str | None = None
    owned: Assignment | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True)
class BeatResult:
    error: Err
    message: str = ""
    member_id: str = ""
    epoch: int = -1
    assignment: Assignment | None = None  # None: unchanged since the last answer


OnChange = Callable[[Group], None]


class ConsumerGroups:
    """Every KIP-848 group one listener coordinates, keyed by the tenant-scoped group key."""

    def __init__(self, settings: Settings | None = None,
                 on_change: OnChange | None = None) -> None:
        self.settings = settings or Settings()
        self._on_change = on_change
        self._groups: dict[str, Group] = {}

    # --- queries ---------------------------------------------------------------------------

    def get(self, key: str) -> Group | None:
        group = self._groups.get(key)
        return group if group is not None and group.members else None

    def group_keys(self) -> list[str]:
        return sorted(key for key, group in self._groups.items() if group.members)

    def subscription(self, key: str, member_id: str) -> tuple[tuple[str, ...], str | None]:
        """The names and regex the member subscribed with, for a heartbeat that left them out
        (the listener resolves them again, so topics created meanwhile join the assignment)."""
        group = self._groups.get(key)
        member = group.members.get(member_id) if group else None
        return (member.names, member.regex) if member else ((), None)

    def validate(self, key: str, member_id: str, epoch: int) -> Err:
        """OffsetCommit's and OffsetFetch's member check: NONE when the group is not one of
        these (the classic coordinator decides), or the member is current."""
        group = self.get(key)
        if group is None:
            return Err.NONE
        if not member_id and epoch < 0:
            return Err.UNKNOWN_MEMBER_ID  # an admin's commit, while members consume
        member = group.members.get(member_id)
        if member is None or member.left:
            return Err.UNKNOWN_MEMBER_ID
        if epoch > member.epoch:
            return Err.FENCED_MEMBER_EPOCH
        return Err.NONE if epoch == member.epoch else Err.STALE_MEMBER_EPOCH

    def remove_group(self, key: str) -> bool:
        """DeleteGroups: only a group with no member goes."""
        group = self._groups.get(key)
        if group is not None and group.members:
            return False
        self._groups.pop(key, None)
        return True

    # --- ConsumerGroupHeartbeat -------------------------------------------------------------

    def heartbeat(self, key: str, beat: Beat, topics: dict[UUID, Subscribed] | None) -> BeatResult:
        """`topics`: the member's subscription as its connection resolves it now (None when it
        subscribes to nothing yet)."""
        if (problem := _invalid(beat)) is not None:
            return BeatResult(Err.INVALID_REQUEST, problem, beat.member_id)
        if beat.assignor is not None and beat.assignor not in ASSIGNORS:
            return BeatResult(Err.UNSUPPORTED_ASSIGNOR,
                              f"server assignor {beat.assignor!r} is not one of "
                              f"{', '.join(ASSIGNORS)}", beat.member_id)
        if beat.epoch < 0:
            return self._leave(key, beat)
        group = self._groups.get(key)
        if group is None:
            if beat.epoch != 0:
                return BeatResult(Err.UNKNOWN_MEMBER_ID, "the group is not known here (the "
                                  "listener restarted): join again with epoch 0", beat.member_id)
            group = self._groups[key] = Group(key)
        member, error = self._member(group, beat)
        if member is None:
            return BeatResult(error, _MESSAGES.get(error, ""), beat.member_id)
        self._update(group, member, beat, topics)
        self._keep_alive(group, member)
        if group.target_epoch != group.epoch:
            self._assign(group)
        self._reconcile(group, member)
        return self._answer(group, member, full=beat.epoch == 0 or beat.owned is not None)

    def _member(self, group: Group, beat: Beat) -> tuple[Member | None, Err]:
        member = group.members.get(beat.member_id)
        if beat.epoch == 0:
            if member is not None:  # rejoining: what it held it holds no more
                member.epoch, member.previous_epoch, member.left = 0, -1, False
                member.assigned, member.revoking = {}, {}
                self._cancel(member, "revoke_deadline")
                return member, Err.NONE
            return self._join(group, beat)
        if member is None or member.left:
            return None, Err.UNKNOWN_MEMBER_ID
        if beat.epoch == member.epoch:
            return member, Err.NONE
        # The answer that raised the epoch was lost: the member may go on from the one before.
        owned = beat.owned if beat.owned is not None else member.owned
        if beat.epoch == member.previous_epoch and within(owned, member.assigned):
            return member, Err.NONE
        return None, Err.FENCED_MEMBER_EPOCH

    def _join(self, group: Group, beat: Beat) -> tuple[Member | None, Err]:
        member = Member(beat.member_id, instance_id=beat.instance_id)
        if beat.instance_id and beat.instance_id in group.static:
            old = group.members.get(group.static[beat.instance_id])
            if old is not None and not old.left:
                return None, Err.UNRELEASED_INSTANCE_ID
            if old is not None:  # its successor takes its place over: no rebalance
                self._drop_timers(old)
                del group.members[old.member_id]
                for slot in ("names", "regex", "assignor", "topics", "assigned", "revoking",
                             "epoch", "previous_epoch"):
                    setattr(member, slot, getattr(old, slot))
                group.target[member.member_id] = group.target.pop(old.member_id, {})
                group.static[beat.instance_id] = beat.member_id
                group.members[beat.member_id] = member
                return member, Err.NONE
        if beat.instance_id:
            group.static[beat.instance_id] = beat.member_id
        group.members[beat.member_id] = member
        group.epoch += 1
        return member, Err.NONE

    def _update(self, group: Group, member: Member, beat: Beat,
                topics: dict[UUID, Subscribed] | None) -> None:
        before = (member.names, member.regex, member.assignor, _shape(member.topics))
        member.client_id, member.client_host = beat.client_id, beat.client_host
        if beat.rack_id is not None:
            member.rack_id = beat.rack_id
        if beat.rebalance_timeout_ms > 0:
            member.rebalance_timeout_ms = beat.rebalance_timeout_ms
        if beat.names is not None:
            member.names = beat.names
        if beat.regex is not None:
            member.regex = beat.regex or None
        if beat.assignor is not None:
            member.assignor = beat.assignor
        if topics is not None:
            member.topics = topics
        if beat.owned is not None:
            member.owned = beat.owned
        elif beat.epoch == 0:
            member.owned = {}
        if (member.names, member.regex, member.assignor, _shape(member.topics)) != before:
            group.epoch += 1

    # --- assignment --------------------------------------------------------------------------

    def _assign(self, group: Group) -> None:
        """The target assignment for the group epoch, sticky: a partition stays with its
        current target member while the member still subscribes and holds no more than its
        share."""
        members = sorted(group.members)  # a static member gone with -2 keeps its share
        target: dict[str, Assignment] = {m: {} for m in members}
        for tid, topic in sorted(group.topics.items(), key=lambda t: t[1].name):
            takers = [m for m in members if tid in group.members[m].topics]
            if not takers:
                continue
            if group.assignor == "range":
                placed = ranges(topic.partitions, takers)
            else:
                previous = {p: m for m in takers for p in group.target.get(m, {}).get(tid, ())}
                placed = uniform(topic.partitions, takers, previous)
            for m, partitions in placed.items():
                if partitions:
                    target[m][tid] = frozenset(partitions)
        group.target, group.target_epoch = target, group.epoch
        self._changed(group)

    def _reconcile(self, group: Group, member: Member) -> None:
        """One step of the member towards its target (Kafka's CurrentAssignmentBuilder)."""
        target = group.target.get(member.member_id, {})
        if member.revoking:
            if overlaps(member.owned, member.revoking):
                return  # still giving them up
            member.revoking = {}
            self._cancel(member, "revoke_deadline")
        keep = intersect(member.assigned, target)
        leaving = minus(member.assigned, target)
        if leaving:
            member.assigned, member.revoking = keep, leaving
            member.revoke_deadline = _loop().call_later(
                member.rebalance_timeout_ms / 1000, self._revoke_timed_out, group, member)
            self._changed(group)
            return
        held = self._held_by_others(group, member)
        free = {tid: frozenset(p for p in ps if (tid, p) not in held)
                for tid, ps in target.items()}
        assigned = union(keep, {tid: ps for tid, ps in free.items() if ps})
        if member.epoch != group.target_epoch or assigned != member.assigned:
            if member.epoch != group.target_epoch:
                member.previous_epoch, member.epoch = member.epoch, group.target_epoch
            member.assigned = assigned
            self._changed(group)

    @staticmethod
    def _held_by_others(group: Group, member: Member) -> set[tuple[UUID, int]]:
        return {(tid, p) for other in group.members.values() if other is not member
                for held in (other.assigned, other.revoking) for tid, ps in held.items()
                for p in ps}

    def _answer(self, group: Group, member: Member, *, full: bool) -> BeatResult:
        assignment = None
        if full or member.sent != member.assigned:
            assignment = member.sent = dict(member.assigned)
        return BeatResult(Err.NONE, "", member.member_id, member.epoch, assignment)

    # --- leaving and timing out ---------------------------------------------------------------

    def _leave(self, key: str, beat: Beat) -> BeatResult:
        group = self._groups.get(key)
        member = group.members.get(beat.member_id) if group else None
        if group is None or member is None:
            return BeatResult(Err.UNKNOWN_MEMBER_ID, _MESSAGES[Err.UNKNOWN_MEMBER_ID],
                              beat.member_id)
        if beat.epoch == -2 and member.instance_id:
            # A static member's place is kept for the session timeout: its successor (the
            # same instance id) takes its partitions over without a rebalance.
            member.left = True
            self._keep_alive(group, member)
            self._changed(group)
        else:
            self._remove(group, member)
        return BeatResult(Err.NONE, "", member.member_id, beat.epoch)

    def _remove(self, group: Group, member: Member) -> None:
        self._drop_timers(member)
        group.members.pop(member.member_id, None)
        group.target.pop(member.member_id, None)
        if member.instance_id and group.static.get(member.instance_id) == member.member_id:
            del group.static[member.instance_id]
        group.epoch += 1
        if group.members:
            self._assign(group)
        else:
            group.target, group.target_epoch = {}, group.epoch
            self._changed(group)

    def _keep_alive(self, group: Group, member: Member) -> None:
        self._cancel(member, "expiry")
        member.expiry = _loop().call_later(self.settings.session_ms / 1000, self._expired,
                                           group, member)

    def _expired(self, group: Group, member: Member) -> None:
        if group.members.get(member.member_id) is member:
            self._remove(group, member)

    def _revoke_timed_out(self, group: Group, member: Member) -> None:
        member.revoke_deadline = None
        if group.members.get(member.member_id) is member and member.revoking:
            self._remove(group, member)

    def _drop_timers(self, member: Member) -> None:
        self._cancel(member, "expiry")
        self._cancel(member, "revoke_deadline")

    @staticmethod
    def _cancel(member: Member, slot: str) -> None:
        timer = getattr(member, slot)
        if timer is not None:
            timer.cancel()
            setattr(member, slot, None)

    def _changed(self, group: Group) -> None:
        if self._on_change is not None:
            self._on_change(group)


_MESSAGES = {
    Err.UNKNOWN_MEMBER_ID: "the member is not in the group (it timed out, left, or the listener "
                           "restarted): join again with epoch 0",
    Err.FENCED_MEMBER_EPOCH: "the member's epoch is not its current one: join again with "
                             "epoch 0",
    Err.UNRELEASED_INSTANCE_ID: "another member with this instance id is still in the group",
}


def view(group: Group) -> GroupView:
    """The group as DescribeGroups, ListGroups and the board show a classic one; each
    member's assignment as a ConsumerProtocolAssignment of the names it knows topics by."""
    members = [MemberView(m.member_id, m.instance_id, m.client_id, m.client_host, b"",
                          encode_assignment(m.assigned, {t: s.name for t, s in m.topics.items()}))
               for m in group.members.values() if not m.left]
    return GroupView(group.key, group.state, group.epoch, "consumer", group.assignor, "",
                     members)


def _invalid(beat: Beat) -> str | None:
    if not beat.member_id:
        return "the member id is empty: ConsumerGroupHeartbeat v1 members choose their own"
    if beat.epoch < -2:
        return f"member epoch {beat.epoch} is not a member's epoch, 0, -1 or -2"
    if beat.epoch == 0 and beat.names is None and beat.regex is None:
        return "a member joining (epoch 0) names its subscribed topics or regex"
    if beat.epoch == 0 and beat.rebalance_timeout_ms <= 0:
        return "a member joining (epoch 0) gives its rebalance timeout"
    if beat.epoch == -2 and not beat.instance_id:
        return "only a static member (with an instance id) leaves with epoch -2"
    return None


def _shape(topics: dict[UUID, Subscribed]) -> frozenset[tuple[UUID, int]]:
    return frozenset((tid, t.partitions) for tid, t in topics.items())


def _loop() -> asyncio.AbstractEventLoop:
    return asyncio.get_running_loop()
