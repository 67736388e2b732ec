"""The browser portal's pages: tenant switcher, streams, replica actions, messages, approvals,
lag history and charts, the overview's gateways and health, the set-up wizard and the jobs page.
Every page goes through restrict(user), so the outsider (another tenant) gets 404 everywhere."""

import re
import uuid
from datetime import timedelta
from functools import partial

import pytest
from django.core.cache import cache
from django.test import Client
from django.utils import timezone

from accounts.models import Role
from replication import lag_history
from replication.engine.store import Record
from replication.models import ReplicaLink, ReplicaState, Stream, Upstream
from replication.services import replica_add, topic_create, upstream_add
from replication.services.messages import messages_produce
from replication.stores import store_for
from tests.clients import query_count, signed_in
from tests.factories import (
    GatewayFactory,
    MembershipFactory,
    StreamFactory,
    TenantFactory,
    TopicFactory,
    linked_pairs,
)

pytestmark = pytest.mark.usefixtures("private_cache")


@pytest.fixture
def pending(owner, activity, mirror):
    """alice registered carol's mirror as a replica of her activity: it waits for carol."""
    return replica_add(actor=owner, source=activity, replica=mirror)


def produce(user, stream, count: int, topic: str = "clicks") -> None:
    messages_produce(actor=user, stream=stream, topic=topic,
                     records=[Record(f"m{i}".encode()) for i in range(count)])


def messages_of(response) -> list[str]:
    return [str(m) for m in response.wsgi_request._messages]


# -- sign in and out, tenant switcher ------------------------------------------------------

def test_overview_asks_anonymous_users_to_sign_in(client, db):
    response = client.get("/")
    assert response.status_code == 302
    assert response.url.startswith("/login/")


def test_sign_in_page_renders(client, db):
    response = client.get("/login/")
    assert response.status_code == 200
    assert b'name="password"' in response.content


def test_sign_in_with_password_then_sign_out_with_csrf_token(owner):
    client = Client(enforce_csrf_checks=True)
    client.get("/login/")
    token = client.cookies["csrftoken"].value
    response = client.post("/login/", {"username": "alice", "password":
                           "correct horse battery staple", "csrfmiddlewaretoken": token})
    assert response.status_code == 302
    assert client.get("/").status_code == 200
    token = client.cookies["csrftoken"].value
    assert client.post("/logout/", {"csrfmiddlewaretoken": token}).status_code == 302
    assert client.get("/").status_code == 302


def test_sign_out_without_csrf_token_is_refused(owner):
    client = signed_in(owner, csrf=True)
    assert client.post("/logout/").status_code == 403
    assert client.get("/").status_code == 200


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


def test_user_in_one_tenant_sees_no_switcher(owner):
    page = signed_in(owner).get("/").content.decode()
    assert 'name="tenant"' not in page


def test_switcher_changes_which_tenants_streams_are_listed(owner, activity, newyork):
    other = TenantFactory(name="initech")
    MembershipFactory(user=owner, tenant=other, role=Role.MEMBER)
    Stream.objects.create(path="/mapr/newyork/ledger", cluster=newyork, name="ledger",
                          tenant=other, created_by=owner, **dict.fromkeys(
                              ("produceperm", "consumeperm", "topicperm", "copyperm",
                               "adminperm"), "u:alice"))
    client = signed_in(owner)
    page = client.get("/streams/").content.decode()
    assert 'name="tenant"' in page
    assert "/mapr/sanfrancisco/activity" in page and "/mapr/newyork/ledger" not in page
    assert client.post("/tenant/", {"tenant": other.pk}).status_code == 302
    page = client.get("/streams/").content.decode()
    assert "/mapr/newyork/ledger" in page and "/mapr/sanfrancisco/activity" not in page


def test_the_streams_list_searches_by_a_part_of_the_path(owner, outsider, activity,
                                                         activity_ny):
    client = signed_in(owner)
    found = client.get("/streams/", {"q": "NewYork"}).content.decode()
    assert "/mapr/newyork/activity" in found and "/mapr/sanfrancisco/activity" not in found
    assert 'value="NewYork"' in found and 'href="/streams/">Show all<' in found
    none = client.get("/streams/", {"q": "nothing-like-it"}).content.decode()
    assert "No stream's path contains that." in none
    theirs = signed_in(outsider).get("/streams/", {"q": "activity"}).content.decode()
    assert "/mapr/sanfrancisco/activity" not in theirs  # another tenant's: never found


def test_switching_to_a_tenant_that_is_not_yours_is_404(owner, outsider):
    globex = outsider.memberships.get().tenant
    assert signed_in(owner).post("/tenant/", {"tenant": globex.pk}).status_code == 404


# -- streams -------------------------------------------------------------------------------

def test_create_a_stream_through_the_form(owner, sanfrancisco):
    response = signed_in(owner).post("/streams/", {"path": "/mapr/sanfrancisco/clicks",
                                                   "consumeperm": "u:alice | g:analysts"})
    stream = Stream.objects.get(path="/mapr/sanfrancisco/clicks")
    assert response.status_code == 302 and response.url == f"/streams/{stream.pk}/"
    assert stream.consumeperm == "u:alice | g:analysts"
    assert stream.adminperm == "u:alice"  # blank fields keep the default


