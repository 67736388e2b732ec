"""Outages of Redis and of a cluster's message store: every REST surface answers 503 with
Retry-After, in its own error shape, naming what is down, and changes nothing; the produce
throttle lets producers through while its cache is down. Real servers: a redis-server and a
PostgreSQL of the test's own, stopped and started again."""

from __future__ import annotations

import base64
import errno
from collections.abc import Iterator
from typing import Any

import pytest
from knox.models import AuthToken

from bench.pgserver import PG_BIN, PrivatePostgres
from bench.ports import free_port
from bench.redisserver import PrivateRedis
from replication.models import Topic
from replication.services import topic_create
from replication.services.messages import messages_consume
from replication.stores import close_stores
from tests.factories import ClusterFactory, StreamFactory
from tests.streamgate.test_cli import streamgate, token_for

pytestmark = pytest.mark.django_db(transaction=True)

PASSWORD = "correct horse battery staple"  # tests.factories.UserFactory's
SECRET = "hunter2"


def basic(user: Any) -> dict[str, str]:
    credentials = base64.b64encode(f"{user.username}:{PASSWORD}".encode()).decode()
    return {"HTTP_AUTHORIZATION": f"Basic {credentials}"}


def point_redis_at(settings: Any, url: str) -> None:
    settings.REDIS_URL = url
    settings.CACHES = {"default": {**settings.CACHES["default"],
                                   "BACKEND": "portal.cache.ReusingRedisCache", "LOCATION": url}}


def messages_url(stream: Any, topic: str = "clicks") -> str:
    return f"/api/v1/streams/{stream.uuid}/topics/{topic}/messages/"


def assert_api_503(response: Any, *named: str) -> str:
    body = response.json()
    assert response.status_code == 503, body
    assert body["code"] == "service_unavailable"
    assert response["Retry-After"] == "5"
    for text in (*named, "retry in a few seconds"):
        assert text in body["detail"]
    assert SECRET not in response.content.decode()
    return body["detail"]


def assert_rest_503(response: Any, *named: str) -> str:
    body = response.json()
    assert response.status_code == 503, body
    assert body["status"] == "ERROR" and body["errors"][0]["id"] == errno.EAGAIN
    assert response["Retry-After"] == "5"
    for text in (*named, "retry in a few seconds"):
        assert text in body["errors"][0]["desc"]
    assert SECRET not in response.content.decode()
    return body["errors"][0]["desc"]


# --- Redis ---------------------------------------------------------------------------------


@pytest.fixture
def redis_server(settings: Any) -> Iterator[PrivateRedis]:
    with PrivateRedis() as server:
        point_redis_at(settings, server.url)
        yield server


def test_while_redis_is_down_sign_ins_get_503_and_produce_goes_through(
        client, api, owner, activity, redis_server):
    topic_create(actor=owner, stream=activity, name="clicks")
    where = f"127.0.0.1:{redis_server.port}"
    redis_server.stop()

    # The produce throttle fails open: the message is stored, the throttle only logged.
    produced = api(owner).post(messages_url(activity), {"records": [{"value": "x"}]},
                               format="json")
    assert produced.status_code == 201, produced.json()
    # Sign-in's failure counter is in Redis: it refuses rather than guess (no token made).
    login = client.post("/api/v1/auth/login/", **basic(owner))
    assert_api_503(login, f"the control plane's Redis at {where} is unreachable")
    assert not AuthToken.objects.exists()
    create = client.post("/rest/stream/topic/create",
                         {"path": activity.path, "topic": "views"}, **basic(owner))
    assert_rest_503(create, f"Redis at {where}")
    assert not Topic.objects.filter(name="views").exists()

    redis_server.start()
    assert client.post("/api/v1/auth/login/", **basic(owner)).status_code == 200
    create = client.post("/rest/stream/topic/create",
                         {"path": activity.path, "topic": "views"}, **basic(owner))
    assert create.json()["status"] == "OK" and Topic.objects.filter(name="views").exists()
    produced = api(owner).post(messages_url(activity), {"records": [{"value": "y"}]},
                               format="json")
    assert produced.status_code == 201
    values = [m.value for m in messages_consume(actor=owner, stream=activity, topic="clicks")]
    assert values == [b"x", b"y"]


def test_the_redis_error_names_its_address_never_its_password(client, owner, settings):
    port = free_port()  # nothing listens there
    point_redis_at(settings, f"redis://:{SECRET}@127.0.0.1:{port}/0")
    response = client.get("/rest/stream/list", **basic(owner))
    assert_rest_503(response, f"Redis at 127.0.0.1:{port} is unreachable")


# --- a cluster's message store -------------------------------------------------------------


