"""SCRAM credentials (RFC 5802, RFC 7677) for the Kafka listener's SCRAM-SHA-256 and -512.

What is kept per user and mechanism is what RFC 5802 has the server keep: the salt, the
iteration count, StoredKey and ServerKey; never the password. scramp derives them from a
password and runs the server side of the exchange; a Kafka client's AlterUserScramCredentials
sends the salted password instead (Kafka's wire form), from which the two keys follow.

A name with no credential for the mechanism gets a decoy (a salt fixed per name, keys no proof
matches), so that a client learns nothing about which users exist: every wrong sign-in fails
at the same step, the proof, as Kafka's wrong password does.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.conf import settings
from django.contrib.auth import get_user_model
from scramp import ScramMechanism as ScrampMechanism

from accounts.models import Membership, ScramCredential, ScramMechanism
from accounts.tokens import TokenGrant

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

MIN_ITERATIONS = 4096  # Kafka's ScramMechanism minIterations, RFC 7677's least
MAX_ITERATIONS = 16384  # Kafka's maxIterations: each sign-in costs the server one derivation
DEFAULT_ITERATIONS = 8192
MIN_SALT_BYTES = 12  # scramp's least, for salts a Kafka client sends
HASHES: dict[str, Callable] = {ScramMechanism.SHA_256: hashlib.sha256,
                               ScramMechanism.SHA_512: hashlib.sha512}


@dataclass(frozen=True)
class ScramKeys:
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    def auth_info(self) -> tuple[bytes, bytes, bytes, int]:
        """scramp's auth_fn answer."""
        return self.salt, self.stored_key, self.server_key, self.iterations


def keys_from_password(mechanism: str, password: str, iterations: int) -> ScramKeys:
    """The keys of `password` under a fresh random salt (scramp; SASLprep applied)."""
    salt, stored, server, count = ScrampMechanism(mechanism).make_auth_info(
        password, iteration_count=iterations)
    return ScramKeys(salt, count, stored, server)


def keys_from_salted(mechanism: str, salted_password: bytes, salt: bytes,
                     iterations: int) -> ScramKeys:
    """The keys of a SaltedPassword (Hi(password, salt, i)), as a Kafka client sends it."""
    digest = HASHES[mechanism]
    client_key = hmac.new(salted_password, b"Client Key", digest).digest()
    server_key = hmac.new(salted_password, b"Server Key", digest).digest()
    return ScramKeys(salt, iterations, digest(client_key).digest(), server_key)


def credential_keys(username: str, mechanism: str) -> ScramKeys:
    """What the server answers `username`'s client-first message with: the active user's
    credential for `mechanism`, or a decoy no proof matches."""
    found = (ScramCredential.objects
             .filter(user__username=username, user__is_active=True, mechanism=mechanism)
             .values_list("salt", "iterations", "stored_key", "server_key").first())
    if found is not None:
        salt, iterations, stored, server = found
        return ScramKeys(bytes(salt), iterations, bytes(stored), bytes(server))
    size = HASHES[mechanism]().digest_size
    salt = hmac.new(settings.SECRET_KEY.encode(), f"scram-decoy:{mechanism}:{username}".encode(),
                    hashlib.sha256).digest()
    return ScramKeys(salt, DEFAULT_ITERATIONS, secrets.token_bytes(size),
                     secrets.token_bytes(size))


def scram_grant(username: str, mechanism: str,
                stored_key: bytes) -> tuple[AbstractBaseUser, TokenGrant] | None:
    """The active user `username` and what a sign-in with their credential (the one whose
    StoredKey the client proved it knows) grants; None when that credential is gone since."""
    user = get_user_model().objects.filter(username=username, is_active=True).first()
    if user is None or not ScramCredential.objects.filter(
            user=user, mechanism=mechanism, stored_key=stored_key).exists():
        return None
    held = frozenset(Membership.objects.filter(user=user).values_list("tenant_id", "role"))
    return user, TokenGrant(stored_key.hex(), user.pk, None, held, mechanism)
