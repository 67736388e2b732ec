"""API token scopes on the REST API and /rest: a read-only token consumes and describes, a
produce token also produces and commits, an admin token (and one made before scopes) does
whatever its user may. A refusal names the token's scope and the scope the action needs; a
scope never gives what the user's ACEs do not (an outsider's admin token still sees 404)."""

from __future__ import annotations

import base64

import pytest
from knox.models import AuthToken
from rest_framework.test import APIClient

from accounts.tokens import issue_token
from replication.models import Cluster, Stream

pytestmark = pytest.mark.django_db(transaction=True)


def with_token(user, scope: str | None) -> APIClient:  # type: ignore[no-untyped-def]
    """A client signing in with a new token of `scope` (None: a token made before scopes)."""
    secret = (AuthToken.objects.create(user)[1] if scope is None
              else issue_token(user, name=f"{scope} token", scope=scope)[1])
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {secret}")
    return client


def messages_url(stream, topic="clicks"):  # type: ignore[no-untyped-def]
    return f"/api/v1/streams/{stream.uuid}/topics/{topic}/messages/"


def produce(client: APIClient, stream):  # type: ignore[no-untyped-def]
    return client.post(messages_url(stream), {"records": [{"value": "v", "partition": 0}]},
                       format="json")


def commit(client: APIClient, stream):  # type: ignore[no-untyped-def]
    return client.post(f"/api/v1/streams/{stream.uuid}/topics/clicks/cursors/",
                       {"group": "g", "partition": 0, "offset": 0}, format="json")


def test_a_read_only_token_consumes_but_may_not_produce_or_commit(owner, activity, clicks):
    assert produce(with_token(owner, "admin"), activity).status_code == 201
    reader = with_token(owner, "read")
    got = reader.get(messages_url(activity), {"partition": 0})
    assert got.status_code == 200 and len(got.json()["messages"]) == 1
    refused = produce(reader, activity)
    assert refused.status_code == 403
    assert refused.json()["detail"].startswith(
        "this API token's scope is read-only: produce on /mapr/sanfrancisco/activity needs "
        "the produce scope")
    refused = commit(reader, activity)
    assert refused.status_code == 403 and "needs the produce scope" in refused.json()["detail"]


def test_a_produce_token_produces_and_commits_but_may_not_administer(owner, activity, clicks):
    producer = with_token(owner, "produce")
    assert produce(producer, activity).status_code == 201
    assert commit(producer, activity).status_code == 201
    topic = producer.post(f"/api/v1/streams/{activity.uuid}/topics/",
                          {"name": "more", "partitions": 1}, format="json")
    assert topic.status_code == 403
    assert "scope is produce: create topics on" in topic.json()["detail"]
    assert "needs the admin scope" in topic.json()["detail"]
    stream = producer.post("/api/v1/streams/", {"path": "/mapr/sanfrancisco/other"},
                           format="json")
    assert stream.status_code == 403 and "needs the admin scope" in stream.json()["detail"]
    assert not Stream.objects.filter(name="other").exists()


@pytest.mark.parametrize("scope", ["admin", None])
def test_an_admin_token_and_a_token_made_before_scopes_do_what_the_user_may(
        owner, activity, clicks, scope):
    client = with_token(owner, scope)
    assert produce(client, activity).status_code == 201
    made = client.post(f"/api/v1/streams/{activity.uuid}/topics/",
                       {"name": "more", "partitions": 1}, format="json")
    assert made.status_code == 201, made.json()


def test_a_scope_gives_nothing_the_user_lacks(owner, activity, clicks, member, outsider):
    assert produce(with_token(member, "admin"), activity).status_code == 403  # no produceperm
    theirs = with_token(outsider, "admin")
    assert produce(theirs, activity).status_code == 404
    assert theirs.get(messages_url(activity)).status_code == 404


def basic(user, secret: str) -> APIClient:  # type: ignore[no-untyped-def]
    client = APIClient()
    pair = base64.b64encode(f"{user.get_username()}:{secret}".encode()).decode()
    client.credentials(HTTP_AUTHORIZATION=f"Basic {pair}")
    return client


def test_rest_reads_with_a_read_only_token_and_refuses_changes_in_maprclis_shape(
        owner, activity, clicks):
    secret = issue_token(owner, name="ro", scope="read")[1]
    for client in (basic(owner, secret), with_token(owner, "read")):
        listed = client.get("/rest/stream/topic/list", {"path": activity.path})
        assert listed.status_code == 200 and listed.json()["data"][0]["topic"] == "clicks"
        refused = client.post("/rest/stream/topic/create",
                              f"path={activity.path}&topic=new",
                              content_type="application/x-www-form-urlencoded")
        body = refused.json()
        assert refused.status_code == 403 and body["status"] == "ERROR"
        assert body["errors"][0]["desc"].startswith(
            "this API token's scope is read-only: create topics on /mapr/sanfrancisco/activity "
            "needs the admin scope")
    assert list(activity.topics.values_list("name", flat=True)) == ["clicks"]


def test_rest_with_an_admin_token_changes_what_the_user_may(owner, activity, clicks):
    made = with_token(owner, "admin").post(
        "/rest/stream/topic/create", f"path={activity.path}&topic=new",
        content_type="application/x-www-form-urlencoded")
    assert made.status_code == 200, made.json()
    assert activity.topics.filter(name="new").exists()


def test_rest_refuses_an_outsiders_token_as_absent(owner, activity, clicks, outsider):
    refused = with_token(outsider, "admin").get("/rest/stream/topic/list",
                                                {"path": activity.path})
    assert refused.status_code == 404 and refused.json()["status"] == "ERROR"


def test_an_operators_produce_token_may_not_do_operator_actions(operator):
    refused = with_token(operator, "produce").post("/api/v1/clusters/", {"name": "tokyo"},
                                                   format="json")
    assert refused.status_code == 403
    assert refused.json()["detail"].startswith(
        "this API token's scope is produce: the operator action 'create clusters' needs the "
        "admin scope")
    assert not Cluster.objects.filter(name="tokyo").exists()