def test_create_with_a_bad_ace_shows_the_services_reason(owner, sanfrancisco):
    response = signed_in(owner).post("/streams/", {"path": "/mapr/sanfrancisco/clicks",
                                                   "adminperm": "u:alice &"})
    assert response.status_code == 400
    page = response.content.decode()
    # beside the field, with what was typed kept
    assert re.search(r'value="u:alice &amp;".*?aria-invalid="true".*?class="field-error" '
                     r'id="err-adminperm" role="alert">the adminperm field', page, re.S)
    assert 'value="/mapr/sanfrancisco/clicks"' in page
    assert not Stream.objects.filter(path="/mapr/sanfrancisco/clicks").exists()


def test_ace_check_reports_position_and_reason(owner):
    page = signed_in(owner).get("/streams/ace-check/", {"adminperm": "u:alice & "}).content
    match = re.search(rb'data-position="(\d+)"', page)
    assert match and int(match.group(1)) >= 8
    assert b"position" in page


def test_ace_check_shows_the_canonical_form_of_a_valid_ace(owner):
    page = signed_in(owner).get("/streams/ace-check/", {"consumeperm": "u:a|u:b"}).content
    assert b"valid" in page and b"u:a | u:b" in page


def test_stream_page_shows_aces_only_to_adminperm_holders(owner, member, activity):
    assert "u:alice" in signed_in(owner).get(f"/streams/{activity.pk}/access/").content.decode()
    page = signed_in(member).get(f"/streams/{activity.pk}/access/").content.decode()
    assert "u:alice" not in page and "edit-aces" not in page


def test_edit_aces_through_the_form(owner, activity):
    signed_in(owner).post(f"/streams/{activity.pk}/aces/", {"consumeperm": "p"})
    activity.refresh_from_db()
    assert activity.consumeperm == "p" and activity.adminperm == "u:alice"


def test_member_without_adminperm_cannot_edit_aces(member, activity):
    response = signed_in(member).post(f"/streams/{activity.pk}/aces/", {"consumeperm": "p"})
    activity.refresh_from_db()
    assert activity.consumeperm == "u:alice"
    assert response.status_code == 400 and "needs adminperm" in response.content.decode()


def test_stream_page_shows_partitions_with_high_water_marks(owner, activity):
    topic_create(actor=owner, stream=activity, name="clicks", partitions=2)
    messages_produce(actor=owner, stream=activity, topic="clicks",
                     records=[Record(b"x", partition=1) for _ in range(3)])
    page = signed_in(owner).get(f"/streams/{activity.pk}/topics/").content.decode()
    assert re.findall(r'class="hwm">(\d+)<', page) == ["0", "3"]


def test_message_browser_pages_through_text_and_binary(owner, activity):
    topic_create(actor=owner, stream=activity, name="clicks")
    records = [Record(f"v{i}".encode(), key=b"k") for i in range(12)] + [Record(b"\xff\x00")]
    messages_produce(actor=owner, stream=activity, topic="clicks", records=records)
    client = signed_in(owner)
    page = client.get(f"/streams/{activity.pk}/messages/",
                      {"topic": "clicks", "order": "oldest", "limit": 10}).content.decode()
    # Whole words: the page's random CSRF token may hold "v9" inside it.
    assert {"v0", "v9"} <= shown(page) and "v10" not in shown(page)
    page = client.get(f"/streams/{activity.pk}/messages/",
                      {"topic": "clicks", "from_offset": 10, "order": "oldest"}).content.decode()
    assert "v11" in shown(page) and "ff 00" in page and "v9" not in shown(page)  # binary as hex


def shown(page: str) -> set[str]:
    return set(re.findall(r"\bv\d+\b", page))


def test_message_browser_requires_consumeperm(member, activity, owner):
    topic_create(actor=owner, stream=activity, name="clicks")
    page = signed_in(member).get(f"/streams/{activity.pk}/messages/").content.decode()
    assert "needs consumeperm" in page


# -- replica actions -----------------------------------------------------------------------

def test_owner_registers_pauses_resumes_and_removes_a_replica(owner, activity, mirror):
    client = signed_in(owner)
    client.post(f"/streams/{activity.pk}/replicas/add/", {"replica": mirror.path})
    link = ReplicaLink.objects.get(source=activity, replica=mirror)
    assert link.created_by == owner
    base = f"/streams/{activity.pk}/replicas/{link.pk}"
    client.post(f"{base}/pause/")
    link.refresh_from_db()
    assert link.paused
    client.post(f"{base}/resume/")
    link.refresh_from_db()
    assert not link.paused
    client.post(f"{base}/remove/")
    assert not ReplicaLink.objects.filter(pk=link.pk).exists()


def test_removing_a_replica_asks_first_and_can_be_undone(owner, activity, mirror):
    client = signed_in(owner)
    link = replica_add(actor=owner, source=activity, replica=mirror, paused=True, throttle=True)
    page = client.get(f"/streams/{activity.pk}/").content.decode()
    base = f"/streams/{activity.pk}/replicas/{link.pk}"
    assert f'href="{base}/remove/"' in page and f'formaction="{base}/remove/"' not in page
    assert client.post(f"{base}/pause/").status_code == 302  # one click for what is reversible
    asked = client.get(f"{base}/remove/").content.decode()
    assert ReplicaLink.objects.filter(pk=link.pk).exists()  # asking removed nothing
    assert "Remove replica <code>/mapr/newyork/mirror</code>?" in asked
    assert "The replica stream stays" in asked and "Cancel" in asked
    assert client.get(f"{base}/pause/").status_code == 405
    done = client.post(f"{base}/remove/")
    assert done.status_code == 302 and not ReplicaLink.objects.filter(pk=link.pk).exists()
    page = client.get(done.url).content.decode()
    assert 'id="replica-undo"' in page and "<code>/mapr/newyork/mirror</code> is no longer" in page
    client.post(f"/streams/{activity.pk}/replicas/undo/")
    back = ReplicaLink.objects.get(source=activity, replica=mirror)
    assert (back.paused, back.throttle) == (True, True)  # the settings it had
    assert 'id="replica-undo"' not in client.get(done.url).content.decode()
    assert client.post(f"/streams/{activity.pk}/replicas/undo/").status_code == 404


