"""The tenant-isolation sweep beyond /api/v1 (tests/portal/test_api.py sweeps that): every /rest
command that takes a stream path, and every page whose URL names an object, answers an outsider
exactly as for a missing object and changes nothing. Both sweeps enumerate the registry and the
URL conf, so a new command or page without scoping fails here."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import pytest
from django.test import Client
from django.urls import URLPattern, reverse
from django.utils import timezone
from knox.models import AuthToken

from accounts.models import (
    Invitation,
    Membership,
    Plan,
    Role,
    SignInSession,
    Tenant,
    TokenInfo,
)
from accounts.tokens import issue_token
from operations.models import AuditEvent
from portal.rest.commands import REGISTRY, Command
from portal.rest.options import Ace, Bool, Choice, Int, Option, Refused, StreamPath
from portal.web import urls as web_urls
from replication import services
from replication.engine.store import Record
from replication.models import (
    Cluster,
    Gateway,
    Job,
    RegistryConfig,
    ReplicaLink,
    Stream,
    SubjectVersion,
    Topic,
    Upstream,
)
from replication.services.members import invitation_create
from replication.services.messages import messages_produce
from replication.services.registry import Candidate, schema_register
from replication.services.registryreads import registry_access
from tests.factories import StreamFactory, UserFactory

pytestmark = pytest.mark.django_db
MISSING = "/mapr/newyork/no-such-stream"
MODELS = (Stream, Topic, ReplicaLink, Upstream, Cluster, Gateway, Tenant, Membership, Invitation,
          Job, AuditEvent, AuthToken, TokenInfo, SignInSession, SubjectVersion, RegistryConfig)


def snapshot() -> dict[str, list[dict]]:
    return {m.__name__: list(m.objects.order_by("pk").values()) for m in MODELS}


@pytest.fixture
def world(owner, outsider, activity, activity_ny, newyork) -> dict[str, Any]:
    """acme: activity (topic clicks) replicating to activity_ny, agreed; activity -> waiting
    (registered, not approved); a copystream job. globex: mallory's own stream."""
    services.topic_create(actor=owner, stream=activity, name="clicks", partitions=1)
    messages_produce(actor=owner, stream=activity, topic="clicks",
                     records=[Record(b"acme's click", key=b"acme")])  # a permalink's message
    pair = services.replica_add(actor=owner, source=activity, replica=activity_ny)
    services.upstream_add(actor=owner, replica=activity_ny, source=activity)
    spare = StreamFactory(cluster=newyork, name="spare", created_by=owner)
    waiting = services.replica_add(actor=owner, source=activity, replica=spare)
    job = Job.objects.create(kind=Job.Kind.COPYSTREAM, tenant=activity.tenant,
                             source=activity, source_path=activity.path,
                             destination_path=activity_ny.path)
    mine = StreamFactory(cluster=newyork, name="ledger", created_by=outsider)
    # alice administers acme, so the members pages answer her; bob is a member to manage.
    Membership.objects.filter(user=owner).update(role=Role.ADMIN)
    bob = Membership.objects.create(user=UserFactory(username="bob"), tenant=activity.tenant)
    invitation, _ = invitation_create(actor=owner, tenant=activity.tenant, role=Role.MEMBER)
    token = issue_token(owner, name="alice's", scope="read")[0]  # the account's own rows
    sign_in = SignInSession.objects.create(user=owner, session_key="k" * 32,
                                           last_seen=timezone.now())
    # A schema registry subject (not named after the stream: the 404 page repeats the URL).
    subject = "clicks-value"
    schema_register(access=registry_access(actor=owner), subject=subject,
                    candidate=Candidate("AVRO", '"string"', None))
    return {"owner": owner, "outsider": outsider, "activity": activity, "ny": activity_ny,
            "subject": subject, "pair": pair, "waiting": waiting, "job": job, "mine": mine,
            "membership": bob, "invitation": invitation, "token_id": token.digest[:16],
            "sign_in": sign_in}


# --- /rest: every command that takes a stream path --------------------------------------------

# Options naming a stream the command creates: a missing path is created, so they are not in
# the sweep; another tenant's path answers "not available", 404 (the test after the sweep).
# A default stream is created on first use, so setting one names a path like stream create does.
CREATES = {("stream/create", "path"), ("stream/replica/autosetup", "replica"),
           ("copystream", "dst"), ("tenant/defaultstream/set", "path")}
