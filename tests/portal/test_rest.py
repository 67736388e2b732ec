"""maprcli over HTTP (/rest): envelope, authentication, every command, and refusals that
name the problem and leave the database as it was."""

from __future__ import annotations

import base64
import re
import uuid
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlencode

import pytest
from django.utils import timezone
from knox.models import AuthToken
from rest_framework.test import APIClient

from portal.rest.commands import REGISTRY
from replication import services
from replication.models import Cluster, Gateway, ReplicaLink, ReplicaState, Stream, Topic, Upstream
from replication.transport import transport
from tests.factories import ClusterFactory, GatewayFactory, StreamFactory, TopicFactory

PASSWORD = "correct horse battery staple"  # tests.factories.UserFactory's
TIMEOFDAY = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} GMT[+-]\d{4} (AM|PM)$")
MODELS = (Cluster, Gateway, Stream, Topic, ReplicaLink, Upstream)




def call(client: APIClient, command: str, method: str | None = None, **params: Any) -> Any:
    """GET for a command that reads, POST for one that changes (which refuses GET), unless
    `method` says otherwise."""
    url = f"/rest/{command}"
    spec = REGISTRY.get(command)
    method = method or ("post" if spec is not None and spec.changes else "get")
    if method == "get":
        return client.get(url, params)
    body = urlencode(params)
    return client.post(url, body, content_type="application/x-www-form-urlencoded")


def ok(response: Any) -> list[dict[str, Any]]:
    body = response.json()
    assert response.status_code == 200, body
    assert body["status"] == "OK", body
    return body["data"]


def error_of(response: Any) -> str:
    body = response.json()
    assert body["status"] == "ERROR", body
    return body["errors"][0]["desc"]


def snapshot() -> dict[str, list[dict[str, Any]]]:
    return {model.__name__: list(model.objects.order_by("pk").values()) for model in MODELS}


@pytest.fixture
def world(owner, member, outsider, operator, activity, activity_ny, newyork):
    """alice's activity (topic clicks, 2 partitions) replicating, paused, to activity_ny with
    the agreement in place; a spare stream in newyork that is nobody's replica."""
    services.topic_create(actor=owner, stream=activity, name="clicks", partitions=2)
    services.replica_add(actor=owner, source=activity, replica=activity_ny, paused=True)
    services.upstream_add(actor=owner, replica=activity_ny, source=activity)
    spare = StreamFactory(cluster=newyork, name="spare", created_by=owner)
    users = {"alice": owner, "bob": member, "mallory": outsider, "ops": operator}
    return SimpleNamespace(users=users, activity=activity, ny=activity_ny, spare=spare)


# --- envelope and authentication -----------------------------------------------------------


def test_success_envelope_has_mapr_keys_in_order(api, world):
    response = call(api(world.users["alice"]), "stream/info", path=world.activity.path)
    body = response.json()
    assert list(body) == ["timestamp", "timeofday", "status", "total", "data"]
    assert body["status"] == "OK" and body["total"] == 1 == len(body["data"])
    assert TIMEOFDAY.match(body["timeofday"]), body["timeofday"]
    assert abs(body["timestamp"] - timezone.now().timestamp() * 1000) < 60_000


def test_action_commands_return_total_zero_and_no_data(api, world):
    body = call(api(world.users["alice"]), "stream/edit", path=world.activity.path,
                ttl="60").json()
    assert (body["status"], body["total"], body["data"]) == ("OK", 0, [])


def test_error_envelope_has_mapr_keys_and_http_status(api, world):
    response = call(api(world.users["alice"]), "stream/info", path="/mapr/sanfrancisco/none")
    body = response.json()
    assert response.status_code == 404
    assert list(body) == ["timestamp", "timeofday", "status", "errors"]
    assert body["errors"] == [{"id": 2, "desc": body["errors"][0]["desc"]}]
    assert "/mapr/sanfrancisco/none does not exist" in body["errors"][0]["desc"]


def test_post_takes_options_from_the_query_string_and_the_form_body(api, owner, sanfrancisco):
    client = api(owner)
    ok(client.post("/rest/stream/create?path=/mapr/sanfrancisco/a&ttl=10"))
    ok(call(client, "stream/create", "post", path="/mapr/sanfrancisco/b", ttl="20"))
    ok(client.post("/rest/stream/create?path=/mapr/sanfrancisco/c", {"ttl": "30"}))
    ttls = dict(Stream.objects.values_list("name", "ttl"))
    assert ttls == {"a": 10, "b": 20, "c": 30}