@pytest.fixture
def lost(owner):
    """A stream (with topic clicks) on a cluster whose store nothing answers for."""
    port = free_port()
    cluster = ClusterFactory(name="lost",
                             store_url=f"postgresql://postgres:{SECRET}@127.0.0.1:{port}/x")
    stream = StreamFactory(cluster=cluster, name="activity", created_by=owner)
    topic_create(actor=owner, stream=stream, name="clicks")  # the control plane needs no store
    return stream


def test_produce_to_an_unreachable_store_is_a_503_naming_it(api, client, owner, lost):
    port = lost.cluster.store_url.rsplit(":", 1)[1].split("/")[0]
    topics = list(Topic.objects.values())
    response = api(owner).post(messages_url(lost), {"records": [{"value": "x"}]}, format="json")
    assert_api_503(response, "message store did not answer", f"port {port}", "/readyz")
    assert list(Topic.objects.values()) == topics
    listed = api(owner).get("/rest/stream/topic/list", {"path": lost.path})
    assert_rest_503(listed, "message store did not answer")
    # The advice holds: /readyz names the cluster.
    assert "lost" in client.get("/readyz").json()["checks"]["stores"]["detail"]


def test_an_outsider_gets_404_not_the_outage(api, outsider, lost):
    response = api(outsider).post(messages_url(lost), {"records": [{"value": "x"}]},
                                  format="json")
    assert response.status_code == 404


def test_a_failure_after_the_commit_is_not_offered_as_retryable(api, owner, lost):
    # Deleting the stream commits, then drops its messages: a 503 would promise it had not.
    response = api(owner).post("/rest/stream/delete", {"path": lost.path})
    assert response.status_code == 500
    assert not type(lost).objects.filter(pk=lost.pk).exists()


def test_the_cli_prints_the_outage_and_exits_1(live_server, owner, lost):
    done = streamgate(live_server.url, token_for(owner), f"produce -path {lost.path}:clicks",
                      stdin="x\n")
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith(f"ERROR ({errno.EAGAIN}) - a cluster's message store did "
                                  "not answer")
    done = streamgate(live_server.url, token_for(owner), f"stream topic list -path {lost.path}")
    assert done.returncode == 1
    assert done.stderr.startswith(f"ERROR ({errno.EAGAIN}) - a cluster's message store")


@pytest.fixture
def private_store(owner) -> Iterator[Any]:
    """A stream (topic clicks) on a cluster whose store is a PostgreSQL of the test's own."""
    if not (PG_BIN / "initdb").exists():
        pytest.skip("needs PostgreSQL 15's initdb and pg_ctl")
    with PrivatePostgres(durable=False) as server:
        cluster = ClusterFactory(name="private", store_url=server.url("store"))
        stream = StreamFactory(cluster=cluster, name="activity", created_by=owner)
        topic_create(actor=owner, stream=stream, name="clicks")
        try:
            yield server, stream
        finally:
            close_stores()  # its pool would try to reconnect to the removed server


def test_produce_while_the_store_restarts_is_a_503_then_works(api, owner, private_store):
    server, stream = private_store
    body = {"records": [{"value": "before"}]}
    assert api(owner).post(messages_url(stream), body, format="json").status_code == 201
    server.stop()
    # The pool's connection is broken: this produce fails on it, fast, and stores nothing.
    response = api(owner).post(messages_url(stream), {"records": [{"value": "lost"}]},
                               format="json")
    assert_api_503(response, "message store did not answer")
    server.start()
    # As a client told to retry does: the pool hands out each connection the restart broke
    # once (a 503 each, storing nothing), then new ones.
    body = {"records": [{"value": "after"}]}
    statuses = []
    while not statuses or statuses[-1] == 503:
        assert len(statuses) < 20, statuses
        statuses.append(api(owner).post(messages_url(stream), body, format="json").status_code)
    assert statuses[-1] == 201, statuses
    values = [m.value for m in messages_consume(actor=owner, stream=stream, topic="clicks")]
    assert values == [b"before", b"after"]


def test_a_control_database_connection_lost_mid_request_is_a_503_not_a_500(
        transactional_db, api, owner):
    """As when the control database's primary dies (a Patroni group promoting a standby):
    the request's connection is cut by the server, and the answer says to retry."""
    import psycopg
    from django.db import connection

    client = api(owner)
    assert client.get("/api/v1/streams/").status_code == 200
    connection.ensure_connection()
    with connection.cursor() as cursor:
        backend = connection.connection.info.backend_pid
        cursor.execute("SELECT 1")
    params = connection.settings_dict
    with psycopg.connect(host=params["HOST"] or "127.0.0.1", port=params["PORT"] or 5432,
                         user=params["USER"], dbname="postgres", autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (backend,))
    try:
        response = client.get("/api/v1/streams/")
    finally:
        connection.close()  # the test's flush opens a new one
    assert response.status_code == 503, response.content
    assert response["Retry-After"]
    assert "the control database did not answer" in response.json()["detail"]
