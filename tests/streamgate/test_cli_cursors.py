"""`streamgate stream cursor list|delete` and `stream assign list` against a live portal: the
cursors `streamgate consume -group` commits, as a Kafka group's would be."""

from __future__ import annotations

import json

from replication.groups.board import Placement, group_key, publish, snapshot
from replication.groups.model import GroupView, MemberView
from replication.models import Stream
from tests.streamgate.test_cli import SF, rows, streamgate, token_for


def test_cursor_list_and_delete_show_the_groups_consume_commits(cli, clusters, owner):
    alice = token_for(owner)
    cli(alice, f"stream create -path {SF}")
    cli(alice, f"stream topic create -path {SF} -topic clicks")
    cli(alice, f"produce -path {SF} -topic clicks", stdin="a\nb\nc\n")
    consumed = cli(alice, f"consume -path {SF} -topic clicks -group billing -limit 2")
    assert len(consumed.stdout.splitlines()) == 2
    [cursor] = rows(cli(alice, f"stream cursor list -path {SF} -json"))
    assert cursor["consumergroup"] == "billing" and cursor["committedoffset"] == 2
    assert cursor["produceroffset"] == 2 and cursor["partitionid"] == 0
    table = cli(alice, f"stream cursor list -path {SF} -topic clicks").stdout.splitlines()
    assert table[0].split()[:5] == ["consumergroup", "topic", "partitionid", "produceroffset",
                                    "committedoffset"]
    cli(alice, f"stream cursor delete -path {SF} -consumergroup billing")
    assert rows(cli(alice, f"stream cursor list -path {SF} -json")) == []


def test_assign_list_takes_detail_without_a_value(cli, clusters, owner):
    alice = token_for(owner)
    cli(alice, f"stream create -path {SF}")
    cli(alice, f"stream topic create -path {SF} -topic clicks")
    stream = Stream.objects.get(path=SF)
    view = GroupView("kafka", "Stable", 2, "consumer", "range", "m-1",
                     [MemberView("m-1", None, "app", "/127.0.0.1", b"", b"")])
    publish(group_key(stream.tenant_id, "kafka"), snapshot(
        view, {"m-1": [Placement(str(stream.uuid), SF, "clicks", 0, "clicks")]}))
    [row] = rows(cli(alice, f"stream assign list -path {SF} -detail -json"))
    assert row["consumerid"] == "m-1" and row["state"] == "Stable" and row["leader"] is True


def test_cursor_commands_refuse_bad_input_in_maprcli_shape(live_server, clusters, owner):
    alice = token_for(owner)
    done = streamgate(live_server.url, alice, "stream cursor list -path /mapr/sanfrancisco/x")
    assert done.returncode == 1
    assert done.stderr.startswith("ERROR (2) - stream /mapr/sanfrancisco/x does not exist")
    done = streamgate(live_server.url, alice,
                      "stream cursor delete -path /mapr/sanfrancisco/x -partition 1 -json")
    assert done.returncode == 1 and json.loads(done.stdout)["status"] == "ERROR"