def test_member_without_adminperm_cannot_pause(member, pending, activity):
    response = signed_in(member).post(f"/streams/{activity.pk}/replicas/{pending.pk}/pause/")
    pending.refresh_from_db()
    assert not pending.paused
    assert any("may not pause replicas" in m for m in messages_of(response))


def test_stream_page_shows_replica_state_and_requester(owner, pending, activity):
    page = signed_in(owner).get(f"/streams/{activity.pk}/replicas/").content.decode()
    assert "/mapr/newyork/mirror" in page and ReplicaState.WAITING_FOR_UPSTREAM in page
    assert "alice" in page


# -- approvals -----------------------------------------------------------------------------

def test_replica_owner_sees_the_pending_request(carol, pending):
    topic_create(actor=pending.created_by, stream=pending.source, name="clicks")
    page = signed_in(carol).get("/approvals/").content.decode()
    assert "/mapr/sanfrancisco/activity" in page and "alice" in page and "clicks" in page
    assert "conflict" not in page and "Reject" not in page  # carol can't administer the source


def test_approve_adds_the_upstream_and_the_link_replicates(carol, pending):
    signed_in(carol).post(f"/approvals/{pending.pk}/approve/")
    assert Upstream.objects.filter(source=pending.source, replica=pending.replica).exists()
    pending.refresh_from_db()
    assert pending.replica_state() == ReplicaState.REPLICATING


def test_approvals_show_a_topic_origin_conflict(owner, carol, pending, mirror):
    # The services refuse such a topic while the registration exists (it counts in the
    # topology check); rows written around them, as by an older version, still show up here.
    topic_create(actor=owner, stream=pending.source, name="clicks")
    TopicFactory(stream=mirror, name="clicks")
    page = signed_in(carol).get(f"/approvals/{pending.pk}/").content.decode()
    assert "topic name conflict" in page


def test_member_without_adminperm_on_the_replica_cannot_approve(member, pending):
    client = signed_in(member)
    assert "/mapr/newyork/mirror" not in client.get("/approvals/").content.decode()
    response = client.post(f"/approvals/{pending.pk}/approve/")
    assert not Upstream.objects.exists()
    assert any("may not add an upstream" in m for m in messages_of(response))


def test_reject_needs_adminperm_on_the_source(owner, carol, pending, activity):
    signed_in(carol).post(f"/approvals/{pending.pk}/reject/")
    assert ReplicaLink.objects.filter(pk=pending.pk).exists()
    # alice administers both ends of her own pair: she may withdraw (reject) it.
    own = replica_add(actor=owner, source=activity,
                      replica=StreamFactory(name="copy", created_by=owner))
    signed_in(owner).post(f"/approvals/{own.pk}/reject/")
    assert not ReplicaLink.objects.filter(pk=own.pk).exists()


# -- tenant isolation and CSRF -------------------------------------------------------------

def _object_urls(stream, link) -> tuple[list[str], list[str]]:
    s, k = stream.pk, link.pk
    gets = [f"/streams/{s}/", f"/streams/{s}/replicas/", f"/streams/{s}/messages/",
            f"/approvals/{k}/"]
    posts = [f"/streams/{s}/aces/", f"/streams/{s}/replicas/add/",
             *(f"/streams/{s}/replicas/{k}/{a}/" for a in ("pause", "resume", "remove")),
             f"/approvals/{k}/approve/", f"/approvals/{k}/reject/"]
    return gets, posts


def test_outsider_gets_404_on_every_object_url(outsider, pending, activity):
    client = signed_in(outsider)
    gets, posts = _object_urls(activity, pending)
    for url in gets:
        assert client.get(url).status_code == 404, url
    for url in posts:
        assert client.post(url, {"replica": "/mapr/newyork/mirror"}).status_code == 404, url
    for url in ("/", "/streams/", "/approvals/"):
        assert "/mapr/sanfrancisco/activity" not in client.get(url).content.decode(), url
    assert ReplicaLink.objects.filter(pk=pending.pk, paused=False).exists()


def test_every_form_enforces_csrf(owner, pending, activity):
    client = signed_in(owner, csrf=True)
    _gets, posts = _object_urls(activity, pending)
    for url in [*posts, "/streams/", "/tenant/", "/logout/"]:
        assert client.post(url, {}).status_code == 403, url
    assert ReplicaLink.objects.filter(pk=pending.pk).exists()


def test_every_page_requires_sign_in(client, pending, activity):
    gets, posts = _object_urls(activity, pending)
    for url in [*gets, "/streams/", "/approvals/", "/approvals/pending/",
                "/overview/replication/", "/streams/ace-check/"]:
        assert client.get(url).status_code == 302, url
    for url in posts:
        assert client.post(url).status_code == 302, url


def test_fragments_render_for_live_updates(owner, carol, pending):
    assert b"overview-links" in signed_in(owner).get("/overview/replication/").content
    assert b"/mapr/newyork/mirror" in signed_in(carol).get("/approvals/pending/").content


