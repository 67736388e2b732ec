import pytest

from replication.services import replica_add


def test_overview_asks_anonymous_users_to_sign_in(client, db):
    response = client.get("/")
    assert response.status_code == 302
    assert response.url.startswith("/login/")


def test_sign_in_page_renders(client, db):
    response = client.get("/login/")
    assert response.status_code == 200
    assert b'name="password"' in response.content


def test_overview_shows_the_users_streams_and_replica_states(client, owner, activity, activity_ny):
    replica_add(actor=owner, source=activity, replica=activity_ny)
    client.force_login(owner)
    page = client.get("/").content.decode()
    assert "/mapr/sanfrancisco/activity" in page
    assert "REPLICA_STATE_WAITING_FOR_UPSTREAM" in page


@pytest.mark.django_db
def test_overview_hides_other_tenants_streams(client, outsider, activity):
    client.force_login(outsider)
    page = client.get("/").content.decode()
    assert "/mapr/sanfrancisco/activity" not in page
    assert "sanfrancisco" in page  # clusters are shared infrastructure, streams are not