def test_a_command_that_reads_answers_get_and_post_alike(api, world):
    client = api(world.users["alice"])
    over_get = ok(call(client, "stream/topic/info", "get", path=SF, topic="clicks"))
    over_post = ok(call(client, "stream/topic/info", "post", path=SF, topic="clicks"))
    assert over_get == over_post and len(over_get) == 2


def test_basic_auth_works_like_curl_u(world):
    client = APIClient()
    secret = base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
    client.credentials(HTTP_AUTHORIZATION=f"Basic {secret}")
    assert ok(call(client, "stream/info", path=world.activity.path))[0]["path"]


def test_basic_auth_takes_an_api_token_as_the_password_as_kafka_does(world):
    """`curl -u alice:$TOKEN`, as the Kafka listener's SASL/PLAIN takes the same pair; a token
    of another user is no password of alice's."""
    token = AuthToken.objects.create(world.users["alice"])[1]
    other = AuthToken.objects.create(world.users["bob"])[1]

    def basic(user: str, password: str) -> APIClient:
        client = APIClient()
        secret = base64.b64encode(f"{user}:{password}".encode()).decode()
        client.credentials(HTTP_AUTHORIZATION=f"Basic {secret}")
        return client

    assert ok(call(basic("alice", token), "stream/info", path=world.activity.path))[0]["path"]
    refused = call(basic("alice", other), "stream/info", path=world.activity.path)
    assert refused.status_code == 401 and refused.json()["errors"][0]["id"] == 13


def test_knox_token_auth_works(world):
    client = APIClient()
    token = AuthToken.objects.create(world.users["alice"])[1]
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert ok(call(client, "stream/topic/list", path=world.activity.path))[0]["topic"] == "clicks"


@pytest.mark.parametrize("header", [None, "Token not-a-real-token", f"Basic {'x' * 8}"])
def test_unauthenticated_gets_401_in_the_envelope(world, header):
    client = APIClient()
    if header:
        client.credentials(HTTP_AUTHORIZATION=header)
    before = snapshot()
    response = call(client, "stream/delete", "post", path=world.activity.path)
    assert response.status_code == 401
    assert response.json()["errors"][0]["id"] == 13
    assert response.json()["status"] == "ERROR"
    assert response.headers["WWW-Authenticate"]
    assert snapshot() == before


def test_unknown_command_is_404_in_the_envelope(api, owner):
    response = call(api(owner), "stream/frobnicate", path="/mapr/sanfrancisco/x")
    assert response.status_code == 404
    assert "unknown command 'stream frobnicate'" in error_of(response)
    assert "did you mean" not in error_of(response)  # nothing close


def test_a_mistyped_command_is_answered_with_the_one_meant(api, owner):
    response = call(api(owner), "stream/lsit")
    assert response.status_code == 404
    assert "unknown command 'stream lsit': did you mean 'stream list'?" in error_of(response)


def test_command_index_lists_every_command_with_its_options(db):
    data = ok(APIClient().get("/rest/"))
    commands = {row["command"]: row for row in data}
    assert "stream replica add" in commands and "cluster gateway resolve" in commands
    assert "-paused true|false" in commands["stream replica add"]["usage"]
    names = [option["name"] for option in commands["stream create"]["options"]]
    assert "ischangelog" in names and "copymetafrom" in names


# --- happy paths --------------------------------------------------------------------------


def test_stream_create_with_metadata_then_info(api, owner, sanfrancisco):
    client = api(owner)
    ok(call(client, "stream/create", "post", path="/mapr/sanfrancisco/web", ttl="3600",
            autocreate="false", defaultpartitions="3", compression="zlib",
            defaulttimestamptype="logappendtime", produceperm="p", consumeperm="u:alice|g:ops",
            ischangelog="false"))
    info = ok(call(client, "stream/info", path="/mapr/sanfrancisco/web"))[0]
    assert list(info)[:8] == ["path", "physicalsize", "logicalsize", "numtopics",
                              "defaultpartitions", "ttl", "compression", "autocreate"]
    assert info["ttl"] == 3600 and info["autocreate"] is False
    assert info["defaultpartitions"] == 3 and info["compression"] == "zlib"
    assert info["produceperm"] == "p" and info["consumeperm"] == "u:alice | g:ops"
    assert info["adminperm"] == "u:alice" and info["tenant"] == "acme"
    assert info["defaulttimestamptype"] == "logappendtime"