def test_overview_counts_only_visible_streams_per_cluster(outsider, activity):
    page = signed_in(outsider).get("/").content.decode()
    assert re.search(r"<td>sanfrancisco</td><td>ONLINE</td><td>0</td>", page)


def test_pages_load_htmx_and_live_updates_from_local_static_files(owner):
    page = signed_in(owner).get("/").content.decode()
    scripts = re.findall(r'<script src="([^"]+)"', page)
    assert scripts == ["/static/vendor/htmx/htmx.min.js", "/static/js/live.js",
                       "/static/js/throughput.js"]


def test_overview_raises_alarms_for_down_gateways_and_failing_links(owner, pending,
                                                                    sanfrancisco):
    GatewayFactory(cluster=sanfrancisco, name="gw1",
                   last_heartbeat=timezone.now() - timedelta(minutes=5))
    ReplicaLink.objects.filter(pk=pending.pk).update(last_error="gateway gw9 refused the batch")
    page = signed_in(owner).get("/").content.decode()
    assert "Gateway gw1 of sanfrancisco is down" in page
    assert "streamgate gateway run -cluster sanfrancisco -name gw1" in page  # the fix
    assert "gateway gw9 refused the batch" in page


# -- lag history and the stream page's chart -----------------------------------------------

def test_recorder_samples_each_agreed_links_backlog(owner, agreed, activity, pending):
    produce(owner, activity, 5)  # no engine runs here: the 5 messages stay pending
    assert lag_history.lag_record(now_ms=1_000) == 1  # the pending (unagreed) link is not
    assert lag_history.lag_record(now_ms=6_000) == 1
    points = lag_history.lag_history([agreed.pk, pending.pk])
    # The pending bytes are the store's logical bytes: the values' 10 on a row store, the
    # batch's records section on a batch store.
    held = sum(p.bytes for p in store_for(activity.cluster).partition_stats(activity.uuid,
                                                                             "clicks"))
    assert held >= 10
    assert [p[:3] for p in points[agreed.pk]] == [[1_000, 5, held], [6_000, 5, held]]
    assert points[agreed.pk][-1][3] >= 0 and points[pending.pk] == []
    assert lag_history.lag_latest([agreed.pk, pending.pk]) == {agreed.pk: points[agreed.pk][-1]}


def test_recorder_keeps_a_capped_ring(owner, agreed, monkeypatch):
    monkeypatch.setattr(lag_history, "MAX_POINTS", 3)
    for t in range(1, 6):
        lag_history.lag_record(now_ms=t * 1000)
    assert [p[0] for p in lag_history.lag_history([agreed.pk])[agreed.pk]] == [3000, 4000, 5000]


def _redis_cache(settings) -> None:  # type: ignore[no-untyped-def]
    """This test's own keys in the shared Redis (the module's tests use a private locmem)."""
    settings.CACHES = {"default": {"BACKEND": "portal.cache.ReusingRedisCache",
                                   "LOCATION": [settings.REDIS_URL],
                                   "KEY_PREFIX": f"lagtest-{uuid.uuid4().hex}"}}


def test_recorder_appends_to_rings_in_redis_and_replaces_an_older_versions_ring(
        owner, agreed, settings):
    _redis_cache(settings)
    # On Redis a ring is a list of 40-byte samples that a pass appends to and trims in one
    # script call, reading nothing back (issue 33: 500 rings read and written whole every 5 s
    # were the deployment's largest idle cost). A ring an earlier version left (a pickled
    # value under the same key) is replaced, not an error.
    cache.set(lag_history.rings().key(agreed.pk), [[1_000, 0, 0, 0, 0]])
    lag_history.lag_record(now_ms=2_000)
    lag_history.lag_record(now_ms=3_000)
    client = cache._cache.get_client(write=True)
    key = cache.make_and_validate_key(lag_history.rings().key(agreed.pk))
    assert client.type(key) == b"list" and client.llen(key) == 2
    assert client.ttl(key) > lag_history.KEEP_SECONDS
    assert [p[0] for p in lag_history.lag_history([agreed.pk])[agreed.pk]] == [2_000, 3_000]
    assert lag_history.lag_latest([agreed.pk])[agreed.pk][0] == 3_000


@pytest.mark.parametrize("cache_backend", ["redis", "locmem"])
def test_rings_keep_the_newest_samples_on_either_cache(owner, agreed, settings, monkeypatch,
                                                       cache_backend):
    if cache_backend == "redis":  # else the module's locmem, as the embedded default's
        _redis_cache(settings)
    monkeypatch.setattr(lag_history, "MAX_POINTS", 3)
    lag_history.rings().fill({agreed.pk: [[t, t, 0, 0, 0] for t in range(1, 6)]})
    assert [p[0] for p in lag_history.lag_history([agreed.pk])[agreed.pk]] == [1, 2, 3, 4, 5]
    for t in range(6, 9):
        lag_history.lag_record(now_ms=t)
    assert [p[0] for p in lag_history.lag_history([agreed.pk])[agreed.pk]] == [6, 7, 8]
    assert lag_history.lag_latest([agreed.pk])[agreed.pk][0] == 8
    many = [agreed.pk, *range(10**6, 10**6 + lag_history.MANY_LINKS)]  # past MANY_LINKS
    assert lag_history.lag_latest(many) == {agreed.pk: lag_history.lag_latest([agreed.pk])[
        agreed.pk]}


