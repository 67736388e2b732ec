"""What the group and offset handlers share: the listener's coordinator and board, the
tenant-scoped group key of a connection's user, which listener coordinates a group, and the
groups a user sees.

A user sees a group of their tenant (the tenant in its key) when it is live and reads no
stream or one they may consume from, or when it has committed cursors in a stream of that
tenant they hold consumeperm on. Another tenant's groups never show, whatever the ACEs say.
"""

from __future__ import annotations

import asyncio
import functools
import time
import weakref
import zlib
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import InterfaceError, OperationalError, connection

from accounts.models import Membership
from broker import errors
from broker.errors import KafkaError
from broker.session import Listener, Node, Session
from replication.groups import consumer
from replication.groups.board import GroupBoard, group_key
from replication.groups.consumer import ConsumerGroups
from replication.groups.coordinator import Coordinator, Limits
from replication.groups.model import GroupView
from replication.models import Stream
from replication.services.names import topic_listing
from replication.stores import store_for

NOT_COORDINATOR = errors.ErrorCode.not_coordinator
INVALID_GROUP_ID = errors.ErrorCode.invalid_group_id
VIEW_SECONDS = 5.0  # how long a connection's readable streams and committed groups are reused


@dataclass
class ListenerGroups:
    coordinator: Coordinator  # the classic protocol's groups
    consumer: ConsumerGroups  # KIP-848's
    board: GroupBoard
    task: asyncio.Task[None] | None = None

    def live(self, key: str) -> GroupView | None:
        """The group with members under either protocol (one key is one or the other)."""
        view = self.coordinator.describe(key)
        if view is not None and view.members:
            return view
        group = self.consumer.get(key)
        return consumer.view(group) if group is not None else None

    def validate_commit(self, key: str, *, generation_id: int, member_id: str,
                        instance_id: str | None) -> int:
        """OffsetCommit's member check, by the protocol the group runs: a KIP-848 member's
        generation is its member epoch."""
        if self.consumer.get(key) is not None:
            return int(self.consumer.validate(key, member_id, generation_id))
        return int(self.coordinator.validate_commit(
            key, generation_id=generation_id, member_id=member_id, instance_id=instance_id))

    def group_keys(self) -> list[str]:
        return sorted({*self.coordinator.group_keys(), *self.consumer.group_keys()})


@dataclass
class SessionGroups:
    tenant_id: int | None = None
    readable: tuple[float, set[str]] | None = None
    committed: tuple[float, set[str]] | None = None


_listeners: dict[int, ListenerGroups] = {}  # by id(listener): one per process
_sessions: weakref.WeakKeyDictionary[Session, SessionGroups] = weakref.WeakKeyDictionary()


def _limits() -> Limits:
    return Limits(
        min_session_ms=getattr(settings, "KAFKA_GROUP_MIN_SESSION_MS", 6_000),
        max_session_ms=getattr(settings, "KAFKA_GROUP_MAX_SESSION_MS", 1_800_000),
        initial_delay_ms=settings.KAFKA_GROUP_INITIAL_DELAY_MS)


def _consumer_settings() -> consumer.Settings:
    return consumer.Settings(session_ms=settings.KAFKA_CONSUMER_SESSION_MS,
                             heartbeat_ms=settings.KAFKA_CONSUMER_HEARTBEAT_MS)


def state_of(session: Session) -> ListenerGroups:
    """The listener's groups, created with the first group request (on the listener's loop)."""
    listener = session.listener
    state = _listeners.get(id(listener))
    if state is None:
        board = GroupBoard(functools.partial(_in_pool, listener))
        state = _listeners[id(listener)] = ListenerGroups(
            Coordinator(_limits(), on_change=board.on_change),
            ConsumerGroups(_consumer_settings(),
                           on_change=lambda group: board.on_change(consumer.view(group))),
            board)
        state.task = asyncio.get_running_loop().create_task(board.run())
    return state


async def _in_pool(listener: Listener, fn: Any, *args: Any) -> Any:
    return await asyncio.get_running_loop().run_in_executor(
        listener.executor, functools.partial(_reconnecting, fn, *args))


