"""Pages read as people read them: no Python reprs, sizes and durations in units, times
relative with the exact time on hover, human health labels first with MapR's state names as
secondary text; and the overview answers "is anything wrong, and what do I do" first."""

import re
from datetime import timedelta

import pytest
from django.template import Context, Template
from django.utils import timezone

from replication import lag_history
from replication.models import ReplicaLink, Stream, SyncMode
from replication.services import replica_add, replica_pause
from tests.clients import signed_in
from tests.factories import GatewayFactory, StreamFactory
from tests.portal.test_web import make_job, produce

pytestmark = pytest.mark.usefixtures("private_cache")


def render(text: str, **context) -> str:
    return Template("{% load human %}" + text).render(Context(context))


@pytest.mark.parametrize(("value", "shown"), [
    (0, "0 bytes"), (1, "1 byte"), (1023, "1023 bytes"), (1536, "1.5 KB"),
    (5 * 1024 * 1024, "5.0 MB"), (3 * 1024 ** 3, "3.0 GB"), (None, "—"),
])
def test_sizes_read_in_bytes_kb_mb(value, shown):
    assert render("{{ v|size }}", v=value) == shown


@pytest.mark.parametrize(("ms", "shown"), [
    (51, "51 ms"), (2500, "2.5 s"), (42_000, "42 s"), (180_000, "3 min"),
    (7_200_000, "2 h"), (5_400_000, "1.5 h"), (3 * 86_400_000, "3 d"),
])
def test_durations_read_in_units(ms, shown):
    assert render("{{ v|duration_ms }}", v=ms) == shown


def test_booleans_and_option_dicts_read_as_words_not_python():
    assert render("{{ v|yes_no }}", v=True) == "yes"
    assert render("{{ v|yes_no }}", v=False) == "no"
    text = render("{% for k, v in o|pairs %}{{ k }}: {{ v }};{% endfor %}",
                  o={"repair": False, "num_threads": 4, "topics": ["a", "b"], "x": None})
    assert text == "repair: no;num threads: 4;topics: a, b;x: —;"


def test_times_read_relative_with_the_exact_time_on_hover(db):
    at = timezone.now() - timedelta(minutes=3, seconds=5)
    html = render("{{ t|when }}", t=at)
    assert ">3 min ago</time>" in html
    assert f'title="{at:%Y-%m-%d %H:%M:%S} UTC"' in html and f'datetime="{at.isoformat()}"' in html
    assert "never" in render('{{ t|when:"never" }}', t=None)


def test_job_page_shows_options_as_words_not_a_python_dict(owner, activity):
    job = make_job(activity, options={"repair": False, "num_threads": 4})
    page = signed_in(owner).get(f"/jobs/{job.pk}/").content.decode()
    options = re.search(r'id="job-options">(.*?)</td>', page, re.S).group(1)
    assert "repair: <strong>no</strong>" in options and "num threads: <strong>4</strong>" in options
    assert "{" not in options and "False" not in page and "True" not in page


def test_stream_page_shows_sizes_durations_and_yes_no(owner, agreed, activity):
    produce(owner, activity, 7)
    lag_history.lag_record()
    settings = signed_in(owner).get(f"/streams/{activity.pk}/settings/").content.decode()
    info = re.search(r'id="stream-info">(.*?)</table>', settings, re.S).group(1)
    assert "Messages kept for" in info and "7 d" in info  # ttl 604800 s
    assert re.search(r"Topics created on use.*?<td>(yes|no)</td>", info, re.S)
    page = signed_in(owner).get(f"/streams/{activity.pk}/").content.decode()
    assert "True" not in page + settings and "False" not in page + settings
    row = re.search(rf'data-lag-link="{agreed.pk}".*?</tr>', page, re.S).group(0)
    assert re.search(r'data-field="bytes_pending">\d+ bytes<', row)
    assert re.search(r'data-field="time_lag_ms">[\d.]+ (ms|s)<', row)
    assert '<td data-label="Paused" class="paused">no</td>' in row


