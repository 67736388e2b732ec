"""API token scopes at the permission choke point: Stream.require and Stream.perms_of mask
what the signed-in token's scope does not cover (`scope_require`, `scope_mask`), and the few
actions outside a stream's ACEs (creating streams, credentials, operator settings) ask
`scope_require` for the scope they need. Browser sessions and SCRAM sign-ins hold the admin
scope: a scope only narrows what a token may do, never widens what its user may."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from accounts.models import SCOPE_ORDER, SCOPE_PERMS, TokenScope
from accounts.tokens import token_scope
from replication.errors import PermissionDenied


class ScopeDenied(PermissionDenied):
    """An action on a stream that the token's scope does not cover (Kafka: the topic's)."""


class ClusterScopeDenied(PermissionDenied, kafka_error="cluster_authorization_failed"):
    """An action outside any stream that the token's scope does not cover."""


def scope_label(scope: str) -> str:
    return "read-only" if scope == TokenScope.READ else str(scope)


def scope_mask(actor: Any, perms: frozenset[str]) -> frozenset[str]:
    """`perms` less those the actor's token scope does not cover."""
    scope = token_scope(actor)
    return perms if scope == TokenScope.ADMIN else perms & SCOPE_PERMS[scope]


def _needed(perms: Iterable[str]) -> str:
    wanted = set(perms)
    return next(s for s in SCOPE_ORDER if SCOPE_PERMS[s] & wanted)


def _refuse(actor: Any, needed: str, action: str, error: type[PermissionDenied]) -> None:
    raise error(f"this API token's scope is {scope_label(token_scope(actor))}: {action} needs "
                f"the {scope_label(needed)} scope; make a token with that scope on the "
                "account page's Tokens page")


def scope_require_perms(actor: Any, perms: Iterable[str], *, action: str) -> None:
    """Pass when the actor's token scope covers any one of the stream permissions `perms`."""
    perms = tuple(perms)
    if scope_mask(actor, frozenset(perms)):
        return
    _refuse(actor, _needed(perms), action, ScopeDenied)


def scope_require(actor: Any, needed: str, *, action: str, stream: bool = False) -> None:
    """Pass when the actor's token scope is `needed` or wider; `stream`: the action is on a
    stream (Kafka answers TOPIC_ rather than CLUSTER_AUTHORIZATION_FAILED)."""
    held = token_scope(actor)
    if SCOPE_ORDER.index(held) >= SCOPE_ORDER.index(needed):
        return
    _refuse(actor, needed, action, ScopeDenied if stream else ClusterScopeDenied)
