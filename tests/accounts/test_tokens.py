"""API tokens: knox's checks without its per-request read of every token of the user."""

from datetime import timedelta

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from knox.models import AuthToken
from rest_framework.test import APIClient

from accounts.tokens import grants_revoked


def _client(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client


def test_token_authenticates_without_reading_the_users_other_tokens(owner):
    token = AuthToken.objects.create(owner)[1]
    AuthToken.objects.create(owner)  # another token of alice's: knox would read both
    client = _client(token)
    assert client.get("/api/v1/clusters/").status_code == 200
    with CaptureQueriesContext(connection) as captured:
        client.get("/api/v1/clusters/")
    token_reads = [q["sql"] for q in captured.captured_queries if "knox_authtoken" in q["sql"]]
    assert len(token_reads) == 1, token_reads  # the token itself, by its key


def test_expired_token_is_refused_and_deleted(owner):
    instance, token = AuthToken.objects.create(owner, expiry=timedelta(seconds=60))
    AuthToken.objects.filter(pk=instance.pk).update(expiry=timezone.now() - timedelta(seconds=1))
    response = _client(token).get("/api/v1/clusters/")
    assert response.status_code == 401
    assert not AuthToken.objects.filter(pk=instance.pk).exists()


def test_unexpired_token_with_an_expiry_still_works(owner):
    token = AuthToken.objects.create(owner, expiry=timedelta(hours=1))[1]
    assert _client(token).get("/api/v1/clusters/").status_code == 200


def test_outsider_token_sees_no_other_tenants_clusters_streams(owner, outsider):
    from tests.factories import StreamFactory

    stream = StreamFactory(created_by=owner)
    token = AuthToken.objects.create(outsider)[1]
    response = _client(token).get(f"/api/v1/streams/{stream.uuid}/")
    assert response.status_code == 404


def _grant(user, **token):  # type: ignore[no-untyped-def]
    from accounts.tokens import token_grant

    instance, raw = AuthToken.objects.create(user, **token)
    found = token_grant(user.get_username(), raw)
    assert found is not None
    return instance, found[1]


def test_a_grant_ends_with_its_token_its_user_or_a_membership_it_was_given(owner, carol,
                                                                           outsider):
    """What the Kafka listener asks of its open connections, in two queries for them all."""
    from accounts.models import Role
    from accounts.tokens import grants_revoked
    from tests.factories import MembershipFactory

    signed_out, deactivated, removed, demoted = (_grant(u) for u in (owner, owner, carol, outsider))
    expiring = _grant(owner, expiry=timedelta(hours=1))
    kept = _grant(owner)
    signed_out[0].delete()
    AuthToken.objects.filter(pk=expiring[0].pk).update(expiry=timezone.now())
    carol.memberships.get().delete()
    outsider.memberships.update(role=Role.VIEWER)
    MembershipFactory(user=owner, tenant=outsider.memberships.get().tenant)  # gaining is fine
    grants = {g for _, g in (signed_out, deactivated, removed, demoted, expiring, kept)}
    with CaptureQueriesContext(connection) as captured:
        assert grants_revoked(grants) == {signed_out[1], removed[1], demoted[1], expiring[1]}
    assert len(captured.captured_queries) == 2
    type(owner).objects.filter(pk=owner.pk).update(is_active=False)
    assert grants_revoked({deactivated[1], kept[1]}) == {deactivated[1], kept[1]}


def test_scram_grants_end_with_their_credential_user_or_membership(owner, member, outsider):
    """A SCRAM sign-in's grant ends when its credential is deleted or given a new password,
    its user deactivated or a membership removed; with tokens among them, three queries."""
    from accounts.models import ScramCredential
    from accounts.scram import scram_grant
    from replication.services.credentials import scram_credential_set

    def signed_in(user, mechanism="SCRAM-SHA-256"):  # type: ignore[no-untyped-def]
        credential = scram_credential_set(actor=user, mechanism=mechanism, password="pw")
        return scram_grant(user.get_username(), mechanism, bytes(credential.stored_key))[1]

    deleted, replaced, kept = signed_in(owner), signed_in(member), signed_in(outsider)
    other_mechanism = signed_in(owner, "SCRAM-SHA-512")
    token = _grant(owner)[1]
    ScramCredential.objects.filter(user=owner, mechanism="SCRAM-SHA-256").delete()
    scram_credential_set(actor=member, mechanism="SCRAM-SHA-256", password="new")
    grants = {deleted, replaced, kept, other_mechanism, token}
    with CaptureQueriesContext(connection) as captured:
        assert grants_revoked(grants) == {deleted, replaced}
    assert len(captured.captured_queries) == 3
    outsider.memberships.get().delete()
    assert grants_revoked({kept, other_mechanism}) == {kept}


def test_a_scram_grant_needs_the_credential_the_client_proved(owner):
    from accounts.scram import scram_grant
    from replication.services.credentials import scram_credential_set

    credential = scram_credential_set(actor=owner, mechanism="SCRAM-SHA-512", password="pw")
    assert scram_grant("alice", "SCRAM-SHA-512", b"another key") is None
    assert scram_grant("alice", "SCRAM-SHA-256", bytes(credential.stored_key)) is None
    user, grant = scram_grant("alice", "SCRAM-SHA-512", bytes(credential.stored_key))
    assert user == owner and grant.mechanism == "SCRAM-SHA-512" and grant.expiry is None