def test_stream_create_copymetafrom_copies_metadata(api, world):
    world.activity.ttl = 77
    world.activity.save()
    ok(call(api(world.users["alice"]), "stream/create", path="/mapr/newyork/copy",
            copymetafrom=world.activity.path))
    assert Stream.objects.get(path="/mapr/newyork/copy").ttl == 77


def test_stream_create_with_tenant_option(api, owner, sanfrancisco):
    ok(call(api(owner), "stream/create", path="/mapr/sanfrancisco/t", tenant="acme"))
    assert Stream.objects.get(path="/mapr/sanfrancisco/t").tenant.name == "acme"


def test_stream_info_hides_aces_without_adminperm(api, world):
    world.activity.consumeperm = "u:alice | u:bob"
    world.activity.save()
    info = ok(call(api(world.users["bob"]), "stream/info", path=world.activity.path))[0]
    assert info["numtopics"] == 1
    assert not {"produceperm", "consumeperm", "topicperm", "copyperm", "adminperm"} & set(info)


def test_stream_edit_and_delete(api, world):
    client = api(world.users["alice"])
    ok(call(client, "stream/edit", path=world.spare.path, ttl="0", adminperm="u:alice|u:bob",
            compact="false"))
    world.spare.refresh_from_db()
    assert world.spare.ttl == 0 and world.spare.adminperm == "u:alice | u:bob"
    ok(call(client, "stream/delete", "post", path=world.spare.path))
    assert not Stream.objects.filter(path=world.spare.path).exists()


def test_stream_list_shows_visible_streams_with_cluster_filter(api, world):
    rows = ok(call(api(world.users["alice"]), "stream/list"))
    assert [r["path"] for r in rows] == [world.ny.path, world.spare.path, world.activity.path]
    assert rows[2] == {"path": world.activity.path, "cluster": "sanfrancisco",
                       "tenant": "acme", "numtopics": 1, "uuid": str(world.activity.uuid)}
    rows = ok(call(api(world.users["alice"]), "stream/list", cluster="sanfrancisco"))
    assert [r["path"] for r in rows] == [world.activity.path]


def test_topic_create_edit_list_info_delete(api, world):
    client = api(world.users["alice"])
    path = world.activity.path
    ok(call(client, "stream/topic/create", path=path, topic="views", partitions="2"))
    ok(call(client, "stream/topic/edit", path=path, topic="views", partitions="4",
            timestamptype="logappendtime"))
    rows = ok(call(client, "stream/topic/list", path=path))
    assert rows[1] == {"topic": "views", "partitions": 4, "cleanuppolicy": "delete",
                       "consumers": 0, "physicalsize": 0, "logicalsize": 0, "maxlag": 0}
    parts = ok(call(client, "stream/topic/info", path=path, topic="views"))
    assert [p["partitionid"] for p in parts] == [0, 1, 2, 3]
    assert parts[0]["maxoffset"] == -1 and parts[0]["timestamptype"] == "logappendtime"
    # Topics reach the agreed replica too (DESIGN.md invariant 7).
    assert world.ny.topics.get(name="views").partitions == 4
    ok(call(client, "stream/topic/delete", path=path, topic="views"))
    assert not Topic.objects.filter(name="views").exists()


def test_replica_list_shows_mapr_fields(api, world):
    rows = ok(call(api(world.users["alice"]), "stream/replica/list", path=world.activity.path,
                   refreshnow="true"))
    assert list(rows[0]) == [
        "cluster", "stream", "type", "replicaPath", "replicaState", "paused", "throttle", "idx",
        "networkencryption", "synchronous", "networkcompression", "isUptodate", "minPendingTS",
        "maxPendingTS", "bytesPending", "messagesPending", "uuid",
        "copyTableCompletionPercentage", "errors", "waitingForUpstream", "timeLag", "stalled",
        "lastVerified", "verifiedUpTo", "verifyError", "mode", "modeSince", "modeReason",
    ]
    row = rows[0]
    assert (row["cluster"], row["stream"], row["replicaPath"]) == (
        "newyork", world.ny.path, world.ny.path)
    assert (row["type"], row["replicaState"], row["paused"]) == (
        "MapRStream", ReplicaState.REPLICATING, True)
    assert (row["idx"], row["uuid"], row["errors"]) == (1, str(world.ny.uuid), [])
    assert row["waitingForUpstream"] is False and row["networkcompression"] == "off"
    assert (row["synchronous"], row["mode"], row["modeSince"]) == (False, "async", None)


