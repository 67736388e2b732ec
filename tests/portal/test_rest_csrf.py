"""/rest against cross-site request forgery (issue 27, item 1): every command says whether it
changes anything; one that does refuses GET (405, changing nothing), since a page on another
site can make a signed-in browser send a GET with its session cookie; a POST or DELETE signed
in by the session cookie needs the CSRF token, one with an API token or Basic credentials
does not. Commands that read answer GET and POST. The browser's side of it is
tests/e2e/test_rest_csrf.py."""

from __future__ import annotations

import base64
import errno
from typing import Any
from urllib.parse import urlencode

import pytest
from django.test import Client
from knox.models import AuthToken

from accounts.models import Membership, ScramCredential, Tenant
from operations.models import AuditEvent
from portal.rest.commands import REGISTRY, Command
from portal.rest.commands.registry import command
from portal.rest.options import Refused, StreamPath
from replication.engine.store import Record
from replication.models import (
    Cluster,
    DefaultStream,
    Gateway,
    Job,
    ReplicaLink,
    Stream,
    Topic,
    Upstream,
)
from replication.services.credentials import scram_credential_set
from replication.services.cursors import cursor_commit, cursors_fetch
from replication.services.defaultstreams import default_stream_set
from replication.services.messages import messages_consume, messages_produce
from replication.services.registry import Candidate, schema_register
from replication.services.registryreads import registry_access
from tests.clients import signed_in

pytestmark = pytest.mark.django_db
PASSWORD = "correct horse battery staple"  # tests.factories.UserFactory's
SF, NY = "/mapr/sanfrancisco/activity", "/mapr/newyork/activity"
MODELS = (Stream, Topic, ReplicaLink, Upstream, Cluster, Gateway, DefaultStream, Job,
          AuditEvent, Tenant, Membership, ScramCredential)
CHANGES = sorted(path for path, spec in REGISTRY.items() if spec.changes)
READS = sorted(path for path, spec in REGISTRY.items() if not spec.changes)
# What the issue's attacker sent: alice's ttl and both ACEs changed by a navigation.
EDIT = {"path": SF, "ttl": "222", "produceperm": "p", "consumeperm": "p"}


def state() -> dict[str, Any]:
    """Everything a command could change: the control plane's rows, activity's committed
    cursors and the messages of clicks."""
    rows = {m.__name__: list(m.objects.order_by("pk").values()) for m in MODELS}
    owner, activity = Stream.objects.get(path=SF).created_by, Stream.objects.get(path=SF)
    cursors = cursors_fetch(actor=owner, stream=activity, group="billing")
    messages = [m.offset for m in messages_consume(actor=owner, stream=activity, topic="clicks")]
    return {**rows, "cursors": cursors, "messages": messages}


@pytest.fixture
def world(owner, outsider, operator, clicks, agreed, activity_ny):
    """alice's activity (clicks: 3 partitions, a message, a committed cursor) replicating to
    activity_ny, agreed; a copystream job; acme's default stream on sanfrancisco; mallory in
    globex; alice's SCRAM-SHA-256 password."""
    messages_produce(actor=owner, stream=clicks.stream, topic="clicks",
                     records=[Record(value=b"v", partition=0)])
    default_stream_set(actor=owner, cluster="sanfrancisco", path="/mapr/sanfrancisco/kafka",
                       tenant=None, personal=False)
    cursor_commit(actor=owner, stream=clicks.stream, group="billing", topic="clicks",
                  partition=0, offset=1)
    job = Job.objects.create(kind=Job.Kind.COPYSTREAM, tenant=clicks.stream.tenant,
                             source=clicks.stream, source_path=SF, destination_path=NY)
    scram_credential_set(actor=owner, mechanism="SCRAM-SHA-256", password="p")  # to delete
    schema_register(access=registry_access(actor=owner), subject="users-value",
                    candidate=Candidate("AVRO", SCHEMA, None))
    return {"owner": owner, "outsider": outsider, "operator": operator, "job": job}


# What each option names, so that a command would do its work if it ran.
VALUES = {"path": SF, "replica": NY, "upstream": SF, "source": SF, "src": SF, "dst": NY,
          "copymetafrom": SF, "topic": "clicks", "name": "tokyo", "dstcluster": "newyork",
          "cluster": "sanfrancisco", "gateways": "gw9", "consumergroup": "billing",
          "mechanism": "scram-sha-256", "password": "p", "tenant": "acme", "plan": "team",
          "subject": "users-value", "schema": '{"type": "string"}',
          "url": "postgresql://postgres@127.0.0.1:5432/never_made", "partition": "0", "to": "s2"}
