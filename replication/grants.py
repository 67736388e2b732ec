"""The one authorization cache: which of a stream's permissions a user holds.

A Kafka client sends hundreds of requests a second and each needs produceperm or consumeperm
(or, for metadata, all five); the check's queries (the user's roles and groups) cost more
than a batch's append. So every interface asks here, and the answer is kept per (user,
stream, the stream's ACEs as given): an ACE edited anywhere takes effect on the next call that
holds the edited stream. Changes of the identity behind a user (a membership added, removed
or changed, Django groups, the user row) and of ACEs in this process clear the cache at once
(`forget`, connected in ReplicationConfig.ready); another process's change of a membership is
seen within GRANT_SECONDS. Revoking a signed-in Kafka connection outright stays the listener's
revocation check (broker/revocation.py).
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from accounts.tokens import token_scope
from replication.models.streams import PERMISSIONS

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

    from replication.models import Stream

GRANT_SECONDS = 1.0
MAX_ENTRIES = 10_000
_held: dict[tuple, tuple[float, frozenset[str]]] = {}
_generation = 0
_lock = threading.Lock()


def _key(actor: AbstractBaseUser, stream: Stream) -> tuple:
    # The token's scope masks what the user holds (replication/scopes.py): two tokens of one
    # user with different scopes hold different permissions.
    return (actor.pk, token_scope(actor), stream.pk,
            *(getattr(stream, perm) for perm in PERMISSIONS))


def cached_perms(actor: AbstractBaseUser, stream: Stream) -> frozenset[str] | None:
    """The permissions held, when known and fresh; None otherwise (no query: safe to call on
    an event loop)."""
    hit = _held.get(_key(actor, stream))
    return hit[1] if hit is not None and hit[0] > time.monotonic() else None


def perms_held(actor: AbstractBaseUser, stream: Stream) -> frozenset[str]:
    """The permissions `actor` holds on `stream` (Stream.perms_of), from the cache when fresh."""
    key = _key(actor, stream)
    hit = _held.get(key)
    now = time.monotonic()
    if hit is not None and hit[0] > now:
        return hit[1]
    generation = _generation
    held = stream.perms_of(actor)
    with _lock:
        # A change that cleared the cache while this was read may not be in `held`: keep it
        # out, so the next call reads again.
        if generation == _generation:
            if len(_held) >= MAX_ENTRIES:
                _held.clear()
            _held[key] = (now + GRANT_SECONDS, held)
    return held


def grants_require(actor: AbstractBaseUser, stream: Stream, *perms: str, action: str) -> None:
    """Stream.require through the cache: passes when `actor` holds any one of `perms`."""
    if perms_held(actor, stream).isdisjoint(perms):
        stream.require(actor, *perms, action=action)  # raises, saying what is needed


def generation() -> int:
    """How many times the cache was cleared (caches built on these answers compare it)."""
    return _generation


def forget(**_signal: Any) -> None:
    """Drop every cached answer (a receiver of the changes that alter one)."""
    global _generation
    with _lock:
        _generation += 1
        _held.clear()


def connect_receivers() -> None:
    """ReplicationConfig.ready: ACE and identity changes (a stream's ACEs, a membership, a
    user or its groups saved or deleted) clear the cache."""
    from django.contrib.auth import get_user_model
    from django.db.models.signals import m2m_changed, post_delete, post_save

    from accounts.models import Membership
    from replication.models import Stream

    user = get_user_model()
    for model in (Stream, Membership, user):
        post_save.connect(forget, sender=model, dispatch_uid=f"grants-save-{model.__name__}")
        post_delete.connect(forget, sender=model, dispatch_uid=f"grants-delete-{model.__name__}")
    m2m_changed.connect(forget, sender=user.groups.through, dispatch_uid="grants-groups")