def test_paused_links_are_sampled_so_the_backlog_shows(owner, agreed, activity, activity_ny):
    signed_in(owner).post(f"/streams/{activity.pk}/replicas/{agreed.pk}/pause/")
    produce(owner, activity, 3)
    lag_history.lag_record()
    assert lag_history.lag_latest([agreed.pk])[agreed.pk][1] == 3


def test_record_lag_task_runs_from_the_beat_schedule(owner, agreed, activity):
    from workers.celery import app

    entry = next(e for e in app.conf.beat_schedule.values()
                 if e["task"] == "workers.tasks.record_lag_task")
    assert float(entry["schedule"]) <= 10
    app.loader.import_default_modules()
    produce(owner, activity, 2)
    assert app.tasks[entry["task"]].apply().get() == 1
    assert lag_history.lag_latest([agreed.pk])[agreed.pk][1] == 2


def test_stream_lag_json_serves_the_history_per_replica(owner, agreed, activity):
    produce(owner, activity, 4)
    lag_history.lag_record(now_ms=42_000)
    data = signed_in(owner).get(f"/streams/{activity.pk}/lag/").json()
    assert data["fields"] == ["t", "messages_pending", "bytes_pending", "time_lag_ms", "stalled"]
    (link,) = data["links"]
    assert link["link"] == agreed.pk and link["replica"] == "/mapr/newyork/activity"
    assert link["points"][0][:2] == [42_000, 4]


def test_stream_page_shows_the_last_sampled_lag_and_the_chart(owner, agreed, activity):
    produce(owner, activity, 7)
    lag_history.lag_record()
    page = signed_in(owner).get(f"/streams/{activity.pk}/").content.decode()
    row = re.search(rf'data-lag-link="{agreed.pk}".*?</tr>', page, re.S).group(0)
    assert '<td data-label="Messages pending" data-field="messages_pending">7</td>' in row
    assert ">Pending<" in row and "7 msgs" in row  # the health pill, its figures
    assert 'id="lag-charts"' in page and f'data-lag-url="/streams/{activity.pk}/lag/"' in page
    assert "/static/js/lagchart.js" in page
    from django.urls import reverse  # the row's buttons post to the action views

    pause, remove = (reverse("replica-action", args=[activity.pk, agreed.pk, action])
                     for action in ("pause", "remove"))
    assert f'formaction="{pause}"' in row
    assert f'href="{remove}"' in row  # removing asks first
    fragment = signed_in(owner).get(f"/streams/{activity.pk}/replicas/").content.decode()
    assert fragment.count('name="csrfmiddlewaretoken"') == 1  # one form for all the buttons


def test_stream_page_query_count_does_not_grow_with_replicas(owner, activity, newyork):
    count = partial(query_count, signed_in(owner), f"/streams/{activity.pk}/")
    for i in range(2):
        replica_add(actor=owner, source=activity, replica=StreamFactory(
            cluster=newyork, name=f"r{i}", created_by=owner))
    few = count()
    for i in range(2, 12):
        replica_add(actor=owner, source=activity, replica=StreamFactory(
            cluster=newyork, name=f"r{i}", created_by=owner))
    assert count() == few


# -- overview: gateways and health at a glance ---------------------------------------------

@pytest.mark.parametrize("user", ["owner", "operator"])
def test_overview_shows_gateway_status_heartbeat_and_to_operators_throughput(user, newyork,
                                                                             request):
    """A gateway applies every tenant's batches: its rate is for operators; a tenant's user
    sees its health."""
    gw = GatewayFactory(cluster=newyork, name="gw1", last_heartbeat=timezone.now(),
                        messages_applied=100)
    GatewayFactory(cluster=newyork, name="gw2",
                   last_heartbeat=timezone.now() - timedelta(minutes=3))
    lag_history.gateways_record(now=1_000.0)
    type(gw).objects.filter(pk=gw.pk).update(messages_applied=600)
    lag_history.gateways_record(now=1_010.0)
    page = signed_in(request.getfixturevalue(user)).get("/").content.decode()
    gw1 = re.search(r'data-gateway="gw1@newyork".*?</tr>', page, re.S).group(0)
    gw2 = re.search(r'data-gateway="gw2@newyork".*?</tr>', page, re.S).group(0)
    assert ">Up<" in gw1 and "just now</time>" in gw1
    assert ">Down<" in gw2 and "3 min ago" in gw2
    assert ("50.0 msg/s" in gw1) == (user == "operator")
    assert ("<th>Throughput</th>" in page) == (user == "operator")


def _health_of(page: str, path: str) -> str:
    row = re.search(rf'data-stream="{re.escape(path)}".*?</tr>', page, re.S).group(0)
    return re.search(r'class="pill health[^"]*">([^<]+)<', row).group(1)


