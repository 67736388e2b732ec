"""Usage per day and stream: the daily rollup from the live counters into PostgreSQL (idempotent,
surviving a Redis restart), the usage page with the plan's bars, its CSV, and another
tenant's usage never shown."""

from __future__ import annotations

import csv
import datetime as dt
import io
import re

import pytest
from django.core.cache import cache
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from accounts.models import Plan
from operations.models import UsageDay
from operations.tasks import rollup_tenant_usage_task, rollup_usage_task
from operations.usage import COLUMNS, EPOCH_KEY, usage_keys, usage_rows, with_live
from replication.engine import Record
from replication.models import Stream
from replication.services.messages import messages_consume, messages_produce
from replication.stores import store_for
from tests.factories import StreamFactory, replicated_clicks
from workers.celery import app

pytestmark = pytest.mark.usefixtures("private_cache")  # counters of this test's own


@pytest.fixture
def traffic(owner, activity, activity_ny):
    """activity -> activity_ny: 2 messages a partition (4 of 1 byte) produced and replicated,
    then 2 consumed from partition 0 of the source."""
    replicated_clicks(owner, activity, activity_ny, per_partition=2)
    messages_consume(actor=owner, stream=activity, topic="clicks", partition=0)
    return owner.memberships.get().tenant


def _row(stream) -> dict:  # type: ignore[no-untyped-def]
    return UsageDay.objects.filter(stream_uuid=stream.uuid).values(*COLUMNS[2:]).get()


def _stored(stream) -> int:  # type: ignore[no-untyped-def]
    """The stream's logical bytes as its store counts them (a batch store counts the records
    sections, a record's framing included; produce counters count values and keys)."""
    return sum(p.bytes for p in store_for(stream.cluster).partition_stats(stream.uuid, "clicks"))


def test_the_rollup_counts_produced_consumed_replicated_and_stored_once_when_run_twice(
        traffic, activity, activity_ny):
    assert rollup_tenant_usage_task(traffic.pk) == 2
    first = (_row(activity), _row(activity_ny))
    assert rollup_tenant_usage_task(traffic.pk) == 2
    assert (_row(activity), _row(activity_ny)) == first
    assert first[0] == {"produced_messages": 4, "produced_bytes": 4, "consumed_messages": 2,
                        "consumed_bytes": 2, "replicated_messages": 0, "replicated_bytes": 0,
                        "stored_bytes": _stored(activity)}
    assert first[1]["replicated_messages"] == 4
    assert first[1]["replicated_bytes"] == first[1]["stored_bytes"] == _stored(activity_ny) >= 4
    assert UsageDay.objects.filter(day=timezone.now().date()).count() == 2


def test_a_rollup_costs_the_same_statements_for_any_number_of_streams_and_writes_no_idle_row(
        traffic, owner, activity):
    """Issue 33's idle cost: a tenant of 1,500 streams cost 3,000 updates every 5 minutes."""
    def rollup_statements() -> list[str]:
        with CaptureQueriesContext(connection) as done:
            rollup_tenant_usage_task(traffic.pk)
        return [q["sql"].split()[0] for q in done.captured_queries]

    rollup_statements()
    few = rollup_statements()
    StreamFactory.create_batch(10, cluster=activity.cluster, tenant=traffic, created_by=owner)
    assert rollup_statements().count("INSERT") == 2  # the new streams' marks, then their rows
    assert rollup_statements() == few  # idle: nothing grew, nothing moved
    assert "UPDATE" not in few  # the marks' and rows' inserts that update on conflict aside
    messages_produce(actor=owner, stream=activity, topic="clicks", records=[Record(b"x")])
    rollup_tenant_usage_task(traffic.pk)
    assert _row(activity)["produced_messages"] == 5


@pytest.fixture
def eager():
    """Tasks run where they are sent, as in embedded mode (no worker in this test)."""
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = False


def test_the_beat_entry_rolls_up_every_tenant_with_streams(traffic, outsider, activity, eager):
    assert rollup_usage_task() == 1  # one tenant with streams: acme (globex has none)
    assert _row(activity)["produced_messages"] == 4
    assert "rollup-usage" in app.conf.beat_schedule


def test_counts_after_a_rollup_are_added_and_a_redis_restart_loses_no_history(
        traffic, owner, activity):
    rollup_tenant_usage_task(traffic.pk)
    messages_produce(actor=owner, stream=activity, topic="clicks", records=[Record(b"abc")])
    rollup_tenant_usage_task(traffic.pk)
    assert _row(activity)["produced_messages"] == 5
    cache.clear()  # Redis restarted: its counters and the rollup's epoch are gone
    messages_produce(actor=owner, stream=activity, topic="clicks", records=[Record(b"de")])
    rollup_tenant_usage_task(traffic.pk)
    assert (_row(activity)["produced_messages"], _row(activity)["produced_bytes"]) == (6, 9)
    assert cache.get(EPOCH_KEY) is not None


