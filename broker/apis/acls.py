"""DescribeAcls (29), CreateAcls (30) and DeleteAcls (31): Kafka's ACLs as a view of the
streams' ACEs, read and changed through the stream's own permissions (no second store of rights).

MapR grants per stream, so an ACL here is always of the form
  resource TOPIC, pattern PREFIXED, name `<stream path>:` (every topic of the stream),
  principal `User:<name>`, `Group:<name>`, `Role:<name>` or `User:*` (the ACE's u:, g:, r:, p),
  host `*`, permission ALLOW,
and its operation names the permission: WRITE produceperm, READ consumeperm, CREATE and DELETE
topicperm, ALTER and ALTER_CONFIGS adminperm (copyperm has no Kafka operation and is not shown).

Described: each ACE's top-level alternatives that grant on their own (`u:alice` of
`u:alice | (g:ops & !u:bob)`); a combination has no ACL form and is not listed. Created: one
more alternative (`stream_ace_change`, adminperm, audited as any edit); ALL grants all five
permissions. Deleted: the alternative removed from the permission's ACE, so deleting CREATE
takes DELETE with it (one permission), and the response lists both.

Refused with INVALID_REQUEST and what to use instead: other resource types (a group's offsets
follow consumeperm on the streams that hold them; the cluster belongs to operators), LITERAL
and per-topic patterns (ACEs are per stream), DENY (an ACE denies by leaving a principal out),
a host other than `*`, DESCRIBE (any permission lets a client describe the stream's topics).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from broker import errors
from broker.apis.produce import error_of
from broker.codec import build
from broker.dispatch import RequestHeader, handles, response_class
from broker.session import Session
from replication.ace import granting_terms
from replication.errors import InvalidInput, StreamgateError
from replication.models import PERMISSIONS, Stream
from replication.services.streams import stream_ace_change

ANY, TOPIC = 1, 2  # resource types (ANY also for every filter below)
MATCH, LITERAL, PREFIXED = 2, 3, 4  # pattern types
ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, ALTER_CONFIGS = 2, 3, 4, 5, 6, 7, 8, 11
ALLOW = 3
OPERATIONS = {"produceperm": (WRITE,), "consumeperm": (READ,), "topicperm": (CREATE, DELETE),
              "adminperm": (ALTER, ALTER_CONFIGS)}
PERM_OF = {op: perm for perm, ops in OPERATIONS.items() for op in ops}
KINDS = {"User": "u", "Group": "g", "Role": "r"}
PRINCIPALS = {kind: name for name, kind in KINDS.items()}


@dataclass(frozen=True, slots=True)
class Acl:
    stream: Stream
    perm: str
    term: str  # u:alice, g:ops, r:admin or p
    operation: int

    @property
    def resource_name(self) -> str:
        return f"{self.stream.path}:"

    @property
    def principal(self) -> str:
        if self.term == "p":
            return "User:*"
        kind, name = self.term.split(":", 1)
        return f"{PRINCIPALS[kind]}:{name}"

    def entry(self) -> dict[str, Any]:
        return {"principal": self.principal, "host": "*", "operation": self.operation,
                "permission_type": ALLOW}


def term_of(principal: str) -> str:
    """The ACE term of a Kafka principal ("User:alice" -> "u:alice", "User:*" -> "p")."""
    kind, _, name = principal.partition(":")
    if principal == "User:*":
        return "p"
    if kind not in KINDS or not name:
        raise InvalidInput(f"principal {principal!r}: give User:<name>, Group:<name>, "
                           "Role:<name> or User:* (the ACE terms u:, g:, r: and p)",
                           field="principal")
    return f"{KINDS[kind]}:{name}"


def _acls(streams: list[Stream]) -> Iterator[Acl]:
    for stream in streams:
        for perm, ops in OPERATIONS.items():
            for term in granting_terms(getattr(stream, perm)):
                for op in ops:
                    yield Acl(stream, perm, term, op)


def _check_filter(f: Any) -> None:
    """A filter with an UNKNOWN (0) field matches nothing Kafka can express: refused."""
    for name in ("resource_type_filter", "pattern_type_filter", "operation", "permission_type"):
        if getattr(f, name) <= 0:
            raise InvalidInput(f"{name} {getattr(f, name)} is UNKNOWN: give ANY or a value",
                               field=name)


def _matches(f: Any, acl: Acl) -> bool:
    name, wanted = acl.resource_name, f.resource_name_filter
    pattern = f.pattern_type_filter
    named = (wanted is None or (wanted.startswith(name) if pattern == MATCH else wanted == name))
    return (f.resource_type_filter in (ANY, TOPIC) and pattern in (ANY, MATCH, PREFIXED)
            and named and f.principal_filter in (None, acl.principal)
            and f.host_filter in (None, "*") and f.operation in (ANY, acl.operation)
            and f.permission_type in (ANY, ALLOW))


def _streams(actor: AbstractBaseUser, cluster: str | None) -> list[Stream]:
    streams = Stream.objects.restrict(actor).select_related("cluster", "tenant")
    return list(streams.filter(cluster__name=cluster) if cluster else streams)


# --- DescribeAcls --------------------------------------------------------------------------------


def acls_described(actor: AbstractBaseUser, cluster: str | None, f: Any) -> list[Acl]:
    _check_filter(f)
    return [acl for acl in _acls(_streams(actor, cluster)) if _matches(f, acl)]


@handles(29, 1, 3)
async def describe_acls(session: Session, header: RequestHeader, request: Any) -> Any:
    response = response_class(request)
    try:
        found = await session.run_sync(acls_described, session.user, session.listener.cluster,
                                       request)
    except InvalidInput as error:
        return build(response, throttle_time=0, error_code=errors.INVALID_REQUEST,
                     error_message=str(error), resources=[])
    resources: dict[str, list[dict[str, Any]]] = {}
    for acl in found:
        resources.setdefault(acl.resource_name, []).append(acl.entry())
    return build(response, throttle_time=0, error_code=errors.NONE, error_message=None,
                 resources=[{"resource_type": TOPIC, "resource_name": name,
                             "pattern_type": PREFIXED, "acls": entries}
                            for name, entries in resources.items()])


# --- CreateAcls ----------------------------------------------------------------------------------


def _granted(creation: Any) -> tuple[str, tuple[str, ...], str]:
    """(stream path, permissions, ACE term) a creation asks for; InvalidInput for one the ACEs
    cannot hold, saying what to ask instead."""
    name = creation.resource_name
    if creation.resource_type != TOPIC:
        raise InvalidInput(f"resource type {creation.resource_type}: only TOPIC ACLs exist here; "
                           "a group's offsets follow READ on the streams holding them, and the "
                           "cluster belongs to its operators", field="resource_type")
    if creation.resource_pattern_type != PREFIXED or not name.endswith(":"):
        raise InvalidInput(f"{name!r}: permissions are per stream (its ACEs), so give a PREFIXED "
                           "pattern naming all of a stream's topics, '<stream path>:'",
                           field="resource_name")
    if creation.host != "*":
        raise InvalidInput(f"host {creation.host!r}: ACEs do not depend on the client's host; "
                           "give '*'", field="host")
    if creation.permission_type != ALLOW:
        raise InvalidInput("only ALLOW: an ACE denies by leaving a principal out, so delete "
                           "the ALLOW instead", field="permission_type")
    if creation.operation == ALL:
        perms: tuple[str, ...] = PERMISSIONS
    elif creation.operation in PERM_OF:
        perms = (PERM_OF[creation.operation],)
    else:
        raise InvalidInput(f"operation {creation.operation}: give WRITE (produceperm), READ "
                           "(consumeperm), CREATE or DELETE (topicperm), ALTER or ALTER_CONFIGS "
                           "(adminperm) or ALL; any of them lets a client DESCRIBE",
                           field="operation")
    return name[:-1], perms, term_of(creation.principal)


@transaction.atomic  # ALL grants its five permissions together or none
def acl_create(actor: AbstractBaseUser, creation: Any) -> None:
    path, perms, term = _granted(creation)
    stream = Stream.objects.restrict(actor).by_path(path, field="resource_name")
    for perm in perms:
        stream_ace_change(actor=actor, stream=stream, perm=perm, term=term, grant=True)


def acls_create(actor: AbstractBaseUser, creations: Any) -> list[dict[str, Any]]:
    results = []
    for creation in creations:
        try:
            acl_create(actor, creation)
        except Exception as error:  # this creation's answer; the others go on
            code, message = error_of(error)
            results.append({"error_code": code, "error_message": message})
        else:
            results.append({"error_code": errors.NONE, "error_message": None})
    return results


@handles(30, 1, 3)
async def create_acls(session: Session, header: RequestHeader, request: Any) -> Any:
    results = await session.run_sync(acls_create, session.user, request.creations)
    return build(response_class(request), throttle_time=0, results=results)


# --- DeleteAcls ----------------------------------------------------------------------------------


def _deleted(actor: AbstractBaseUser, cluster: str | None, f: Any) -> dict[str, Any]:
    """One filter's result: each (stream, permission, term) it matches revoked, and every ACL
    that went with it; nothing when the user lacks adminperm on one of the streams."""
    try:
        matched = acls_described(actor, cluster, f)
        for stream in {acl.stream.pk: acl.stream for acl in matched}.values():
            stream.require(actor, "adminperm", action="delete its ACLs")
    except StreamgateError as error:
        code, message = error_of(error)
        return {"error_code": code, "error_message": message, "matching_acls": []}
    grants = {(acl.stream.pk, acl.perm, acl.term): acl for acl in matched}
    out = []
    for acl in grants.values():
        try:
            stream_ace_change(actor=actor, stream=acl.stream, perm=acl.perm, term=acl.term,
                              grant=False)
            code, message = errors.NONE, None
        except Exception as error:  # this grant's answer; the others go on
            code, message = error_of(error)
        out += [{"error_code": code, "error_message": message, "resource_type": TOPIC,
                 "resource_name": acl.resource_name, "pattern_type": PREFIXED,
                 **Acl(acl.stream, acl.perm, acl.term, op).entry()}
                for op in OPERATIONS[acl.perm]]
    return {"error_code": errors.NONE, "error_message": None, "matching_acls": out}


@handles(31, 1, 3)
async def delete_acls(session: Session, header: RequestHeader, request: Any) -> Any:
    results = [await session.run_sync(_deleted, session.user, session.listener.cluster, f)
               for f in request.filters]
    return build(response_class(request), throttle_time=0, filter_results=results)
