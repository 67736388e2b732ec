"""Who may see and change which SCRAM credentials, and what a credential must be to be kept
(replication/services/credentials.py, behind the listener, /rest and the account page)."""

from __future__ import annotations

import pytest

from accounts.models import ScramCredential
from replication.errors import (
    NoCredential,
    OthersCredential,
    UnacceptableCredential,
    UnsupportedMechanism,
)
from replication.services.credentials import (
    scram_credential_delete,
    scram_credential_set,
    scram_credentials,
)
from tests.factories import UserFactory


def test_a_user_manages_their_own_and_reads_only_their_own(owner, member):
    scram_credential_set(actor=owner, mechanism="SCRAM-SHA-256", password="pw")
    scram_credential_set(actor=member, mechanism="SCRAM-SHA-512", password="pw")
    assert list(scram_credentials(actor=owner)) == ["alice"]
    with pytest.raises(OthersCredential, match="may manage only their own"):
        scram_credentials(actor=owner, usernames=["bob"])
    with pytest.raises(OthersCredential):
        scram_credential_delete(actor=owner, mechanism="SCRAM-SHA-512", username="bob")
    assert ScramCredential.objects.count() == 2


def test_another_user_is_refused_alike_whether_or_not_they_exist(owner):
    for name in ("bob", "nobody-at-all"):
        with pytest.raises(OthersCredential) as refused:
            scram_credential_set(actor=owner, mechanism="SCRAM-SHA-256", password="x",
                                 username=name)
        assert str(refused.value).replace(name, "<u>") == (
            "alice may manage only their own SCRAM credentials, not <u>'s: an operator may "
            "manage anyone's")


def test_an_operator_manages_anyone_but_a_superuser(owner, operator):
    scram_credential_set(actor=operator, mechanism="SCRAM-SHA-256", password="x",
                         username="alice")
    assert list(scram_credentials(actor=operator)) == ["alice"]
    root = UserFactory(username="root", is_staff=True, is_superuser=True)
    with pytest.raises(OthersCredential, match="only a superuser"):
        scram_credential_set(actor=operator, mechanism="SCRAM-SHA-256", password="x",
                             username="root")
    scram_credential_set(actor=root, mechanism="SCRAM-SHA-256", password="x", username="ops")
    with pytest.raises(NoCredential, match="does not exist"):
        scram_credentials(actor=operator, usernames=["nobody"])


@pytest.mark.parametrize(("given", "refusal"), [
    ({"iterations": 4095}, UnacceptableCredential),
    ({"iterations": 16385}, UnacceptableCredential),
    ({"password": ""}, UnacceptableCredential),
    ({"password": "bad\u0007char"}, UnacceptableCredential),  # SASLprep refuses controls
    ({"mechanism": "SCRAM-SHA-1"}, UnsupportedMechanism),
])
def test_what_is_not_kept(owner, given, refusal):
    with pytest.raises(refusal):
        scram_credential_set(actor=owner, **{"mechanism": "SCRAM-SHA-256", "password": "pw",
                                             **given})
    assert not ScramCredential.objects.exists()


def test_a_new_password_replaces_the_credential_and_its_salt(owner):
    first = scram_credential_set(actor=owner, mechanism="SCRAM-SHA-256", password="pw")
    again = scram_credential_set(actor=owner, mechanism="SCRAM-SHA-256", password="pw")
    assert ScramCredential.objects.count() == 1 and first.pk == again.pk
    assert bytes(first.salt) != bytes(again.salt)
    assert bytes(first.stored_key) != bytes(again.stored_key)
