"""The account page's SCRAM section in the browser (Django's test client): which mechanisms
have a password, setting and deleting one; it only ever shows the signed-in user's own."""

from __future__ import annotations

from django.test import Client
from scramp import ScramMechanism

from accounts.models import ScramCredential
from replication.services.credentials import scram_credential_set


def signed_in(user) -> Client:  # type: ignore[no-untyped-def]
    client = Client()
    client.force_login(user)
    return client


def rows_of(page: str) -> str:
    return page.split('id="scram-credentials"')[1].split("</table>")[0]


def test_the_page_lists_which_mechanisms_have_a_password(owner):
    scram_credential_set(actor=owner, mechanism="SCRAM-SHA-512", password="pw", iterations=4096)
    page = signed_in(owner).get("/account/")
    assert page.status_code == 200
    sha256, sha512 = rows_of(page.content.decode()).split("<tr>")[2:]
    assert "SCRAM-SHA-256" in sha256 and "SCRAM-SHA-512" in sha512
    assert "not set" in sha256 and "Delete" not in sha256
    assert "4096" in sha512 and "Delete" in sha512


def test_setting_a_password_keeps_its_scram_keys_only(owner):
    done = signed_in(owner).post("/account/scram/", {
        "mechanism": "SCRAM-SHA-256", "password": "from the page", "confirm": "from the page"},
        follow=True)
    assert done.status_code == 200 and "SCRAM-SHA-256 password set" in done.content.decode()
    kept = ScramCredential.objects.get(user=owner)
    assert (kept.mechanism, kept.iterations) == ("SCRAM-SHA-256", 8192)
    _, stored, server, _ = ScramMechanism("SCRAM-SHA-256").make_auth_info(
        "from the page", iteration_count=8192, salt=bytes(kept.salt))
    assert (bytes(kept.stored_key), bytes(kept.server_key)) == (stored, server)
    assert b"from the page" not in b"".join(
        bytes(v) for v in (kept.salt, kept.stored_key, kept.server_key))


def test_a_mistyped_confirmation_or_an_unknown_mechanism_is_refused_beside_its_field(owner):
    client = signed_in(owner)
    differ = client.post("/account/scram/", {
        "mechanism": "SCRAM-SHA-256", "password": "a", "confirm": "b"})
    assert differ.status_code == 400 and "the two passwords differ" in differ.content.decode()
    unknown = client.post("/account/scram/", {
        "mechanism": "SCRAM-SHA-1", "password": "a", "confirm": "a"})
    assert unknown.status_code == 400
    assert 'id="err-mechanism"' in unknown.content.decode()
    assert not ScramCredential.objects.exists()


def test_deleting_a_password(owner):
    scram_credential_set(actor=owner, mechanism="SCRAM-SHA-256", password="pw")
    done = signed_in(owner).post("/account/scram/delete/", {"mechanism": "SCRAM-SHA-256"},
                                 follow=True)
    assert "SCRAM-SHA-256 password deleted" in done.content.decode()
    assert not ScramCredential.objects.exists()


def test_the_page_never_shows_nor_deletes_another_users_credentials(owner, outsider, member):
    scram_credential_set(actor=owner, mechanism="SCRAM-SHA-256", password="pw")
    for other in (outsider, member):
        client = signed_in(other)
        assert "Delete" not in rows_of(client.get("/account/").content.decode())
        refused = client.post("/account/scram/delete/", {"mechanism": "SCRAM-SHA-256"})
        assert refused.status_code == 400  # they have none of their own to delete
    assert ScramCredential.objects.get().user == owner


def test_the_page_needs_a_sign_in(db):
    assert Client().get("/account/").status_code == 302
    assert Client().post("/account/scram/", {"mechanism": "SCRAM-SHA-256"}).status_code == 302
