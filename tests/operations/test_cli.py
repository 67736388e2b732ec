"""`streamgate alarm list` and `streamgate audit list`, the console script against a live
portal."""

from __future__ import annotations

import json

import pytest

from operations.alarms import alarms_evaluate
from replication import services
from tests.streamgate.test_cli import cli, streamgate, token_for  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db(transaction=True)


def test_alarm_list_prints_the_raised_alarms_as_a_table(cli, owner, activity, link):  # noqa: F811
    alarms_evaluate()
    out = cli(token_for(owner), "alarm list").stdout.splitlines()
    assert out[0].split()[:3] == ["entity", "alarm", "name"]
    assert "STREAM_ALARM_REPLICA_WAITING_FOR_UPSTREAM" in out[1] and activity.path in out[1]
    summary = json.loads(cli(token_for(owner), "alarm list -summary true -json").stdout)
    assert summary["data"] == [{"alarm name": "STREAM_ALARM_REPLICA_WAITING_FOR_UPSTREAM",
                                "count": 1}]


def test_audit_list_shows_who_changed_what_through_the_cli(cli, owner, sanfrancisco):  # noqa: F811
    token = token_for(owner)
    cli(token, "stream create -path /mapr/sanfrancisco/orders")
    cli(token, "stream edit -path /mapr/sanfrancisco/orders -ttl 60")
    rows = json.loads(cli(token, "audit list -path /mapr/sanfrancisco/orders -json").stdout)
    assert [(r["action"], r["user"], r["interface"], r["after"].get("ttl"))
            for r in rows["data"]] == [("edit", "alice", "rest", 60),
                                       ("create", "alice", "rest", 604800)]


def test_outsider_alarm_and_audit_lists_refuse_another_tenants_stream(live_server, outsider,
                                                                      owner, activity, link):
    services.stream_edit(actor=owner, stream=activity, ttl=5)
    alarms_evaluate()
    token = token_for(outsider)
    for command in (f"alarm list -path {activity.path}", f"audit list -path {activity.path}"):
        done = streamgate(live_server.url, token, command)
        assert done.returncode == 1 and "does not exist" in done.stderr, command
    done = streamgate(live_server.url, token, "alarm list")
    assert done.returncode == 0 and activity.path not in done.stdout