def test_replica_list_reports_waiting_for_upstream_and_errors(api, world):
    ok(call(api(world.users["alice"]), "stream/replica/add", path=world.activity.path,
            replica=world.spare.path))
    ReplicaLink.objects.filter(replica=world.spare).update(last_error="gateway gw1 down")
    rows = ok(call(api(world.users["alice"]), "stream/replica/list", path=world.activity.path))
    assert rows[1]["replicaState"] == ReplicaState.WAITING_FOR_UPSTREAM
    assert rows[1]["waitingForUpstream"] is True and rows[1]["isUptodate"] is False
    assert rows[1]["errors"] == ["gateway gw1 down"] and rows[1]["paused"] is False


def test_replica_list_queries_do_not_grow_with_replicas(api, world, django_assert_max_num_queries):
    for n in range(5):
        replica = StreamFactory(cluster=world.ny.cluster, name=f"r{n}",
                                created_by=world.users["alice"])
        services.replica_add(actor=world.users["alice"], source=world.activity, replica=replica)
    with django_assert_max_num_queries(12):
        assert len(ok(call(api(world.users["alice"]), "stream/replica/list",
                           path=world.activity.path))) == 6


def test_replica_add_edit_pause_resume_remove(api, world):
    client = api(world.users["alice"])
    args = {"path": world.activity.path, "replica": world.spare.path}
    ok(call(client, "stream/replica/add", **args, paused="yes", throttle="TRUE",
            networkcompression="off", synchronous="1", networkencryption="false"))
    link = ReplicaLink.objects.get(replica=world.spare)
    assert (link.paused, link.throttle, link.synchronous, link.networkencryption) == (
        True, True, True, False)
    assert link.networkcompression == "off" and link.idx == 2
    ok(call(client, "stream/replica/edit", **args, throttle="no", synchronous="no"))
    ok(call(client, "stream/replica/resume", **args))
    link.refresh_from_db()
    assert (link.throttle, link.synchronous, link.paused) == (False, False, False)
    ok(call(client, "stream/replica/pause", **args))
    assert ReplicaLink.objects.get(replica=world.spare).paused is True
    ok(call(client, "stream/replica/remove", **args))
    assert not ReplicaLink.objects.filter(replica=world.spare).exists()


def test_upstream_add_list_remove(api, world):
    client = api(world.users["alice"])
    ok(call(client, "stream/upstream/add", path=world.spare.path, upstream=world.activity.path))
    rows = ok(call(client, "stream/upstream/list", path=world.spare.path))
    assert rows == [{"cluster": "sanfrancisco", "stream": world.activity.path, "idx": 1,
                     "uuid": str(world.activity.uuid)}]
    ok(call(client, "stream/upstream/remove", path=world.spare.path,
            upstream=world.activity.path))
    assert ok(call(client, "stream/upstream/list", path=world.spare.path)) == []


def test_cluster_create_and_list(api, world, tmp_path):
    store = f"sqlite:///{tmp_path}/tokyo.sqlite3"
    ok(call(api(world.users["ops"]), "cluster/create", "post", name="tokyo", storeurl=store))
    assert Cluster.objects.get(name="tokyo").store_url == store
    assert (tmp_path / "tokyo.sqlite3").exists()  # the cluster's own message store
    GatewayFactory(cluster=world.ny.cluster, name="gw1", last_heartbeat=timezone.now())
    GatewayFactory(cluster=world.ny.cluster, name="gw2")
    rows = {r["name"]: r for r in ok(call(api(world.users["alice"]), "cluster/list"))}
    assert rows["newyork"] == {"name": "newyork", "state": "ONLINE", "gateways": 2,
                               "liveGateways": 1, "streams": 2}
    assert rows["tokyo"]["streams"] == 0
    # Stream counts are per caller: mallory sees none of acme's streams.
    mallory = {r["name"]: r for r in ok(call(api(world.users["mallory"]), "cluster/list"))}
    assert mallory["newyork"]["streams"] == 0


def test_cluster_info_shows_required_copies_and_the_store_group(api, world, tmp_path):
    store = f"sqlite:///{tmp_path}/tokyo.sqlite3"
    ok(call(api(world.users["ops"]), "cluster/create", "post", name="tokyo", storeurl=store,
            requiredcopies="1"))
    (info,) = ok(call(api(world.users["alice"]), "cluster/info", name="tokyo"))
    assert info == {"name": "tokyo", "state": "ONLINE", "requiredcopies": 1, "copies": 1,
                    "copiesOk": True, "members": [{"name": f"{tmp_path}/tokyo.sqlite3",
                                                   "role": "leader", "state": "serving",
                                                   "lagBytes": 0, "lagSeconds": 0}],
                    "timeline": 1, "lastFailover": None, "alarm": None}


