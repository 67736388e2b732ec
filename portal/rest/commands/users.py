"""user scram set|list|delete: SCRAM passwords for the Kafka listener's SCRAM-SHA-256 and
SCRAM-SHA-512 sign-ins (API tokens stay the PLAIN passwords); user token create|list|revoke:
your API tokens (replication/services/tokens.py), as the account's Tokens page makes them.

    streamgate user scram set -mechanism scram-sha-256 -password 's3cret'
    streamgate user scram list
    streamgate user scram delete -mechanism scram-sha-512 -user bob     (an operator)
    streamgate user token create -name ci -scope produce -expires 30
    streamgate user token list
    streamgate user token revoke -id 1a2b3c4d5e6f7a8b

Your own credentials by default; an operator may name any user with -user, anyone else is
refused another user's (replication/services/credentials.py).
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser

from accounts.models import ScramCredential, TokenScope
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
from replication.services.tokens import (
    TokenRow,
    expiry_from,
    token_create,
    token_revoke,
    tokens_of,
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


# --- user token create|list|revoke: API tokens, as the account's Tokens page makes them ----

TOKEN_SCOPE = Choice("scope", "read (consume, describe), produce (and commit offsets) or admin; "
                              "at most your own token's", choices=tuple(TokenScope.values),
                     default=TokenScope.READ)


def token_row(row: TokenRow) -> Row:
    return {"id": row.id, "name": row.name, "scope": row.scope, "created": epoch_ms(row.created),
            "expiry": epoch_ms(row.expiry) if row.expiry else 0,
            "lastused": epoch_ms(row.last_used) if row.last_used else 0}


@command("user/token/create", Str("name", "the token's name, to tell it from the others",
                                  required=True),
         TOKEN_SCOPE,
         Str("expires", "days until it expires (1 to 3650), or never", default="90"),
         Str("expireson", "a date it expires instead (YYYY-MM-DD, its end of day)", default=""),
         summary="Make an API token; its secret (the token field) is shown this once.",
         changes=True)
def token_make(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    expiry = expiry_from(opts["expires"], opts["expireson"])
    token, secret = token_create(actor=user, name=opts["name"], scope=opts["scope"],
                                 expiry=expiry)
    row = next(r for r in tokens_of(actor=user) if r.id == token.digest[:16])
    return [{**token_row(row), "token": secret}]


@command("user/token/list",
         summary="List your API tokens: id, name, scope, expiry, last use (never the secret).",
         changes=False)
def token_list(user: AbstractBaseUser, opts: dict[str, Any]) -> list[Row]:
    return [token_row(row) for row in tokens_of(actor=user)]


@command("user/token/revoke", Str("id", "the token's id, as `user token list` shows it",
                                  required=True),
         summary="Revoke one of your API tokens; Kafka connections signed in with it close.",
         changes=True)
def token_remove(user: AbstractBaseUser, opts: dict[str, Any]) -> None:
    token_revoke(actor=user, token_id=opts["id"])