def test_health_label_comes_first_with_figures_and_the_mapr_state_second(owner, agreed,
                                                                        activity):
    produce(owner, activity, 2)
    lag_history.lag_record()
    page = signed_in(owner).get(f"/streams/{activity.pk}/").content.decode()
    row = re.search(rf'data-lag-link="{agreed.pk}".*?</tr>', page, re.S).group(0)
    cell = re.search(r'class="health-cell">(.*?)</td>', row, re.S).group(1)
    assert cell.index(">Pending<") < cell.index("REPLICA_STATE_REPLICATING")
    assert re.search(r'data-field="lag_text">2 msgs / [\d.]+ (ms|s)<', cell)
    assert 'class="mapr replica-state"' in cell


def test_paused_and_synchronous_links_read_as_such(owner, agreed, activity, activity_ny):
    lag_history.lag_record()
    client = signed_in(owner)
    ReplicaLink.objects.filter(pk=agreed.pk).update(synchronous=True, mode=SyncMode.SYNC)
    assert ">Synchronous<" in client.get(f"/streams/{activity.pk}/").content.decode()
    ReplicaLink.objects.filter(pk=agreed.pk).update(mode=SyncMode.ASYNC,
                                                    mode_reason="no live gateway")
    page = client.get(f"/streams/{activity.pk}/").content.decode()
    assert ">Fell back to asynchronous<" in page and "no live gateway" in page
    replica_pause(actor=owner, source=activity, replica=activity_ny)
    assert ">Paused<" in client.get(f"/streams/{activity.pk}/").content.decode()


def test_replica_buttons_sit_in_a_wrapping_group_inside_a_scrolling_table(owner, agreed,
                                                                         activity):
    page = signed_in(owner).get(f"/streams/{activity.pk}/").content.decode()
    assert re.search(r'<div class="table-wrap">\s*<table id="replicas"', page)
    assert re.search(r'<td class="actions"><div class="buttons">.*?Pause.*?Remove', page, re.S)


# -- the overview: counts, then what to do -------------------------------------------------

def _todo(page: str) -> list[str]:
    return re.findall(r'<li class="todo-item" data-kind="([a-z]+)"', page)


def test_overview_starts_with_counts_then_the_todo_then_the_rest(owner, agreed):
    lag_history.lag_record()
    page = signed_in(owner).get("/").content.decode()
    order = [page.index(marker) for marker in
             ('id="health-counts"', 'id="todo"', 'id="engine-alarms"', '<h2 id="replication-title"',
              'id="gateways"', 'id="streams"')]
    assert order == sorted(order)
    assert re.search(r'data-health="insync"><strong>1</strong> In sync', page)
    assert 'id="all-well"' in page and _todo(page) == []


def test_overview_todo_gives_each_problem_its_fix(owner, carol, agreed, activity, activity_ny,
                                                 newyork, sanfrancisco):
    GatewayFactory(cluster=newyork, name="gw1",
                   last_heartbeat=timezone.now() - timedelta(minutes=5))
    replica_pause(actor=owner, source=activity, replica=activity_ny)
    waiting = replica_add(actor=owner, source=StreamFactory(cluster=sanfrancisco, name="w1",
                                                             created_by=owner),
                          replica=StreamFactory(cluster=newyork, name="w2", created_by=carol))
    lag_history.lag_record()
    page = signed_in(owner).get("/").content.decode()
    assert _todo(page) == ["broken", "waiting", "paused"]
    assert "streamgate gateway run -cluster newyork -name gw1" in page
    assert f'href="/approvals/{waiting.pk}/">Review the approval<' in page
    resume = f"/streams/{activity.pk}/replicas/{agreed.pk}/resume/"
    # Back to the overview afterwards (a local next=), not the stream's page.
    assert f'<button form="todo-actions" formaction="{resume}?next=/">Resume</button>' in page
    assert page.count('name="csrfmiddlewaretoken"') >= 1
    assert "gateways down" not in page and "<strong>1</strong> gateway down" in page


def test_overview_todo_of_another_tenant_is_empty(outsider, agreed, activity, activity_ny,
                                                  owner):
    replica_pause(actor=owner, source=activity, replica=activity_ny)
    page = signed_in(outsider).get("/").content.decode()
    assert _todo(page) == [] and activity.path not in page