SCHEMA = '{"type": "string"}'
OWN_VALUES = {
    "stream/create": {"path": "/mapr/sanfrancisco/fresh"},
    "stream/edit": EDIT,
    "stream/topic/create": {"topic": "views"},
    "stream/replica/failover": {"path": NY},
    "stream/replica/autosetup": {"replica": "/mapr/newyork/fresh"},
    "stream/upstream/add": {"path": NY}, "stream/upstream/remove": {"path": NY},
    "stream/upstream/list": {"path": NY},
    "tenant/defaultstream/set": {"path": "/mapr/sanfrancisco/other"},
    "copystream": {"dst": "/mapr/newyork/copy"},
    "cluster/gateway/local": {"cluster": "newyork"},
    "stream/purge": {"all": "true"},
    "tenant/quota/set": {"producebytes": "100"},
    "cluster/info": {"name": "sanfrancisco"},
}


def params_of(spec: Command, job: Job) -> dict[str, str]:
    wanted = [o for o in spec.options if (o.required or isinstance(o, StreamPath))
              and not isinstance(o, Refused) and o.name != "newreplica"]  # refused always
    params = {o.name: str(job.pk) if o.name == "id" else VALUES[o.name] for o in wanted}
    return params | OWN_VALUES.get(spec.path, {})


def refusals(responses: dict[str, Any]) -> list[str]:
    """The commands whose GET was not refused as it must be."""
    wrong = []
    for path, response in responses.items():
        body, name = response.json(), REGISTRY[path].name
        refused = (response.status_code == 405 and body["status"] == "ERROR"
                   and list(body) == ["timestamp", "timeofday", "status", "errors"]
                   and body["errors"][0]["id"] == errno.EINVAL
                   and f"'{name}' changes data, so it takes POST" in body["errors"][0]["desc"]
                   and response.headers.get("Allow") == "POST, DELETE")
        if not refused:
            wrong.append(f"{name}: {response.status_code} {body}")
    return wrong


def session_with_csrf(user: Any) -> tuple[Client, str]:
    """A browser-like client signed in by the session cookie, and its CSRF token (from a page
    of the portal, as the browser gets it)."""
    client = signed_in(user, csrf=True)
    assert client.get("/streams/").status_code == 200
    return client, client.cookies["csrftoken"].value


def post(client: Client, path: str, params: dict[str, str], **headers: str) -> Any:
    return client.post(f"/rest/{path}", urlencode(params),
                       content_type="application/x-www-form-urlencoded", **headers)


# --- every command is a read or a change -----------------------------------------------------


def test_every_command_says_whether_it_changes_anything():
    assert all(isinstance(spec.changes, bool) for spec in REGISTRY.values())
    assert {"stream/edit", "stream/topic/create", "stream/topic/delete", "stream/purge",
            "stream/cursor/delete", "copystream", "cluster/gateway/set"} <= set(CHANGES)
    assert {"stream/info", "stream/list", "stream/topic/list", "stream/cursor/list",
            "alarm/list", "audit/list", "job/info"} <= set(READS)


def test_a_command_registered_without_saying_whether_it_changes_anything_is_refused():
    with pytest.raises(TypeError, match="changes"):
        command("stream/frobnicate", summary="Frobnicate.")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="changes must be True or False"):
        command("stream/frobnicate", summary="Frobnicate.", changes="yes")  # type: ignore
    assert "stream/frobnicate" not in REGISTRY


# --- GET ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("auth", ["session", "token"])
def test_every_command_that_changes_refuses_get_with_405_and_changes_nothing(world, auth):
    client = signed_in(world["owner"]) if auth == "session" else Client(
        HTTP_AUTHORIZATION=f"Token {AuthToken.objects.create(world['owner'])[1]}")
    before = state()
    responses = {path: client.get(f"/rest/{path}", params_of(REGISTRY[path], world["job"]))
                 for path in CHANGES}
    assert refusals(responses) == []
    assert state() == before
    assert len(CHANGES) >= 25


def test_the_issues_get_urls_change_nothing_and_the_same_options_over_post_do(world):
    client = signed_in(world["owner"])
    before = state()
    attacks = {
        "stream/edit": client.get("/rest/stream/edit?" + urlencode(EDIT)),
        "stream/topic/create": client.get(f"/rest/stream/topic/create?path={SF}&topic=views"),
        "stream/topic/delete": client.get(f"/rest/stream/topic/delete?path={SF}&topic=clicks"),
    }
    assert refusals(attacks) == []
    assert state() == before

    token = Client(HTTP_AUTHORIZATION=f"Token {AuthToken.objects.create(world['owner'])[1]}")
    for path, params in (("stream/edit", EDIT), ("stream/topic/create", {"path": SF,
                         "topic": "views"})):
        assert post(token, path, params).json()["status"] == "OK"
    stream = Stream.objects.get(path=SF)
    assert (stream.ttl, stream.produceperm, stream.consumeperm) == (222, "p", "p")
    assert stream.topics.filter(name="views").exists()


# Reads only cluster operators may make (they name the stores' servers): read as one.
OPERATOR_READS = {"cluster/store/list", "cluster/store/rebalancestatus"}


def reader(user: Any, auth: str) -> tuple[Client, dict[str, str]]:
    """A client of the user signed in as `auth` says, and the headers a POST needs."""
    if auth == "session":
        client, csrf = session_with_csrf(user)
        return client, {"HTTP_X_CSRFTOKEN": csrf}
    return Client(HTTP_AUTHORIZATION=f"Token {AuthToken.objects.create(user)[1]}"), {}