def test_overview_shows_replication_health_per_stream(owner, carol, agreed, activity,
                                                      activity_ny, newyork, settings):
    broken_src = StreamFactory(cluster=newyork, name="b1", created_by=owner)
    broken_dst = StreamFactory(cluster=newyork, name="b2", created_by=owner)
    broken = replica_add(actor=owner, source=broken_src, replica=broken_dst)
    upstream_add(actor=owner, replica=broken_dst, source=broken_src)
    ReplicaLink.objects.filter(pk=broken.pk).update(last_error="gateway gw1 refused")
    waiting_src = StreamFactory(cluster=newyork, name="w1", created_by=owner)
    replica_add(actor=owner, source=waiting_src,
                replica=StreamFactory(cluster=newyork, name="w2", created_by=carol))
    alone = StreamFactory(cluster=newyork, name="alone", created_by=owner)
    client = signed_in(owner)
    lag_history.lag_record()
    page = client.get("/").content.decode()
    assert _health_of(page, activity.path) == "In sync"
    assert _health_of(page, broken_src.path) == "Broken"
    assert _health_of(page, waiting_src.path) == "Waiting for approval"
    assert "Not replicated" in re.search(rf'data-stream="{alone.path}".*?</tr>', page,
                                         re.S).group(0)
    produce(owner, activity, 3)
    lag_history.lag_record()
    assert _health_of(client.get("/").content.decode(), activity.path) == "Pending"
    settings.REPLICATION_STALL_SECONDS = 0  # pending and no progress since: stalled
    ReplicaLink.objects.filter(pk=agreed.pk).update(
        last_progress=timezone.now() - timedelta(seconds=5))
    lag_history.lag_record()
    assert _health_of(client.get("/").content.decode(), activity.path) == "Stalled"
    assert _health_of(client.get("/overview/live/").content.decode(), activity.path) == "Stalled"


def test_overview_query_count_does_not_grow_with_streams_or_links(owner, newyork, agreed):
    count = partial(query_count, signed_in(owner), "/")
    few = count()
    linked_pairs(owner, newyork, 10)
    for i in range(10):
        GatewayFactory(cluster=newyork, name=f"gw{i}")
    lag_history.lag_record()
    assert count() == few


def test_overview_lists_streams_that_need_attention_first_a_page_at_a_time(
        owner, agreed, activity, newyork, monkeypatch):
    from portal.web import views

    monkeypatch.setattr(views, "STREAMS_PER_PAGE", 2)
    for name in ("a1", "a2", "a3"):
        StreamFactory(cluster=newyork, name=name, created_by=owner)
    produce(owner, activity, 3)
    lag_history.lag_record()
    client = signed_in(owner)
    page = client.get("/").content.decode()
    # both ends of the pending link first (by path), though "a..." sorts before them
    assert re.findall(r'data-stream="([^"]+)"', page) == ["/mapr/newyork/activity",
                                                           activity.path]
    assert "5 streams" in page and "<strong>3</strong> Not replicated" in page
    assert "<strong>2</strong> Pending" in page and "page 1 of 3" in page
    page = client.get("/", {"page": 2}).content.decode()
    assert re.findall(r'data-stream="([^"]+)"', page) == ["/mapr/newyork/a1", "/mapr/newyork/a2"]
    assert 'data-live-url="/overview/live/?page=2"' in page


def test_overview_leaves_a_slot_for_the_alarms_section(owner):
    from django.template.loader import get_template

    source = get_template("web/overview.html").template.source
    assert '{% include "web/_alarms.html" %}' in source
    assert signed_in(owner).get("/").status_code == 200


# -- set-up wizard -------------------------------------------------------------------------

def step_url(source, replica, number: int) -> str:
    return f"/setup/manual/{source.pk}/{replica.pk}/{number}/"


def test_setup_index_offers_manual_and_autosetup(owner):
    page = signed_in(owner).get("/setup/").content.decode()
    assert 'href="/setup/manual/"' in page and 'href="/setup/auto/"' in page


def test_manual_wizard_walks_the_seed_steps_to_a_replicating_pair(owner, activity, newyork):
    activity.ttl = 3600
    activity.save()
    client = signed_in(owner)
    page = client.get("/setup/manual/").content.decode()
    assert "What this step does" in page and "-copymetafrom" in page
    response = client.post("/setup/manual/", {"source": activity.path,
                                              "replica": "/mapr/newyork/activity"})
    replica = Stream.objects.get(path="/mapr/newyork/activity")
    assert replica.ttl == 3600  # the source's metadata
    assert response.url == step_url(activity, replica, 2)

    page = client.get(step_url(activity, replica, 2)).content.decode()
    assert "replica add -path /mapr/sanfrancisco/activity -replica /mapr/newyork/activity " \
           "-paused true" in page
    assert client.post(step_url(activity, replica, 2)).url == step_url(activity, replica, 3)
    link = ReplicaLink.objects.get(source=activity, replica=replica)
    assert link.paused

    page = client.get(step_url(activity, replica, 3)).content.decode()
    assert "is registered as a replica" in page and "REPLICA_STATE_WAITING_FOR_UPSTREAM" in page
    assert client.post(step_url(activity, replica, 4)).url == step_url(activity, replica, 5)
    assert Upstream.objects.filter(source=activity, replica=replica).exists()
    page = client.get(step_url(activity, replica, 5)).content.decode()
    assert "is an upstream of" in page

    # Paused: MapR's replicaState says REPLICATING, but its pill is not the green of a moving
    # replica.
    assert ('<span class="pill replica-state paused">REPLICA_STATE_REPLICATING</span> (paused)'
            in page)
    page = client.get(step_url(activity, replica, 6)).content.decode()
    assert "copystream" in page and 'name="skip"' in page
    assert client.post(step_url(activity, replica, 6), {"skip": "1"}).url == step_url(
        activity, replica, 7)
    assert client.post(step_url(activity, replica, 7)).url == step_url(activity, replica, 8)
    link.refresh_from_db()
    assert not link.paused
    page = client.get(step_url(activity, replica, 8)).content.decode()
    assert '<span class="pill replica-state up">REPLICA_STATE_REPLICATING</span>' in page
    assert "Done" in page


