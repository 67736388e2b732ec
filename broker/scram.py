"""The server side of one SASL/SCRAM-SHA-256 or -512 exchange (RFC 5802, RFC 7677), by scramp.

Two rounds, each one SaslAuthenticate (or one bare frame after SaslHandshake v0): the
client-first message is answered with the salt and iteration count of the user's credential
(a decoy's for a name without one: accounts/scram.py), the client-final message's proof is
checked against the StoredKey and answered with the server's signature. Each round runs in the
listener's thread pool, since the credential is read from the database and the check is a
hash computation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scramp import ScramException, ScramMechanism

from broker import errors
from broker.errors import KafkaError

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

    from accounts.scram import ScramKeys
    from accounts.tokens import TokenGrant
    from broker.session import Session

Found = tuple["AbstractBaseUser", "TokenGrant"]


class ScramExchange:
    def __init__(self, mechanism: str) -> None:
        self.mechanism = mechanism
        self.server = ScramMechanism(mechanism).make_server(self._keys_of)
        self.username = ""
        self.keys: ScramKeys | None = None
        self.started = False

    async def step(self, session: Session, data: bytes) -> tuple[bytes, Found | None]:
        """The answer to the client's next message, and who signed in once the proof holds
        (None while the exchange goes on)."""
        if not self.started:
            self.started = True
            return await session.run_sync(self._first, data), None
        return await session.run_sync(self._final, data)

    def _keys_of(self, username: str) -> tuple[bytes, bytes, bytes, int]:
        from accounts.scram import credential_keys

        self.username = username
        self.keys = credential_keys(username, self.mechanism)
        return self.keys.auth_info()

    def _first(self, data: bytes) -> bytes:
        try:
            self.server.set_client_first(data.decode())
            return self.server.get_server_first().encode()
        except (ScramException, UnicodeError) as error:
            raise KafkaError(errors.SASL_AUTHENTICATION_FAILED,
                             f"malformed {self.mechanism} client-first message: {error}"
                             ) from error

    def _final(self, data: bytes) -> tuple[bytes, Found]:
        from accounts.scram import scram_grant

        try:
            self.server.set_client_final(data.decode())
            answer = self.server.get_server_final().encode()
        except (ScramException, UnicodeError) as error:
            raise self.refused() from error
        assert self.keys is not None  # set by the first round, which succeeded
        found = scram_grant(self.username, self.mechanism, self.keys.stored_key)
        if found is None:  # the credential was replaced or deleted between the two rounds
            raise self.refused()
        return answer, found

    def refused(self) -> KafkaError:
        return KafkaError(errors.SASL_AUTHENTICATION_FAILED,
                          f"authentication failed for {self.username!r} with {self.mechanism}: "
                          "the password must be the user's SCRAM password for this mechanism "
                          "(streamgate user scram set, or the account page, sets one)")