@pytest.mark.parametrize("auth", ["session", "token"])
def test_every_command_that_reads_answers_get_and_post_and_changes_nothing(world, auth):
    readers = {who: reader(world[who], auth) for who in ("owner", "operator")}
    before, wrong = state(), []
    for path in READS:
        client, headers = readers["operator" if path in OPERATOR_READS else "owner"]
        params = params_of(REGISTRY[path], world["job"])
        over_get = client.get(f"/rest/{path}", params)
        over_post = post(client, path, params, **headers)
        if (over_get.status_code, over_post.status_code) != (200, 200):
            wrong.append(f"{path}: GET {over_get.json()} / POST {over_post.json()}")
    assert wrong == []
    assert state() == before
    assert len(READS) >= 15


# --- the session cookie needs the CSRF token -------------------------------------------------

ISSUE_CHANGES = [("stream/edit", EDIT), ("stream/topic/create", {"path": SF, "topic": "views"}),
                 ("stream/topic/delete", {"path": SF, "topic": "clicks"})]


@pytest.mark.parametrize(("path", "params"), ISSUE_CHANGES, ids=[c[0] for c in ISSUE_CHANGES])
@pytest.mark.parametrize("method", ["post", "delete"])
def test_a_session_change_without_the_csrf_token_is_refused_403_and_changes_nothing(
    world, path, params, method
):
    client, _ = session_with_csrf(world["owner"])  # the browser holds a token, the page not
    before = state()
    response = getattr(client, method)(f"/rest/{path}", urlencode(params),
                                       content_type="application/x-www-form-urlencoded")
    body = response.json()
    assert response.status_code == 403 and body["status"] == "ERROR", body
    assert body["errors"][0]["id"] == errno.EACCES
    desc = body["errors"][0]["desc"]
    assert "CSRF" in desc and "X-CSRFToken header" in desc and "Authorization: Token" in desc
    assert state() == before


def test_a_session_change_with_a_wrong_csrf_token_is_refused(world):
    client, _ = session_with_csrf(world["owner"])
    before = state()
    response = post(client, "stream/edit", EDIT, HTTP_X_CSRFTOKEN="x" * 32)
    assert response.status_code == 403, response.json()
    assert "X-CSRFToken header" in response.json()["errors"][0]["desc"]
    assert state() == before


@pytest.mark.parametrize(("path", "params"), ISSUE_CHANGES, ids=[c[0] for c in ISSUE_CHANGES])
def test_a_session_change_with_the_csrf_token_is_done(world, path, params):
    client, csrf = session_with_csrf(world["owner"])
    response = post(client, path, params, HTTP_X_CSRFTOKEN=csrf)
    assert response.json()["status"] == "OK", response.json()
    stream = Stream.objects.get(path=SF)
    assert {
        "stream/edit": (stream.ttl, stream.consumeperm) == (222, "p"),
        "stream/topic/create": stream.topics.filter(name="views").exists(),
        "stream/topic/delete": not stream.topics.filter(name="clicks").exists(),
    }[path]


def test_a_session_change_with_the_csrf_token_as_a_form_field_is_done(world):
    client, csrf = session_with_csrf(world["owner"])
    response = post(client, "stream/edit", EDIT | {"csrfmiddlewaretoken": csrf})
    assert response.json()["status"] == "OK", response.json()
    assert Stream.objects.get(path=SF).ttl == 222


# --- API tokens and Basic need no CSRF token ---------------------------------------------------


@pytest.mark.parametrize("scheme", ["Token", "Basic"])
def test_a_change_with_an_authorization_header_needs_no_csrf_token(world, scheme):
    if scheme == "Token":
        credentials = AuthToken.objects.create(world["owner"])[1]
    else:
        credentials = base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
    client = Client(enforce_csrf_checks=True, HTTP_AUTHORIZATION=f"{scheme} {credentials}")
    response = post(client, "stream/edit", EDIT)
    assert response.json()["status"] == "OK", response.json()
    assert Stream.objects.get(path=SF).ttl == 222


# --- outsiders -------------------------------------------------------------------------------


def test_an_outsider_with_a_valid_csrf_token_is_denied_like_a_missing_stream(world):
    client, csrf = session_with_csrf(world["outsider"])
    before = state()
    hidden = post(client, "stream/edit", EDIT, HTTP_X_CSRFTOKEN=csrf)
    missing = post(client, "stream/edit", EDIT | {"path": "/mapr/sanfrancisco/none"},
                   HTTP_X_CSRFTOKEN=csrf)
    assert hidden.status_code == missing.status_code == 404
    assert f"stream {SF} does not exist" in hidden.json()["errors"][0]["desc"]
    over_get = client.get("/rest/stream/edit?" + urlencode(EDIT))
    assert refusals({"stream/edit": over_get}) == []  # the same answer as alice's: no hint
    assert state() == before