def test_manual_wizard_copy_step_starts_a_copystream_job(owner, activity, activity_ny):
    from replication.models import Job

    replica_add(actor=owner, source=activity, replica=activity_ny, paused=True)
    upstream_add(actor=owner, replica=activity_ny, source=activity)
    client = signed_in(owner)
    response = client.post(step_url(activity, activity_ny, 6), {"copy": "1"})
    job = Job.objects.get()
    assert (job.kind, job.source_path, job.destination_path) == (
        "copystream", activity.path, activity_ny.path)
    assert response.url == f"{step_url(activity, activity_ny, 6)}?job={job.pk}"
    page = client.get(response.url).content.decode()
    assert f'data-job="{job.pk}"' in page and "QUEUED" in page
    fragment = client.get(response.url + "&fragment=1").content.decode()
    assert fragment.startswith('<div id="copy-job"')


def test_manual_wizard_shows_the_services_refusal(member, owner, activity, activity_ny):
    client = signed_in(member)
    response = client.post("/setup/manual/", {"source": activity.path,
                                              "replica": "/mapr/newyork/copy"})
    assert response.status_code == 400
    assert any("may not copy metadata" in m for m in messages_of(response))
    response = client.post(step_url(activity, activity_ny, 2))
    assert any("may not add a replica" in m for m in messages_of(response))
    assert not ReplicaLink.objects.exists()


def test_autosetup_creates_the_pair_and_follows_the_copy(owner, activity, newyork):
    from replication.models import Job

    client = signed_in(owner)
    assert "autosetup" in client.get("/setup/auto/").content.decode()
    response = client.post("/setup/auto/", {"source": activity.path,
                                            "replica": "/mapr/newyork/activity"})
    assert response.status_code == 302, messages_of(response)
    link = ReplicaLink.objects.get(source=activity, replica__path="/mapr/newyork/activity")
    assert response.url == f"/setup/auto/{link.pk}/"
    job = Job.objects.get(link=link)
    page = client.get(response.url).content.decode()
    assert f'data-job="{job.pk}"' in page and "REPLICA_STATE_COPY_IN_PROGRESS" in page
    assert b"autosetup-status" in client.get(f"/setup/auto/{link.pk}/status/").content


def test_autosetup_multimaster_links_both_ways(owner, activity, newyork):
    signed_in(owner).post("/setup/auto/", {"source": activity.path,
                                           "replica": "/mapr/newyork/activity",
                                           "multimaster": "on"})
    assert ReplicaLink.objects.filter(source__path="/mapr/newyork/activity",
                                      replica=activity).exists()


def test_autosetup_refusal_shows_the_reason_and_creates_nothing(member, activity, newyork):
    response = signed_in(member).post("/setup/auto/", {"source": activity.path,
                                                       "replica": "/mapr/newyork/activity"})
    assert response.status_code == 400
    assert any("may not set up replicas" in m for m in messages_of(response))
    assert not Stream.objects.filter(path="/mapr/newyork/activity").exists()


# -- jobs ----------------------------------------------------------------------------------

def make_job(stream, **values):
    from replication.models import Job

    return Job.objects.create(**{
        "kind": "copystream", "tenant": stream.tenant, "source": stream,
        "source_path": stream.path, "destination_path": "/mapr/newyork/copy", **values})


def test_jobs_page_lists_the_tenants_jobs_with_progress(owner, activity):
    make_job(activity, state="RUNNING", messages_total=200, messages_done=50,
             bytes_total=2048, bytes_done=512, started=timezone.now())
    make_job(activity, kind="diffstreams", state="FAILED", error="the source went away")
    page = signed_in(owner).get("/jobs/").content.decode()
    assert 'value="25"' in page and "50 / 200 messages" in page and "RUNNING" in page
    assert "the source went away" in page and "diffstreams" in page
    assert 'id="start-job"' in page


def test_job_detail_shows_the_first_differing_offset_per_partition(owner, activity):
    job = make_job(activity, kind="diffstreams", state="SUCCEEDED", result={
        "compared": 20, "equal": False, "differing": 1, "partitions": [
            {"topic": "clicks", "partition": 0, "compared": 10, "firstDifference": None},
            {"topic": "clicks", "partition": 1, "compared": 10, "firstDifference": 7}]})
    page = signed_in(owner).get(f"/jobs/{job.pk}/").content.decode()
    table = re.search(r'id="job-partitions".*?</table>', page, re.S).group(0)
    assert "firstDifference" in table
    assert re.search(r"<td>clicks</td><td>1</td><td>7</td><td>10</td>", table)
    assert "100%" in page


def test_start_copystream_and_diffstreams_with_repair_from_the_form(owner, activity,
                                                                     activity_ny):
    from replication.models import Job

    client = signed_in(owner)
    response = client.post("/jobs/start/", {"kind": "copystream", "source": activity.path,
                                            "destination": activity_ny.path})
    job = Job.objects.get(kind="copystream")
    assert response.url == f"/jobs/{job.pk}/" and job.requested_by == owner
    client.post("/jobs/start/", {"kind": "diffstreams", "source": activity.path,
                                 "destination": activity_ny.path, "repair": "on"})
    assert Job.objects.get(kind="diffstreams").options == {"repair": True}


def test_member_without_permission_cannot_start_a_job(member, activity, activity_ny):
    from replication.models import Job

    response = signed_in(member).post("/jobs/start/", {
        "kind": "copystream", "source": activity.path, "destination": activity_ny.path})
    page = response.content.decode()
    assert response.status_code == 400 and "may not" in page
    assert f'name="source" value="{activity.path}"' in page  # what was typed, kept
    assert not Job.objects.exists()


# -- tenant isolation and CSRF of the new pages --------------------------------------------

