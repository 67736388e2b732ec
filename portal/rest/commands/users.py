"""user scram set|list|delete: SCRAM passwords for the Kafka listener's SCRAM-SHA-256 and
SCRAM-SHA-512 sign-ins (API tokens stay the PLAIN passwords).

    streamgate user scram set -mechanism scram-sha-256 -password 's3cret'
    streamgate user scram list
    streamgate user scram delete -mechanism scram-sha-512 -user bob     (an operator)

Your own credentials by default; an operator may name any user with -user, anyone else is
refused another user's (replication/services/credentials.py).
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser

from accounts.models import ScramCredential
from accounts.scram import DEFAULT_ITERATIONS, MAX_ITERATIONS, MIN_ITERATIONS
from portal.rest.commands.registry import Row, command
from portal.rest.options import Choice, Int, Str
from replication.figures import epoch_ms
from replication.services.credentials import (
    MECHANISMS,
    scram_credential_delete,
    scram_credential_set,
    scram_credentials,
)

MECHANISM = Choice("mechanism", "the SASL mechanism", required=True,
                   choices=tuple(m.lower() for m in MECHANISMS))
USER = Str("user", "whose credential (default: yours; another user's needs an operator)")


def credential_row(credential: ScramCredential) -> Row:
    return {"user": credential.user.get_username(), "mechanism": credential.mechanism,
            "iterations": credential.iterations, "updated": epoch_ms(credential.updated)}


@command("user/scram/set", MECHANISM,
         Str("password", "the SCRAM password (not an API token)", required=True),
         Int("iterations", f"PBKDF2 iterations, {MIN_ITERATIONS} to {MAX_ITERATIONS} "
                           f"(default {DEFAULT_ITERATIONS})",
             min=MIN_ITERATIONS, max=MAX_ITERATIONS, default=DEFAULT_ITERATIONS),
         USER,
         summary="Set a SCRAM password for Kafka clients signing in with SCRAM-SHA-256/512.",
         changes=True)
def scram_set(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    credential = scram_credential_set(actor=user, username=opts["user"],
                                      mechanism=opts["mechanism"].upper(),
                                      password=opts["password"], iterations=opts["iterations"])
    return [credential_row(credential)]


@command("user/scram/delete", MECHANISM, USER,
         summary="Delete a SCRAM password; connections signed in with it are closed.",
         changes=True)
def scram_delete(user: AbstractBaseUser, opts: dict[str, Any]) -> None:
    scram_credential_delete(actor=user, username=opts["user"],
                            mechanism=opts["mechanism"].upper())


@command("user/scram/list", USER,
         summary="List the SCRAM mechanisms a user has a password for (never the password).",
         changes=False)
def scram_list(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    names = [opts["user"]] if opts["user"] else [user.get_username()]
    found = scram_credentials(actor=user, usernames=names)
    return [credential_row(c) for credentials in found.values() for c in credentials]