def _reconnecting(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except (InterfaceError, OperationalError):
        connection.close()  # a dead connection (database restart): the next call opens anew
        raise


def _session(session: Session) -> SessionGroups:
    found = _sessions.get(session)
    if found is None:
        found = _sessions[session] = SessionGroups()
    return found


def _tenant_of(user: AbstractBaseUser) -> int:
    """The tenant whose group namespace the user's groups live in: the first of theirs (0 for
    a user of none, whose groups are published nowhere)."""
    return Membership.objects.filter(user=user).order_by("tenant_id").values_list(
        "tenant_id", flat=True).first() or 0


async def group_key_of(session: Session, group_id: str) -> str:
    mine = _session(session)
    if mine.tenant_id is None:
        mine.tenant_id = await session.run_sync(_tenant_of, session.user)
    return group_key(mine.tenant_id, group_id)


def coordinator_node(session: Session, key: str) -> Node:
    """Rendezvous hashing: every listener that sees the same live set picks the same one, and
    a listener's death moves only the groups it coordinated."""
    nodes = session.listener.live_nodes()
    return max(nodes, key=lambda n: zlib.crc32(f"{key}@{n.node_id}".encode()))


async def coordinated_key(session: Session, group_id: str) -> str:
    """The group's key, when this listener coordinates it; NOT_COORDINATOR otherwise."""
    if not group_id:
        raise KafkaError(INVALID_GROUP_ID, "the group id is empty")
    key = await group_key_of(session, group_id)
    if coordinator_node(session, key).node_id != session.listener.node_id:
        raise KafkaError(NOT_COORDINATOR, "another listener coordinates this group: ask "
                                          "FindCoordinator")
    return key


def _readable(user: AbstractBaseUser, cluster: str | None, default: str | None,
              _tenant_id: int) -> set[str]:
    listing = topic_listing(actor=user, cluster=cluster, default_stream=default,
                            perms=("consumeperm",))
    return {str(r.stream.uuid) for r in listing}


def _tenant_streams(user: AbstractBaseUser, cluster: str | None, default: str | None,
                    tenant_id: int) -> list[Stream]:
    """The streams whose cursors are the user's groups: the group namespace's tenant's, with
    consumeperm (a staff user sees every tenant's streams, but groups of its own only)."""
    listing = topic_listing(actor=user, cluster=cluster, default_stream=default,
                            perms=("consumeperm",))
    return list({r.stream.pk: r.stream for r in listing
                 if r.stream.tenant_id == tenant_id}.values())


def _groups_in(stream: Stream) -> set[str]:
    return {group for group, _t, _p, _o in store_for(stream.cluster).cursors(stream.uuid)}


def _committed(user: AbstractBaseUser, cluster: str | None, default: str | None,
               tenant_id: int) -> set[str]:
    return {group for stream in _tenant_streams(user, cluster, default, tenant_id)
            for group in _groups_in(stream)}


def _holding(user: AbstractBaseUser, cluster: str | None, default: str | None,
             tenant_id: int, group: str) -> list[Stream]:
    return [stream for stream in _tenant_streams(user, cluster, default, tenant_id)
            if group in _groups_in(stream)]


async def _tenant_call(session: Session, fn: Any, *args: Any) -> Any:
    mine = _session(session)
    if mine.tenant_id is None:
        await group_key_of(session, "")
    listener = session.listener
    return await session.run_sync(fn, session.user, listener.cluster, listener.default_stream,
                                  mine.tenant_id, *args)


async def _cached(session: Session, slot: str, fn: Any) -> set[str]:
    mine = _session(session)
    held = getattr(mine, slot)
    if held is None or time.monotonic() - held[0] > VIEW_SECONDS:
        held = (time.monotonic(), await _tenant_call(session, fn))
        setattr(mine, slot, held)
    return held[1]


async def readable_streams(session: Session) -> set[str]:
    """Uuids of the streams the user may consume from."""
    return await _cached(session, "readable", _readable)


async def committed_groups(session: Session) -> set[str]:
    """Groups with committed cursors in the tenant's streams the user may consume from."""
    return await _cached(session, "committed", _committed)


async def streams_holding(session: Session, group: str) -> list[Stream]:
    """The tenant's streams the user may consume from where `group` has committed cursors,
    read now (not cached): what DeleteGroups and OffsetDelete act on."""
    return await _tenant_call(session, _holding, group)


def forget_committed(session: Session) -> None:
    """After this session deleted cursors, its next listing reads them again."""
    _session(session).committed = None


async def visible(session: Session, key: str) -> bool:
    """A live group shows to a tenant's user when it reads none of the stream, or one the
    user may read (consumeperm)."""
    streams = state_of(session).board.streams_of(key)
    return not streams or bool(streams & await readable_streams(session))