# Accepted only to be refused with the reason, never looked up.
NEVER_LOOKED_UP = {("stream/replica/edit", "newreplica")}
TEXT = {"topic": "clicks", "name": "tokyo", "dstcluster": "newyork", "gateways": "gw9",
        "tenant": "globex"}


def _filler(option: Option, own: str) -> str | None:
    if isinstance(option, Refused):
        return None
    if isinstance(option, StreamPath):
        return own
    if isinstance(option, Bool):
        return "false"
    if isinstance(option, Int):
        return "1"
    if isinstance(option, Choice):
        return option.choices[0]
    if isinstance(option, Ace):
        return "u:mallory"
    return TEXT.get(option.name, "x")


def _params(command: Command, target: str, value: str, own: str) -> dict[str, str]:
    params = {o.name: _filler(o, own) for o in command.options
              if o.required or isinstance(o, StreamPath)}
    for option in command.options:  # a stream the command would create: a fresh path
        if (command.path, option.name) in CREATES and option.name in params:
            params[option.name] = "/mapr/newyork/fresh"
    params[target] = value
    return {k: v for k, v in params.items() if v is not None}


def rest_targets() -> list[tuple[Command, str]]:
    return [(command, option.name) for path, command in sorted(REGISTRY.items())
            for option in command.options
            if isinstance(option, StreamPath) and (path, option.name) not in CREATES]


def _call(client: Any, command: Command, params: dict[str, str]) -> tuple[int, str]:
    response = client.post(f"/rest/{command.path}", urlencode(params),
                           content_type="application/x-www-form-urlencoded")
    body = response.json()
    return response.status_code, body["errors"][0]["desc"] if body["status"] == "ERROR" else ""


def test_the_rest_sweep_covers_every_stream_path_option():
    covered = {(c.path, name) for c, name in rest_targets()}
    assert {("stream/info", "path"), ("stream/replica/add", "replica"),
            ("stream/upstream/add", "upstream"), ("stream/create", "copymetafrom"),
            ("alarm/list", "path"), ("audit/list", "path")} <= covered
    assert len(covered) >= 20


def test_every_rest_stream_path_answers_an_outsider_like_a_missing_stream(api, world):
    client, secret, own = api(world["outsider"]), world["activity"].path, world["mine"].path
    before, failures = snapshot(), []
    for command, target in rest_targets():
        status, desc = _call(client, command, _params(command, target, secret, own))
        missing_status, missing_desc = _call(client, command,
                                             _params(command, target, MISSING, own))
        same = (status, desc.replace(secret, "<p>")) == (missing_status,
                                                          missing_desc.replace(MISSING, "<p>"))
        looked_up = (command.path, target) not in NEVER_LOOKED_UP
        if not same or (looked_up and status != 404):
            failures.append(f"{command.name} -{target}: {status} {desc!r} / "
                            f"{missing_status} {missing_desc!r}")
    assert failures == []
    assert snapshot() == before


@pytest.mark.parametrize("suffix", ["", "/sub"])
def test_creating_at_or_inside_another_tenants_stream_names_nothing_of_it(api, world, suffix):
    client, acme = api(world["outsider"]), world["ny"].path
    given = acme + suffix
    calls = {"stream/create": {"path": given},
             "stream/replica/autosetup": {"path": world["mine"].path, "replica": given},
             "copystream": {"src": world["mine"].path, "dst": given},
             "tenant/defaultstream/set": {"cluster": "newyork", "path": given}}
    assert set(calls) == {path for path, _ in CREATES}
    before = snapshot()
    for path, params in calls.items():
        status, desc = _call(client, REGISTRY[path], params)
        assert (status, desc) == (404, f"stream path {given} is not available: choose another "
                                       "path"), path
    assert snapshot() == before


def test_rest_commands_without_required_options_show_an_outsider_nothing_of_acme(api, world):
    client, checked = api(world["outsider"]), 0
    for path, command in sorted(REGISTRY.items()):
        if any(o.required for o in command.options):
            continue
        body = client.get(f"/rest/{path}").content.decode()
        for secret in (world["activity"].path, str(world["activity"].uuid), "acme"):
            assert secret not in body, f"{command.name} shows {secret} to an outsider"
        checked += 1
    assert checked >= 5  # cluster list, stream list, alarm list, audit list, gateway list


# --- web pages with an object in the URL ------------------------------------------------------


