"""SCRAM credentials for the Kafka listener: who may see and change which, and the checks a
credential passes before it is kept. Every interface goes through here: the listener's
Describe/AlterUserScramCredentials, `streamgate user scram ...` and the account page.

A user manages their own credentials; an operator (an active staff account, the test of
accounts/admin.py and the operator-only services) anyone's, except that only a superuser
changes a superuser's (as the admin site lets only a superuser set a superuser's password:
otherwise an operator could sign in as one). Another user's, asked for by anyone else, is
refused whether that user exists or not.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from accounts.models import ScramCredential, ScramMechanism, TokenScope
from accounts.scram import (
    DEFAULT_ITERATIONS,
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    MIN_SALT_BYTES,
    ScramKeys,
    keys_from_password,
    keys_from_salted,
)
from replication.errors import (
    NoCredential,
    OthersCredential,
    UnacceptableCredential,
    UnsupportedMechanism,
)
from replication.scopes import scope_require

MECHANISMS = tuple(ScramMechanism.values)


def is_operator(user: AbstractBaseUser) -> bool:
    return bool(user.is_active and user.is_staff)


def scram_user(*, actor: AbstractBaseUser, username: str | None,
               change: bool = False) -> AbstractBaseUser:
    """The user whose credentials `actor` asks about (to `change` them, or to read): themselves
    (no name, or their own), or, for an operator only, the user named."""
    if change:
        scope_require(actor, TokenScope.ADMIN, action="changing SCRAM credentials")
    if not username or username == actor.get_username():
        return actor
    if not is_operator(actor):
        raise OthersCredential(f"{actor.get_username()} may manage only their own SCRAM "
                               f"credentials, not {username}'s: an operator may manage anyone's")
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise NoCredential(f"user {username} does not exist", field="user")
    if change and user.is_superuser and not actor.is_superuser:
        raise OthersCredential(f"{username} is a superuser: only a superuser may change a "
                               "superuser's SCRAM credentials")
    return user


def scram_mechanism(name: str) -> ScramMechanism:
    if name not in MECHANISMS:
        raise UnsupportedMechanism(f"SASL mechanism {name!r} has no SCRAM credentials: use "
                                   f"{' or '.join(MECHANISMS)}", field="mechanism")
    return ScramMechanism(name)


def _check_iterations(iterations: int) -> None:
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise UnacceptableCredential(
            f"{iterations} iterations is out of range: use {MIN_ITERATIONS} to {MAX_ITERATIONS}"
            f" (default {DEFAULT_ITERATIONS})", field="iterations")


def _keep(user: AbstractBaseUser, mechanism: ScramMechanism, keys: ScramKeys) -> ScramCredential:
    credential, _ = ScramCredential.objects.update_or_create(
        user=user, mechanism=mechanism,
        defaults={"salt": keys.salt, "iterations": keys.iterations,
                  "stored_key": keys.stored_key, "server_key": keys.server_key})
    return credential


@transaction.atomic
def scram_credential_set(*, actor: AbstractBaseUser, mechanism: str, password: str,
                         username: str | None = None,
                         iterations: int = DEFAULT_ITERATIONS) -> ScramCredential:
    """Set (or replace) a SCRAM password; a replaced one ends the connections signed in with
    it at the listeners' next revocation check, as a deleted token does."""
    user = scram_user(actor=actor, username=username, change=True)
    kind = scram_mechanism(mechanism)
    _check_iterations(iterations)
    if not password:
        raise UnacceptableCredential("the SCRAM password is empty: give one", field="password")
    try:
        keys = keys_from_password(kind, password, iterations)
    except Exception as error:  # scramp's SASLprep refusing a character
        raise UnacceptableCredential(f"the SCRAM password is not usable: {error}",
                                     field="password") from error
    return _keep(user, kind, keys)


@transaction.atomic
def scram_credential_upsert(*, actor: AbstractBaseUser, username: str, mechanism: str,
                            salt: bytes, salted_password: bytes,
                            iterations: int) -> ScramCredential:
    """Kafka's AlterUserScramCredentials upsertion: the client salted the password itself."""
    user = scram_user(actor=actor, username=username, change=True)
    kind = scram_mechanism(mechanism)
    _check_iterations(iterations)
    if len(salt) < MIN_SALT_BYTES:
        raise UnacceptableCredential(f"a salt of {len(salt)} bytes is too short: use "
                                     f"{MIN_SALT_BYTES} or more random bytes", field="salt")
    if not salted_password:
        raise UnacceptableCredential("the salted password is empty", field="password")
    return _keep(user, kind, keys_from_salted(kind, salted_password, salt, iterations))


def scram_credential_delete(*, actor: AbstractBaseUser, mechanism: str,
                            username: str | None = None) -> None:
    """Delete a SCRAM credential; the connections signed in with it are closed at the
    listeners' next revocation check."""
    user = scram_user(actor=actor, username=username, change=True)
    kind = scram_mechanism(mechanism)
    deleted, _ = ScramCredential.objects.filter(user=user, mechanism=kind).delete()
    if not deleted:
        raise NoCredential(f"{user.get_username()} has no {kind} credential to delete",
                           field="mechanism")


def scram_credentials(*, actor: AbstractBaseUser,
                      usernames: Iterable[str] | None = None) -> dict[str, list[ScramCredential]]:
    """The credentials (never their keys' use) per user name: of the users named, each
    checked as `scram_user` checks it, or, with no names, of everyone an operator sees or of
    the actor alone."""
    if usernames:
        users = [scram_user(actor=actor, username=name) for name in usernames]
        found = ScramCredential.objects.filter(user__in=users)
    elif is_operator(actor):
        found = ScramCredential.objects.all()
    else:
        found = ScramCredential.objects.filter(user=actor)
    by_user: dict[str, list[ScramCredential]] = {}
    for credential in found.select_related("user"):
        by_user.setdefault(credential.user.get_username(), []).append(credential)
    return by_user
