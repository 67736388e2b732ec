"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51): a user's SCRAM
credentials through Kafka's own admin calls (kafka-configs --alter --add-config
'SCRAM-SHA-256=[password=...]', AdminClient.alterUserScramCredentials), through the same
service as the command line and the account page (replication/services/credentials.py): a
user's own credentials, anyone's for an operator.

Answers as Kafka's: one result per user named (per user affected, for Alter), each with its
own error; a user named twice (Describe), or a (user, mechanism) changed twice (Alter), is
DUPLICATE_RESOURCE; a user's changes are applied together or not at all.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from broker import errors
from broker.codec import build
from broker.dispatch import RequestHeader, handles, response_class
from broker.session import Session
from replication.errors import NoCredential, StreamgateError, UnacceptableCredential
from replication.services.credentials import (
    scram_credential_delete,
    scram_credential_upsert,
    scram_credentials,
)

KAFKA_MECHANISMS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}  # Kafka's ScramMechanism types
KAFKA_TYPES = {name: number for number, name in KAFKA_MECHANISMS.items()}


def _result(user: str, error: StreamgateError | None = None, **extra: Any) -> dict[str, Any]:
    if error is None:
        return {"user": user, "error_code": errors.NONE, **extra}
    return {"user": user, "error_code": errors.code_of(error), "error_message": error.desc,
            **extra}


def describe_one(actor: AbstractBaseUser, name: str) -> dict[str, Any]:
    try:
        found = scram_credentials(actor=actor, usernames=[name]).get(name, [])
        if not found:
            raise NoCredential(f"{name} has no SCRAM credential: set one first")
    except StreamgateError as error:
        return _result(name, error, credential_infos=[])
    return _result(name, credential_infos=[
        {"mechanism": KAFKA_TYPES[c.mechanism], "iterations": c.iterations} for c in found])


def describe(actor: AbstractBaseUser, names: list[str]) -> list[dict[str, Any]]:
    if not names:
        return [_result(user, credential_infos=[
                    {"mechanism": KAFKA_TYPES[c.mechanism], "iterations": c.iterations}
                    for c in found])
                for user, found in scram_credentials(actor=actor).items()]
    twice = {name for name, count in Counter(names).items() if count > 1}
    return [{"user": name, "error_code": errors.DUPLICATE_RESOURCE,
             "error_message": f"{name} is named twice: name each user once",
             "credential_infos": []} if name in twice else describe_one(actor, name)
            for name in dict.fromkeys(names)]


@handles(50, 0, 0)
async def describe_user_scram_credentials(session: Session, header: RequestHeader,
                                          request: Any) -> Any:
    names = [user.name for user in request.users or ()]
    results = await session.run_sync(describe, session.user, names)
    return build(response_class(request), throttle_time=0, error_code=errors.NONE,
                 results=results)


def _mechanism(number: int) -> str:
    if number not in KAFKA_MECHANISMS:
        raise UnacceptableCredential(f"unknown SCRAM mechanism {number}: use 1 (SCRAM-SHA-256) "
                                     "or 2 (SCRAM-SHA-512)")
    return KAFKA_MECHANISMS[number]


def alter_user(actor: AbstractBaseUser, name: str, deletions: list[Any],
               upsertions: list[Any]) -> StreamgateError | None:
    """Apply one user's deletions and upsertions together; the error that stopped them."""
    try:
        if not name:
            raise UnacceptableCredential("a SCRAM credential needs a user name")
        with transaction.atomic():
            for item in deletions:
                scram_credential_delete(actor=actor, username=name,
                                        mechanism=_mechanism(item.mechanism))
            for item in upsertions:
                scram_credential_upsert(actor=actor, username=name,
                                        mechanism=_mechanism(item.mechanism), salt=item.salt,
                                        salted_password=item.salted_password,
                                        iterations=item.iterations)
    except StreamgateError as error:
        return error
    return None


def alter(actor: AbstractBaseUser, deletions: tuple, upsertions: tuple) -> list[dict[str, Any]]:
    changes = Counter((item.name, item.mechanism) for item in (*deletions, *upsertions))
    twice = {name for (name, _), count in changes.items() if count > 1}
    results = []
    for name in dict.fromkeys(name for name, _ in changes):
        if name in twice:
            results.append({"user": name, "error_code": errors.DUPLICATE_RESOURCE,
                            "error_message": f"a SCRAM credential of {name} is changed twice: "
                                             "change each mechanism once per request"})
            continue
        error = alter_user(actor, name, [d for d in deletions if d.name == name],
                           [u for u in upsertions if u.name == name])
        results.append(_result(name, error))
    return results


@handles(51, 0, 0)
async def alter_user_scram_credentials(session: Session, header: RequestHeader,
                                       request: Any) -> Any:
    results = await session.run_sync(alter, session.user, request.deletions, request.upsertions)
    return build(response_class(request), throttle_time=0, results=results)