def _new_object_urls(source, replica, link, job) -> tuple[list[str], list[str]]:
    gets = [f"/streams/{source.pk}/lag/", *(step_url(source, replica, n) for n in range(2, 9)),
            f"{step_url(source, replica, 6)}?job={job.pk}", f"/setup/auto/{link.pk}/",
            f"/setup/auto/{link.pk}/status/", f"/jobs/{job.pk}/", f"/jobs/{job.pk}/status/"]
    posts = [step_url(source, replica, n) for n in (2, 4, 6, 7)]
    return gets, posts


def test_outsider_gets_404_on_every_new_object_url(outsider, owner, agreed, activity,
                                                   activity_ny):
    job = make_job(activity, state="RUNNING")
    client = signed_in(outsider)
    gets, posts = _new_object_urls(activity, activity_ny, agreed, job)
    for url in gets:
        assert client.get(url).status_code == 404, url
    for url in posts:
        assert client.post(url, {"copy": "1"}).status_code == 404, url
    page = client.get("/jobs/").content.decode()
    assert activity.path not in page and "No jobs yet" in page
    assert not ReplicaLink.objects.filter(paused=True).exists()


def test_every_new_form_enforces_csrf(owner, agreed, activity, activity_ny):
    job = make_job(activity)
    client = signed_in(owner, csrf=True)
    _gets, posts = _new_object_urls(activity, activity_ny, agreed, job)
    for url in [*posts, "/setup/manual/", "/setup/auto/", "/jobs/start/"]:
        assert client.post(url, {}).status_code == 403, url


def test_new_pages_require_sign_in(client, owner, agreed, activity, activity_ny):
    job = make_job(activity)
    gets, posts = _new_object_urls(activity, activity_ny, agreed, job)
    for url in [*gets, "/setup/", "/setup/manual/", "/setup/auto/", "/jobs/", "/jobs/table/",
                "/overview/live/"]:
        assert client.get(url).status_code == 302, url
    for url in [*posts, "/jobs/start/"]:
        assert client.post(url).status_code == 302, url


def test_job_detail_shows_a_copy_result_of_counts(owner, activity):
    job = make_job(activity, state="SUCCEEDED", result={"messages": 500, "partitions": 2})
    page = signed_in(owner).get(f"/jobs/{job.pk}/status/").content.decode()
    assert "<th>messages</th><td>500</td>" in page and "job-partitions" not in page


def test_a_page_not_found_says_where_to_go_in_the_portals_frame(owner, client):
    page = signed_in(owner).get("/streams/999999/")
    assert page.status_code == 404
    body = page.content.decode()
    assert "<h1>Not found</h1>" in body and "<code>/streams/999999/</code>" in body
    assert 'href="/streams/"' in body and 'id="who"' in body  # the nav, signed in
    signed_out = client.get("/no/such/page/")
    assert signed_out.status_code == 404
    assert 'href="/login/?next=/no/such/page/"' in signed_out.content.decode()


def test_a_replica_action_returns_to_the_page_it_was_taken_on_and_nowhere_else(owner, activity,
                                                                            mirror):
    client = signed_in(owner)
    link = replica_add(actor=owner, source=activity, replica=mirror)
    base = f"/streams/{activity.pk}/replicas/{link.pk}"
    assert client.post(f"{base}/pause/?next=/").url == "/"  # the overview's to-do list
    assert client.post(f"{base}/resume/?next=https://evil.example/").url == \
        f"/streams/{activity.pk}/"
    messages = messages_of(client.get("/"))
    assert "/mapr/newyork/mirror: replica paused" in messages


def test_stream_lag_json_cuts_an_hour_to_the_charts_resolution_keeping_peaks_and_stalls(
        owner, agreed, activity):
    """Issue 34: 720 samples become 242 points (3 samples each between the first and the
    last, which stay as they are); a one-sample peak and a one-sample stall still show."""
    ring = [[1_000 + t * 5_000, 10, 100, 2_000, 0] for t in range(lag_history.MAX_POINTS)]
    ring[300][1], ring[300][3] = 999, 88_000  # a peak of one sample
    ring[500][4] = 1  # a stall of one sample
    ring[-1] = [ring[-1][0], 7, 70, 1_500, 0]  # the latest, lower than the rest
    lag_history.rings().fill({agreed.pk: ring})
    data = signed_in(owner).get(f"/streams/{activity.pk}/lag/").json()
    (link,) = data["links"]
    points = link["points"]
    assert len(points) == 242 and link["merged"] == 3
    assert points[0] == ring[0] and points[-1] == ring[-1]
    assert [p[0] for p in points] == sorted({p[0] for p in points})  # in time order
    assert max(p[1] for p in points) == 999 and max(p[3] for p in points) == 88_000
    assert sum(p[4] for p in points) == 1
    assert all(len(p) == 5 for p in points)


def test_stream_lag_json_keeps_a_short_history_as_recorded(owner, agreed, activity):
    ring = [[t * 5_000, t, t * 10, t * 100, t % 2] for t in range(50)]
    lag_history.rings().fill({agreed.pk: ring})
    (link,) = signed_in(owner).get(f"/streams/{activity.pk}/lag/").json()["links"]
    assert link["points"] == ring and link["merged"] == 1


def test_reading_the_lag_history_pauses_garbage_collection_and_restores_it():
    import gc

    assert gc.isenabled()
    with lag_history.gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValueError), lag_history.gc_paused():
        raise ValueError("a failed read")
    assert gc.isenabled()
