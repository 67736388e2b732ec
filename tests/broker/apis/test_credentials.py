"""DescribeUserScramCredentials and AlterUserScramCredentials through confluent-kafka's
AdminClient: a user sets and lists their own SCRAM credentials (and then signs in with them),
another user's are refused unless the caller is an operator, and what Kafka refuses
(iterations out of range, a credential that is not there) is refused the same way."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from accounts.models import ScramCredential
from tests.broker.conftest import KafkaEndpoint, scram_password
from tests.broker.wire import Wire

pytestmark = pytest.mark.slow
SHA256, SHA512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512


def admin(endpoint: KafkaEndpoint) -> AdminClient:
    return AdminClient(endpoint.confluent())


def describe(endpoint: KafkaEndpoint, users: list[str] | None = None):  # type: ignore[no-untyped-def]
    """What DescribeUserScramCredentials answers: every user's (no names), or the one named."""
    client = admin(endpoint)
    if users is None:
        return client.describe_user_scram_credentials().result(30)
    return client.describe_user_scram_credentials(users)[users[0]].result(30)


def upsert(user: str, mechanism: ScramMechanism = SHA256, password: bytes = b"pw",
           iterations: int = 8192) -> UserScramCredentialUpsertion:
    return UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, iterations),
                                        password)


def alter(endpoint: KafkaEndpoint, *alterations) -> dict[str, KafkaError | None]:  # type: ignore[no-untyped-def]
    """Each user's outcome: None, or the error the listener answered with."""
    outcome: dict[str, KafkaError | None] = {}
    client = admin(endpoint)  # held: a client collected mid-call fails its futures
    for user, future in client.alter_user_scram_credentials(list(alterations)).items():
        try:
            future.result(timeout=30)
            outcome[user] = None
        except KafkaException as error:
            outcome[user] = error.args[0]
    return outcome


def test_a_user_sets_their_own_scram_password_then_signs_in_with_it(kafka, owner):
    assert alter(kafka, upsert("alice", SHA256, b"via-kafka"),
                 upsert("alice", SHA512, b"via-kafka-512", 4096)) == {"alice": None}
    for mechanism, password in (("SCRAM-SHA-256", "via-kafka"), ("SCRAM-SHA-512", "via-kafka-512")):
        assert Wire(kafka.bootstrap).scram_authenticate("alice", password, mechanism)[1] \
            .error_code == 0
    described = describe(kafka, ["alice"])
    assert sorted((i.mechanism, i.iterations) for i in described.scram_credential_infos) == [
        (SHA256, 8192), (SHA512, 4096)]


def test_describing_all_shows_only_your_own_credentials(kafka, owner, member):
    scram_password(owner, "SCRAM-SHA-256")
    scram_password(member, "SCRAM-SHA-512")
    found = describe(kafka)
    assert list(found) == ["alice"]


def test_an_operator_describes_and_alters_anyones(kafka, owner, member, operator):
    scram_password(member, "SCRAM-SHA-512")
    ops = kafka.as_user(operator)
    found = describe(ops)
    assert set(found) == {"bob"}
    assert alter(ops, upsert("alice")) == {"alice": None}
    assert alter(ops, UserScramCredentialDeletion("bob", SHA512)) == {"bob": None}
    assert list(ScramCredential.objects.values_list("user__username", "mechanism")) == [
        ("alice", "SCRAM-SHA-256")]


@pytest.mark.parametrize("caller", ["member", "outsider"])
def test_another_users_credentials_are_refused(kafka, owner, member, outsider, caller):
    scram_password(owner, "SCRAM-SHA-256")
    endpoint = kafka.as_user(member if caller == "member" else outsider)
    refused = alter(endpoint, upsert("alice"), UserScramCredentialDeletion("carol", SHA256))
    assert {u: e.code() for u, e in refused.items()} == {
        "alice": KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        "carol": KafkaError.CLUSTER_AUTHORIZATION_FAILED}
    with pytest.raises(KafkaException) as described:
        describe(endpoint, ["alice"])
    assert described.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    assert "may manage only their own" in described.value.args[0].str()
    assert ScramCredential.objects.get().user == owner  # alice's untouched


@pytest.mark.parametrize("iterations", [4095, 16385])
def test_iterations_out_of_range_are_unacceptable(kafka, owner, iterations):
    refused = alter(kafka, upsert("alice", iterations=iterations))["alice"]
    assert refused.code() == KafkaError.UNACCEPTABLE_CREDENTIAL and "4096" in refused.str()
    assert not ScramCredential.objects.exists()


def test_deleting_a_credential_that_is_not_there_is_resource_not_found(kafka, owner):
    refused = alter(kafka, UserScramCredentialDeletion("alice", SHA512))["alice"]
    assert refused.code() == KafkaError.RESOURCE_NOT_FOUND
    with pytest.raises(KafkaException) as described:
        describe(kafka, ["alice"])
    assert described.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND


def test_one_users_changes_apply_together_or_not_at_all(kafka, owner):
    scram_password(owner, "SCRAM-SHA-256")
    refused = alter(kafka, UserScramCredentialDeletion("alice", SHA256),
                    upsert("alice", SHA512, iterations=100))["alice"]
    assert refused.code() == KafkaError.UNACCEPTABLE_CREDENTIAL
    assert ScramCredential.objects.filter(user=owner, mechanism="SCRAM-SHA-256").exists()


def test_describe_and_alter_on_the_wire_before_sign_in_close_the_connection(kafka):
    wire = Wire(kafka.bootstrap)
    wire.send(50, 0, users=None)
    assert wire.closed()