def _pk_for(name: str, world: dict[str, Any]) -> int:
    if name.startswith("approval-"):
        return world["waiting"].pk
    if name.startswith("setup-auto") or name == "topology-link-lag":
        return world["pair"].pk
    if name.startswith("job-"):
        return world["job"].pk
    if name.startswith("member-"):
        return world["membership"].pk
    if name.startswith("invitation-"):
        return world["invitation"].pk
    if name == "session-end":
        return world["sign_in"].pk
    return world["activity"].pk  # the stream pages


def _page_kwargs(pattern: URLPattern, world: dict[str, Any]) -> dict[str, Any]:
    values = {"pk": _pk_for(pattern.name, world), "link_pk": world["pair"].pk,
              "action": "pause", "decision": "approve", "source_pk": world["activity"].pk,
              "replica_pk": world["ny"].pk, "number": 2, "token_id": world["token_id"],
              "name": "clicks", "topic": "clicks", "partition": 0, "offset": 0,
              "subject": world["subject"]}
    names = list(pattern.pattern.converters)
    missing = [n for n in names if n not in values]
    assert not missing, f"{pattern.name}: add a value for {missing} to _page_kwargs"
    return {n: values[n] for n in names}


# Links whose token is the credential, whoever opens them (an invitation, a password reset):
# nothing in them is looked up by the visitor's tenants. Their own tests cover them
# (tests/portal/web/test_invitations.py, test_password_reset.py).
BEARER_LINKS = {"invitation-accept", "password_reset_confirm"}


# Objects of no tenant, which every signed-in user reads (as `cluster list` and `cluster info`):
# a cluster's page shows its store group, never a tenant's streams
# (tests/portal/web/test_clusters.py).
SHARED_OBJECTS = {"cluster-detail"}


def page_routes() -> list[URLPattern]:
    return [p for p in web_urls.urlpatterns
            if p.pattern.converters and p.name not in BEARER_LINKS | SHARED_OBJECTS]


def test_every_object_page_answers_an_outsider_404_and_changes_nothing(world):
    outsider, owner = Client(), Client()
    outsider.force_login(world["outsider"])
    owner.force_login(world["owner"])
    before, failures, routes = snapshot(), [], page_routes()
    assert len(routes) >= 10
    for pattern in routes:
        target = reverse(pattern.name, kwargs=_page_kwargs(pattern, world))
        answers = {m: getattr(outsider, m)(target) for m in ("get", "post")}
        for method, response in answers.items():
            leaked = world["activity"].path in response.content.decode()
            if response.status_code not in (404, 405) or leaked:
                failures.append(f"{method.upper()} {target}: {response.status_code}")
        if 404 not in {r.status_code for r in answers.values()}:
            failures.append(f"{target}: never looked the object up (no 404)")
        if answers["get"].status_code != 405:  # the same URL reaches a row for its owner
            assert owner.get(target).status_code == 200, target
    assert failures == []
    assert snapshot() == before


def test_pages_without_an_object_show_an_outsider_nothing_of_acme(world):
    client = Client()
    client.force_login(world["outsider"])
    for name in ("overview", "streams", "approvals", "jobs", "audit", "clusters"):
        body = client.get(reverse(name)).content.decode()
        assert world["activity"].path not in body and "acme" not in body, name


def test_an_outsider_neither_sees_nor_revokes_acmes_tokens_nor_reads_its_plan(api, world):
    """The API's and the CLI's token commands and `tenant plan list` answer an outsider with
    its own rows only; alice's token id answers as absent and stays."""
    alice_plan = Tenant.objects.get(name="acme")
    alice_plan.plan = Plan.objects.create(name="acme-gold")
    alice_plan.save()
    client = api(world["outsider"])
    issue_token(world["outsider"], name="mallory's")
    assert [r["name"] for r in client.get("/api/v1/tokens/").json()] == ["mallory's"]
    listed = client.post("/rest/user/token/list").json()["data"]
    assert [r["name"] for r in listed] == ["mallory's"]
    before = snapshot()
    gone = client.delete(f"/api/v1/tokens/{world['token_id']}/")
    assert gone.status_code == 404 and "alice" not in gone.content.decode()
    refused = client.post("/rest/user/token/revoke", urlencode({"id": world["token_id"]}),
                          content_type="application/x-www-form-urlencoded").json()
    assert refused["status"] == "ERROR" and refused["errors"][0]["id"] == 2
    assert snapshot() == before
    plans = client.post("/rest/tenant/plan/list").content.decode()
    assert "acme" not in plans and "gold" not in plans and "globex" in plans
    audit = client.post("/rest/audit/list", urlencode({"type": "plan"}),
                        content_type="application/x-www-form-urlencoded").json()["data"]
    assert audit == []