def test_overview_live_fetch_brings_the_counts_and_todo_out_of_band(owner, agreed, activity,
                                                                    activity_ny):
    replica_pause(actor=owner, source=activity, replica=activity_ny)
    fragment = signed_in(owner).get("/overview/replication/").content.decode()
    assert fragment.lstrip().startswith('<div id="overview-links"')
    assert '<div id="overview-status" hx-swap-oob="true">' in fragment
    assert _todo(fragment) == ["paused"]


# -- forms: the error beside its field, what was typed kept ---------------------------------

def _error_beside(page: str, name: str) -> str:
    field = re.search(rf'<input name="{name}"[^>]*>\s*<span class="field-error" id="err-{name}" '
                      r'role="alert">(.+?)</span>', page)
    assert field, f"no error beside {name}"
    assert f'aria-describedby="err-{name}"' in field.group(0)
    return field.group(1)


def test_replica_form_shows_an_unknown_path_beside_the_field_and_keeps_it(owner, activity):
    response = signed_in(owner).post(f"/streams/{activity.pk}/replicas/add/",
                                     {"replica": "/mapr/newyork/nowhere", "paused": "on"})
    assert response.status_code == 400
    page = response.content.decode()
    assert "/mapr/newyork/nowhere does not exist" in _error_beside(page, "replica")
    assert 'value="/mapr/newyork/nowhere"' in page and 'name="paused" checked' in page
    assert not ReplicaLink.objects.exists()


def test_job_form_shows_a_bad_destination_beside_the_field_and_keeps_the_input(owner,
                                                                             activity):
    response = signed_in(owner).post("/jobs/start/", {
        "kind": "diffstreams", "source": activity.path, "destination": "nowhere",
        "repair": "on"})
    assert response.status_code == 400
    page = response.content.decode()
    assert "write it as /mapr/" in _error_beside(page, "destination")
    assert f'name="source" value="{activity.path}"' in page
    assert 'value="nowhere"' in page and 'name="repair" checked' in page


def test_stream_form_shows_a_taken_path_beside_the_field(owner, activity):
    response = signed_in(owner).post("/streams/", {"path": activity.path})
    assert response.status_code == 400
    assert "already exists" in _error_beside(response.content.decode(), "path")


def test_another_tenants_stream_form_posts_are_refused(outsider, activity):
    client = signed_in(outsider)
    response = client.post(f"/streams/{activity.pk}/replicas/add/", {"replica": activity.path})
    assert response.status_code == 404
    assert client.post(f"/streams/{activity.pk}/aces/", {"consumeperm": "p"}).status_code == 404


def test_wizards_show_a_refusal_beside_its_field_and_keep_what_was_typed(owner, activity,
                                                                         newyork):
    client = signed_in(owner)
    for url in ("/setup/manual/", "/setup/auto/"):
        response = client.post(url, {"source": activity.path, "replica": "newyork/copy",
                                     "synchronous": "on"})
        assert response.status_code == 400
        page = response.content.decode()
        assert "write it as /mapr/" in _error_beside(page, "replica"), url
        assert 'value="newyork/copy"' in page and f'value="{activity.path}"' in page
        response = client.post(url, {"source": "/mapr/sanfrancisco/nowhere",
                                     "replica": "/mapr/newyork/copy"})
        assert "does not exist" in _error_beside(response.content.decode(), "source"), url
    assert 'name="synchronous" checked' in client.post("/setup/auto/", {
        "source": activity.path, "replica": "x", "synchronous": "on"}).content.decode()
    assert not ReplicaLink.objects.exists()
    assert not Stream.objects.filter(path="/mapr/newyork/copy").exists()


def test_kafka_default_stream_form_shows_a_refusal_beside_its_field(owner, sanfrancisco):
    response = signed_in(owner).post("/kafka/default-stream/", {
        "cluster": "sanfrancisco", "path": "/mapr/newyork/kafka", "scope": "user"})
    assert response.status_code == 400
    page = response.content.decode()
    assert "/mapr/sanfrancisco/" in _error_beside(page, "path")
    assert 'value="/mapr/newyork/kafka"' in page and 'value="user" selected' in page