def _client(user):  # type: ignore[no-untyped-def]
    client = Client()
    client.force_login(user)
    return client


def test_the_usage_page_shows_todays_live_rows_and_the_plans_bars(traffic, owner, activity):
    traffic.plan = Plan.objects.create(name="free", max_streams=4, max_partitions=8)
    traffic.save()
    page = _client(owner).get("/usage/").content.decode()
    assert "Plan: free" in page
    assert '<meter min="0" max="4" high="4" value="2"' in page  # 2 of 4 streams
    assert "4 of 8 (50%)" in page  # 2 partitions on the source, 2 on its replica
    assert f'data-path="{activity.path}"' in page
    assert 'data-field="produced_messages">4<' in page  # live: nothing rolled up yet
    assert 'href="/usage/"' in page  # in the navigation


def test_the_csv_has_the_pages_rows_rollup_and_live_growth_added(traffic, owner, activity,
                                                                 activity_ny):
    rollup_tenant_usage_task(traffic.pk)
    yesterday = timezone.now().date() - dt.timedelta(days=1)
    UsageDay.objects.create(day=yesterday, tenant=traffic, stream_uuid=activity.uuid,
                            path=activity.path, produced_messages=7, stored_bytes=70)
    messages_produce(actor=owner, stream=activity, topic="clicks", records=[Record(b"x")])
    response = _client(owner).get("/usage.csv?days=7")
    assert response["Content-Type"].startswith("text/csv")
    assert 'filename="usage-acme-7d.csv"' in response["Content-Disposition"]
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    today = timezone.now().date().isoformat()
    assert rows == [
        list(COLUMNS),
        [today, activity_ny.path, "0", "0", "0", "0", "4", *[str(_stored(activity_ny))] * 2],
        [today, activity.path, "5", "5", "2", "2", "0", "0", str(_stored(activity))],
        [yesterday.isoformat(), activity.path, "7", "0", "0", "0", "0", "0", "70"],
    ]


def test_an_outsider_sees_none_of_another_tenants_usage(traffic, outsider, activity):
    rollup_tenant_usage_task(traffic.pk)
    client = _client(outsider)
    session = client.session
    session["streamgate_tenant"] = traffic.pk  # a session pointed at acme falls back
    session.save()
    page = client.get("/usage/").content.decode()
    assert activity.path not in page and "No usage in this period" in page
    rows = list(csv.reader(io.StringIO(client.get("/usage.csv").content.decode())))
    assert rows == [list(COLUMNS)]
    assert UsageDay.objects.restrict(outsider).count() == 0


def test_an_anonymous_visitor_is_sent_to_sign_in(db):
    response = Client().get("/usage.csv")
    assert response.status_code == 302 and "/login/" in response["Location"]


def test_live_figures_are_read_for_the_given_rows_streams_only_and_match_the_whole(
        traffic, activity, activity_ny):
    """The usage page cuts its page from usage_keys and reads today's live figures for that
    page's streams only (issue 34); those figures are the ones the whole table (CSV) has."""
    whole = {(r.day, r.path): r.figures for r in usage_rows(tenant=traffic, days=7)}
    keys = usage_keys(tenant=traffic, days=7)
    assert [(r.day, r.path) for r in keys] == list(whole)  # same rows, same order
    assert all(r.figures == {} for r in keys)  # nothing live read yet
    source = [r for r in keys if r.path == activity.path]
    with_live(traffic, source)
    assert source[0].figures == whole[(source[0].day, activity.path)]
    assert source[0].figures["produced_messages"] == 4
    replica = next(r for r in keys if r.path == activity_ny.path)
    assert replica.figures == {}  # not on the "page": not read


def test_each_usage_page_shows_the_whole_tables_rows_with_their_live_figures(
        traffic, owner, activity, sanfrancisco):
    """Paging cuts before the live figures are read: every row is on one page, in the CSV's
    order, with the CSV's figures."""
    Stream.objects.bulk_create(
        Stream(path=f"/mapr/{sanfrancisco.name}/s{i:03d}", cluster=sanfrancisco,
               name=f"s{i:03d}", tenant=traffic, created_by=owner, adminperm="u:alice")
        for i in range(110))
    client = _client(owner)
    shown = []
    for page in (1, 2):
        html = client.get(f"/usage/?days=7&page={page}").content.decode()
        shown += re.findall(r'<tr data-path="([^"]+)"', html)
    rows = list(csv.reader(io.StringIO(client.get("/usage.csv?days=7").content.decode())))
    assert shown == [r[1] for r in rows[1:]] and len(shown) == 112
    first = client.get("/usage/?days=7").content.decode()
    assert f'data-path="{activity.path}"' in first
    assert 'data-field="produced_messages">4<' in first