def test_cluster_gateway_set_get_list_resolve_delete(api, world, settings):
    ops = api(world.users["ops"])
    ok(call(ops, "cluster/gateway/set", "post", dstcluster="newyork", gateways="gw1 gw2:7660"))
    Gateway.objects.filter(name="gw1").update(last_heartbeat=timezone.now(), batches_applied=3,
                                               messages_applied=300, bytes_applied=4500, errors=1)
    settings.STREAMGATE_NAMESPACE = f"sgt-{uuid.uuid4().hex[:10]}:"  # presence of our own
    transport().gateways.beat(("newyork", "gw1"), 30.0)
    client = api(world.users["alice"])
    assert ok(call(client, "cluster/gateway/list")) == [
        {"cluster": "newyork", "gatewayConfig": "gw1 gw2:7660"}]
    rows = ok(call(client, "cluster/gateway/get", dstcluster="newyork"))
    transport().gateways.forget(("newyork", "gw1"))
    assert [(r["gateway"], r["status"]) for r in rows] == [("gw1", "UP"), ("gw2:7660", "UNKNOWN")]
    assert list(rows[0]) == ["cluster", "gateway", "address", "enabled", "status",
                             "lastHeartbeat", "heartbeatAge", "batchesApplied",
                             "messagesApplied", "bytesApplied", "errors"]
    assert (rows[0]["batchesApplied"], rows[0]["messagesApplied"], rows[0]["bytesApplied"],
            rows[0]["errors"]) == (3, 300, 4500, 1)
    assert 0 <= rows[0]["heartbeatAge"] < 60 and rows[1]["heartbeatAge"] is None
    assert ok(call(client, "cluster/gateway/resolve", dstcluster="newyork")) == [
        {"cluster": "newyork", "gateways": "gw1"}]
    ok(call(ops, "cluster/gateway/delete", "post", dstcluster="newyork"))
    assert not Gateway.objects.exists()


# --- refusals: the error names the problem and nothing changes ----------------------------

SF, NY = "/mapr/sanfrancisco/activity", "/mapr/newyork/activity"
SPARE = "/mapr/newyork/spare"
BAD_INPUTS = [
    # (id, user, command, params, http status, text the error must contain)
    ("path-without-mapr", "alice", "stream/create", {"path": "sanfrancisco/x"}, 400,
     "invalid stream path 'sanfrancisco/x'"),
    ("no-such-cluster", "alice", "stream/create", {"path": "/mapr/nosuchcluster/x"}, 404,
     "cluster nosuchcluster does not exist"),
    ("bad-path-segment", "alice", "stream/info", {"path": "/mapr/sanfrancisco/a b"}, 400,
     "invalid path segment 'a b'"),
    ("missing-path", "alice", "stream/info", {}, 400, "-path is required for 'stream info'"),
    ("ace-dangling-or", "alice", "stream/create",
     {"path": "/mapr/sanfrancisco/x", "produceperm": "u:alice |"}, 400,
     "-produceperm: invalid ACE at position 9"),
    ("ace-unclosed-paren", "alice", "stream/edit", {"path": SF, "adminperm": "u:alice & (g:x"},
     400, "-adminperm: invalid ACE at position 10: unclosed '('"),
    ("ace-public-combined", "alice", "stream/edit", {"path": SF, "consumeperm": "p | u:bob"},
     400, "p (public) must stand alone"),
    ("unknown-option", "alice", "stream/info", {"path": SF, "bogus": "1"}, 400,
     "unknown option -bogus for 'stream info': valid options are -path"),
    ("bad-boolean", "alice", "stream/replica/add",
     {"path": SF, "replica": SPARE, "paused": "maybe"}, 400,
     "-paused 'maybe' is not a boolean: use true or false"),
    ("bad-boolean-refreshnow", "alice", "stream/replica/list",
     {"path": SF, "refreshnow": "perhaps"}, 400, "-refreshnow 'perhaps' is not a boolean"),
    ("defaultpartitions-zero", "alice", "stream/create",
     {"path": "/mapr/sanfrancisco/x", "defaultpartitions": "0"}, 400,
     "-defaultpartitions must be a whole number from 1 to 4096"),
    ("defaultpartitions-not-a-number", "alice", "stream/edit",
     {"path": SF, "defaultpartitions": "two"}, 400,
     "-defaultpartitions 'two' is not a whole number"),
    ("ttl-negative", "alice", "stream/edit", {"path": SF, "ttl": "-1"}, 400,
     "-ttl must be a whole number of seconds, 0 or more"),
    ("ttl-beyond-64-bits", "alice", "stream/edit", {"path": SF, "ttl": "9" * 30}, 400,
     "-ttl 999999999999999999999999999999 is out of range"),
    ("compression-gzip", "alice", "stream/create",
     {"path": "/mapr/sanfrancisco/x", "compression": "gzip"}, 400,
     "-compression 'gzip' is not one of off, lz4, lzf, zlib"),
    ("timestamptype-bad", "alice", "stream/topic/create",
     {"path": SF, "topic": "t", "timestamptype": "wallclock"}, 400,
     "-timestamptype 'wallclock' is not one of createtime, logappendtime"),
    ("partitions-decrease", "alice", "stream/topic/edit",
     {"path": SF, "topic": "clicks", "partitions": "1"}, 400, "-partitions can only grow"),
    ("topic-name-invalid", "alice", "stream/topic/create", {"path": SF, "topic": "a:b"}, 400,
     "invalid topic name 'a:b'"),
    ("topic-exists", "alice", "stream/topic/create", {"path": SF, "topic": "clicks"}, 409,
     "topic /mapr/sanfrancisco/activity:clicks already exists"),
    ("topic-edit-on-replica", "alice", "stream/topic/edit",
     {"path": NY, "topic": "clicks", "partitions": "5"}, 400,
     "is replicated from /mapr/sanfrancisco/activity: edit it there"),
    ("unknown-topic-info", "alice", "stream/topic/info", {"path": SF, "topic": "nope"}, 404,
     "topic /mapr/sanfrancisco/activity:nope does not exist"),
    ("stream-exists", "alice", "stream/create", {"path": SF}, 409,
     "stream /mapr/sanfrancisco/activity already exists"),
    ("stream-nested", "alice", "stream/create", {"path": SF + "/inner"}, 400,
     "would nest with stream /mapr/sanfrancisco/activity"),
    ("path-trailing-newline", "alice", "stream/create",
     {"path": "/mapr/sanfrancisco/acme\n/orders"}, 400, "invalid path segment 'acme\\n'"),
    ("topic-trailing-newline", "alice", "stream/topic/create", {"path": SF, "topic": "payments\n"},
     400, "invalid topic name 'payments\\n'"),
    ("edit-nothing", "alice", "stream/edit", {"path": SF}, 400, "nothing to change"),
    ("replica-of-itself", "alice", "stream/replica/add", {"path": SF, "replica": SF}, 400,
     "cannot be a replica of itself"),
    ("duplicate-replica", "alice", "stream/replica/add", {"path": SF, "replica": NY}, 409,
     "/mapr/newyork/activity is already a replica of /mapr/sanfrancisco/activity"),
    ("unknown-replica", "alice", "stream/replica/pause", {"path": SF, "replica": SPARE}, 404,
     "/mapr/newyork/spare is not a replica of /mapr/sanfrancisco/activity"),
    ("replica-missing-stream", "alice", "stream/replica/add",
     {"path": SF, "replica": "/mapr/newyork/ghost"}, 404,
     "stream /mapr/newyork/ghost does not exist: check -replica"),
    ("replica-bad-networkcompression", "alice", "stream/replica/edit",
     {"path": SF, "replica": NY, "networkcompression": "on"}, 400,
     "-networkcompression 'on' is not one of off, lz4, lzf, zlib"),
    ("newreplica", "alice", "stream/replica/edit",
     {"path": SF, "replica": NY, "newreplica": "/mapr/newyork/renamed"}, 501,
     "-newreplica follows a renamed replica"),
    ("networkcompression", "alice", "stream/replica/edit",
     {"path": SF, "replica": NY, "networkcompression": "lz4"}, 501,
     "-networkcompression lz4 is not supported: gateways read the source cluster's message "
     "store over a PostgreSQL connection, and PostgreSQL's protocol does not compress"),
    ("networkencryption", "alice", "stream/replica/add",
     {"path": SF, "replica": SPARE, "networkencryption": "true"}, 501,
     "-networkencryption true needs TLS on every connection the messages cross, and the "
     "message store of cluster newyork and sanfrancisco does not require it"),
    ("unknown-upstream", "alice", "stream/upstream/remove", {"path": NY, "upstream": SPARE},
     404, "/mapr/newyork/spare is not an upstream of /mapr/newyork/activity"),
    ("duplicate-upstream", "alice", "stream/upstream/add", {"path": NY, "upstream": SF}, 409,
     "is already an upstream of"),
    ("autosetup-existing-replica", "alice", "stream/replica/autosetup",
     {"path": SF, "replica": NY}, 409, "autosetup creates the replica itself"),
    ("ischangelog", "alice", "stream/create",
     {"path": "/mapr/sanfrancisco/x", "ischangelog": "true"}, 501,
     "-ischangelog true: change-data-capture (changelog) streams are not supported"),
    ("mincompactionlag", "alice", "stream/create",
     {"path": "/mapr/sanfrancisco/x", "mincompactionlag": "-1"}, 400,
     "-mincompactionlag -1 is out of range"),
    ("deleteretention", "alice", "stream/edit", {"path": SF, "deleteretention": "soon"}, 400,
     "-deleteretention 'soon' is not a whole number"),
    ("mincleanabledirtyratio", "alice", "stream/edit",
     {"path": SF, "mincleanabledirtyratio": "2"}, 400, "is not a number from 0 to 1"),
    ("pidexpirysecs", "alice", "stream/edit", {"path": SF, "pidexpirysecs": "5"}, 501,
     "there is no producer id expiry to set"),
    ("copystream-mapreduce", "alice", "copystream",
     {"src": SF, "dst": SPARE, "mapreduce": "true"}, 501, "MapReduce is not available"),
    ("gateway-cluster-option", "ops", "cluster/gateway/set",
     {"cluster": "sanfrancisco", "dstcluster": "newyork", "gateways": "gw1"}, 501,
     "one gateway configuration per destination cluster"),
    ("gateway-bad-host", "ops", "cluster/gateway/set",
     {"dstcluster": "newyork", "gateways": "gw1 bad_host!"}, 400,
     "invalid gateway address 'bad_host!'"),
    ("gateway-unknown-cluster", "alice", "cluster/gateway/get", {"dstcluster": "nowhere"}, 404,
     "cluster 'nowhere' does not exist"),
    ("non-operator-cluster-create", "alice", "cluster/create", {"name": "tokyo"}, 403,
     "only cluster operators may create clusters"),
    ("cluster-create-more-copies-than-members", "ops", "cluster/create",
     {"name": "tokyo", "requiredcopies": "2"}, 400,
     "would require 2 copies of every acknowledged message but its message store's group has "
     "1 member(s)"),
    ("cluster-create-copies-out-of-range", "ops", "cluster/create",
     {"name": "tokyo", "requiredcopies": "0"}, 400, "-requiredcopies 0 is out of range"),
    ("cluster-info-unknown", "alice", "cluster/info", {"name": "nowhere"}, 404,
     "cluster 'nowhere' does not exist"),
    ("non-operator-gateway-set", "alice", "cluster/gateway/set",
     {"dstcluster": "newyork", "gateways": "gw1"}, 403, "only cluster operators"),
    ("member-edits-without-adminperm", "bob", "stream/edit", {"path": SF, "ttl": "1"}, 403,
     "bob may not edit the stream on /mapr/sanfrancisco/activity: it needs adminperm"),
    ("member-lists-topics-without-perm", "bob", "stream/topic/list", {"path": SF}, 403,
     "bob may not list topics"),
    ("member-replica-list-without-perm", "bob", "stream/replica/list", {"path": SF}, 403,
     "bob may not list replicas"),
    ("outsider-deletes", "mallory", "stream/delete", {"path": SF}, 404,
     "stream /mapr/sanfrancisco/activity does not exist"),
]


# Every case over POST; over GET too where the command only reads (a command that changes
# refuses GET whatever its input: tests/portal/test_rest_csrf.py).
BAD_INPUT_CALLS = [(method, case) for case in BAD_INPUTS for method in ("get", "post")
                   if method == "post" or not REGISTRY[case[2]].changes]


@pytest.mark.parametrize(
    ("method", "user", "command", "params", "status", "expected"),
    [(method, *case[1:]) for method, case in BAD_INPUT_CALLS],
    ids=[f"{method}-{case[0]}" for method, case in BAD_INPUT_CALLS],
)
def test_bad_input_is_refused_with_its_reason_and_changes_nothing(
    api, world, user, command, params, status, expected, method
):
    before = snapshot()
    response = call(api(world.users[user]), command, method, **params)
    assert response.status_code == status, response.json()
    assert expected in error_of(response)
    assert snapshot() == before


def test_compaction_on_a_row_store_names_the_conversion(api, world, settings):
    settings.STORE_LAYOUT = "rows"  # a cluster whose store predates the batch layout
    ClusterFactory(name="rowland")
    before = snapshot()
    response = call(api(world.users["alice"]), "stream/create", path="/mapr/rowland/kv",
                    compact="true")
    assert response.status_code == 400, response.json()
    assert ("needs cluster rowland's message store in the batch layout: an operator converts "
            "it with `manage.py convertstores`") in error_of(response)
    assert snapshot() == before


def test_option_given_twice_is_refused(api, world):
    response = api(world.users["alice"]).get(f"/rest/stream/info?path={SF}&path={NY}")
    assert response.status_code == 400
    assert "-path is given 2 times" in error_of(response)


def test_nul_character_in_a_value_is_refused(api, world):
    before = snapshot()
    response = call(api(world.users["alice"]), "stream/create", path="/mapr/sanfrancisco/x",
                    tenant="acme\x00")
    assert response.status_code == 400
    assert "-tenant must be text without NUL characters" in error_of(response)
    assert snapshot() == before


def test_other_http_methods_get_405_in_the_envelope(api, world):
    response = api(world.users["alice"]).put(f"/rest/stream/info?path={SF}")
    assert response.status_code == 405
    assert error_of(response) == 'Method "PUT" not allowed.'


def test_65th_replica_is_refused(api, owner, activity, newyork):
    replicas = Stream.objects.bulk_create(
        StreamFactory.build(cluster=newyork, name=f"r{n}", created_by=owner) for n in range(64)
    )
    ReplicaLink.objects.bulk_create(
        ReplicaLink(source=activity, replica=replica, idx=n + 1, networkcompression="off")
        for n, replica in enumerate(replicas)
    )
    extra = StreamFactory(cluster=newyork, name="extra", created_by=owner)
    before = snapshot()
    response = call(api(owner), "stream/replica/add", path=activity.path, replica=extra.path)
    assert response.status_code == 409
    assert "/mapr/sanfrancisco/activity has 64 replicas" in error_of(response)
    assert snapshot() == before


def test_two_origins_of_one_topic_name_cannot_feed_one_replica(api, owner, activity,
                                                              activity_ny):
    web = StreamFactory(cluster=activity.cluster, name="web", created_by=owner)
    TopicFactory(stream=activity, name="clicks")
    TopicFactory(stream=web, name="clicks")
    services.replica_add(actor=owner, source=activity, replica=activity_ny)
    services.upstream_add(actor=owner, replica=activity_ny, source=activity)
    before = snapshot()
    response = call(api(owner), "stream/replica/add", path=web.path, replica=activity_ny.path)
    assert response.status_code == 409
    assert "topic name conflict: topic 'clicks' would reach /mapr/newyork/activity" in (
        error_of(response))
    assert snapshot() == before


# --- tenant scoping -------------------------------------------------------------------------

READS = [
    ("stream/info", {"path": SF}),
    ("stream/topic/list", {"path": SF}),
    ("stream/topic/info", {"path": SF, "topic": "clicks"}),
    ("stream/replica/list", {"path": SF}),
    ("stream/upstream/list", {"path": NY}),
]


@pytest.mark.parametrize(("command", "params"), READS, ids=[r[0] for r in READS])
def test_outsider_is_denied_every_read_exactly_like_a_missing_stream(api, world, command,
                                                                     params):
    hidden = call(api(world.users["mallory"]), command, **params)
    Stream.objects.filter(path=params["path"]).delete()
    missing = call(api(world.users["mallory"]), command, **params)
    assert hidden.status_code == missing.status_code == 404
    assert hidden.json()["errors"] == missing.json()["errors"]
    assert f"stream {params['path']} does not exist" in error_of(hidden)


def test_outsider_stream_list_shows_none_of_another_tenants_streams(api, world):
    assert ok(call(api(world.users["mallory"]), "stream/list")) == []


def test_outsider_cannot_name_another_tenants_stream_as_replica(api, world, outsider):
    mine = StreamFactory(cluster=world.ny.cluster, name="mine", created_by=outsider)
    before = snapshot()
    response = call(api(outsider), "stream/replica/add", path=mine.path, replica=SF)
    assert response.status_code == 404
    assert "stream /mapr/sanfrancisco/activity does not exist" in error_of(response)
    assert snapshot() == before
