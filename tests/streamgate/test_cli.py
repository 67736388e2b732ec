"""The `streamgate` console script, run as a subprocess against a live portal."""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from knox.models import AuthToken

from replication.models import ReplicaState, Stream
from streamgate.client import Client, CommandError

STREAMGATE = Path(sys.executable).with_name("streamgate")
SF, NY = "/mapr/sanfrancisco/activity", "/mapr/newyork/activity"




def token_for(user) -> str:  # type: ignore[no-untyped-def]
    return AuthToken.objects.create(user)[1]


def streamgate(url: str, token: str | None, command: str,
               stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "STREAMGATE_URL": url}
    env.pop("STREAMGATE_TOKEN", None)
    if token:
        env["STREAMGATE_TOKEN"] = token
    return subprocess.run([str(STREAMGATE), *shlex.split(command)], env=env, input=stdin,
                          capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture
def cli(live_server):
    """cli(token, "stream info -path ...") -> the finished process, which must succeed."""

    def run(token: str, command: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        done = streamgate(live_server.url, token, command, stdin)
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        return done

    return run


def rows(done: subprocess.CompletedProcess[str]) -> list[dict]:
    return json.loads(done.stdout)["data"]


@pytest.fixture
def clusters(cli, operator) -> None:
    ops = token_for(operator)
    cli(ops, "cluster create -name sanfrancisco")
    cli(ops, "cluster create -name newyork")


def test_seed_004_manual_primary_secondary_replication(cli, clusters, owner):
    alice = token_for(owner)
    cli(alice, f"stream create -path {SF}")

    # Seed 004, step by step, with streamgate in place of maprcli.
    cli(alice, "stream create -path /mapr/newyork/activity "
               "-copymetafrom /mapr/sanfrancisco/activity")
    cli(alice, "stream replica add -path /mapr/sanfrancisco/activity "
               "-replica /mapr/newyork/activity -paused true")
    listed = cli(alice, "stream replica list -path /mapr/sanfrancisco/activity")
    assert ReplicaState.WAITING_FOR_UPSTREAM in listed.stdout
    [replica] = rows(cli(alice, "stream replica list -path /mapr/sanfrancisco/activity -json"))
    assert replica["replicaPath"] == NY and replica["paused"] is True
    assert replica["replicaState"] == ReplicaState.WAITING_FOR_UPSTREAM

    cli(alice, "stream upstream add -path /mapr/newyork/activity "
               "-upstream /mapr/sanfrancisco/activity")
    [upstream] = rows(cli(alice, "stream upstream list -path /mapr/newyork/activity -json"))
    source = Stream.objects.get(path=SF)
    assert upstream == {"cluster": "sanfrancisco", "stream": SF, "idx": 1,
                        "uuid": str(source.uuid)}
    # Step 6 (mapr copystream) loads existing messages; a new stream has none to copy.
    cli(alice, "stream replica resume -path mapr/sanfrancisco/activity "
               "-replica /mapr/newyork/activity")

    [replica] = rows(cli(alice, "stream replica list -path /mapr/sanfrancisco/activity -json"))
    assert replica["replicaState"] == ReplicaState.REPLICATING
    assert replica["paused"] is False and replica["waitingForUpstream"] is False
    assert Stream.objects.get(path=NY).ttl == source.ttl


def test_json_prints_the_raw_envelope(cli, clusters, owner):
    alice = token_for(owner)
    cli(alice, f"stream create -path {SF} -ttl 60")
    envelope = json.loads(cli(alice, f"stream info -path {SF} -json").stdout)
    assert list(envelope) == ["timestamp", "timeofday", "status", "total", "data"]
    assert envelope["data"][0]["ttl"] == 60


def test_action_command_prints_nothing(cli, clusters, owner):
    done = cli(token_for(owner), f"stream create -path {SF}")
    assert done.stdout == "" and done.stderr == ""


def test_table_output_has_aligned_columns_and_noheader_drops_the_header(cli, clusters, owner):
    alice = token_for(owner)
    for path in (SF, "/mapr/sanfrancisco/a-much-longer-stream-name"):
        cli(alice, f"stream create -path {path}")
    lines = cli(alice, "stream list").stdout.splitlines()
    assert lines[0].split() == ["path", "cluster", "tenant", "numtopics", "uuid"]
    assert len(lines) == 3
    column = lines[0].index("cluster")
    assert all(line[column:].startswith("sanfrancisco") for line in lines[1:])
    bare = cli(alice, "stream list -noheader").stdout.splitlines()
    assert [line.split() for line in bare] == [line.split() for line in lines[1:]]


def test_error_prints_mapr_error_line_and_exits_1(live_server, clusters, owner):
    done = streamgate(live_server.url, token_for(owner), "stream info -path /mapr/sanfrancisco/x")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("ERROR (2) - stream /mapr/sanfrancisco/x does not exist")


def test_error_with_json_prints_the_error_envelope_and_exits_1(live_server, clusters, owner):
    done = streamgate(live_server.url, token_for(owner),
                      "stream create -path /mapr/sanfrancisco/x -ischangelog true -json")
    assert done.returncode == 1
    envelope = json.loads(done.stdout)
    assert envelope["status"] == "ERROR"
    assert "change-data-capture" in envelope["errors"][0]["desc"]


def test_values_starting_with_dash_or_bang_are_values(cli, live_server, clusters, owner):
    alice = token_for(owner)
    cli(alice, f"stream create -path {SF} -consumeperm '!u:bob & u:alice'")
    assert Stream.objects.get(path=SF).consumeperm == "!u:bob & u:alice"
    done = streamgate(live_server.url, alice, f"stream edit -path {SF} -ttl -1")
    assert done.returncode == 1 and "-ttl must be a whole number" in done.stderr


def test_missing_token_is_a_401_with_a_hint(live_server, db):
    done = streamgate(live_server.url, None, "stream list")
    assert done.returncode == 1
    assert done.stderr.startswith("ERROR (13) - ")
    assert "STREAMGATE_TOKEN" in done.stderr


def test_option_without_value_is_a_usage_error(live_server, db):
    done = streamgate(live_server.url, "x", "stream info -path")
    assert done.returncode == 1 and "option -path needs a value" in done.stderr


def test_help_lists_the_commands(live_server, db):
    for command in ("", "help", "help stream replica"):
        done = streamgate(live_server.url, None, command)
        assert done.returncode == 0, done.stderr
        assert "stream replica add -path <stream path> -replica <stream path>" in done.stdout
    assert "cluster create" not in streamgate(live_server.url, None, "help stream").stdout


def test_connection_refused_exits_2_naming_streamgate_url(db):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = streamgate(f"http://127.0.0.1:{port}", "x", "stream list")
    assert done.returncode == 2
    assert "STREAMGATE_URL" in done.stderr and f"127.0.0.1:{port}" in done.stderr


def test_python_client_returns_rows_and_raises_command_error(live_server, clusters, owner):
    client = Client(live_server.url, token_for(owner))
    assert client.call("stream create", {"path": SF, "autocreate": False}) == []
    assert client.call("stream/info", {"path": SF})[0]["autocreate"] is False
    with pytest.raises(CommandError) as raised:
        client.call("stream replica add", {"path": SF, "replica": SF})
    assert raised.value.id == 22 and "cannot be a replica of itself" in raised.value.desc


# --- produce and consume (the data plane) -------------------------------------------------


def json_lines(done: subprocess.CompletedProcess[str]) -> list[dict]:
    return [json.loads(line) for line in done.stdout.splitlines()]


@pytest.fixture
def alice(cli, clusters, owner) -> str:
    token = token_for(owner)
    cli(token, f"stream create -path {SF}")
    return token


def test_produce_reads_stdin_and_consume_prints_json_lines(cli, alice):
    produced = cli(alice, f"produce -path {SF}:clicks -partition 0", stdin="one\ntwo\nthree\n")
    assert json_lines(produced) == [{"partition": 0, "offset": n} for n in range(3)]
    consumed = json_lines(cli(alice, f"consume -path {SF} -topic clicks -offset 1"))
    assert [(r["offset"], r["value"]) for r in consumed] == [(1, "two"), (2, "three")]


def test_consume_with_a_group_resumes_where_it_committed(cli, alice):
    cli(alice, f"produce -path {SF}:clicks -partition 0 -format json",
        stdin='{"value": "a", "key": "k"}\n{"value": "b"}\n')
    [first] = json_lines(cli(alice, f"consume -path {SF}:clicks -group g -limit 1"))
    assert (first["value"], first["key"]) == ("a", "k")
    second = json_lines(cli(alice, f"consume -path {SF}:clicks -group g"))
    assert [r["value"] for r in second] == ["b"]


def test_a_null_value_is_produced_and_consumed_as_json_null_apart_from_an_empty_one(cli, alice):
    cli(alice, f"produce -path {SF}:clicks -partition 0 -format json",
        stdin='{"value": null, "key": "k", "headers": {"h": null}}\n{"value": ""}\n')
    consumed = json_lines(cli(alice, f"consume -path {SF}:clicks -partition 0"))
    assert [(r["value"], r["key"], r.get("headers")) for r in consumed] == [
        (None, "k", {"h": None}), ("", None, None)]


def test_produce_refuses_bad_json_lines(live_server, alice):
    failed = streamgate(live_server.url, alice, f"produce -path {SF}:clicks -format json",
                        stdin="not json\n")
    assert failed.returncode == 1
    assert "line 1 is not JSON" in failed.stderr


def test_produce_without_produceperm_fails_with_the_reason(live_server, alice, member):
    failed = streamgate(live_server.url, token_for(member), f"produce -path {SF}:clicks",
                        stdin="x\n")
    assert failed.returncode == 1
    assert "produceperm" in failed.stderr


def test_synchronous_replicas_wire_options_and_gateway_counters(cli, clusters, owner,
                                                                 operator, live_server):
    from replication.models import Gateway

    alice, ops = token_for(owner), token_for(operator)
    cli(alice, f"stream create -path {SF}")
    cli(alice, f"stream create -path {NY}")
    cli(alice, f"stream replica add -path {SF} -replica {NY} -synchronous true")
    [replica] = rows(cli(alice, f"stream replica list -path {SF} -json"))
    # Configured synchronous; async until the upstream is declared and a gateway is live.
    assert (replica["synchronous"], replica["mode"], replica["networkcompression"]) == (
        True, "async", "off")
    refused = streamgate(live_server.url, alice, f"stream replica edit -path {SF} -replica {NY} "
                                                 "-networkcompression zlib")
    assert refused.returncode != 0
    assert "PostgreSQL's protocol does not compress; give -networkcompression off" in (
        refused.stderr)
    refused = streamgate(live_server.url, alice, f"stream replica edit -path {SF} -replica {NY} "
                                                 "-networkencryption true")
    assert refused.returncode != 0 and "sslmode=verify-full" in refused.stderr
    cli(ops, "cluster gateway set -dstcluster newyork -gateways gw1")
    Gateway.objects.filter(name="gw1").update(batches_applied=2, messages_applied=20,
                                              bytes_applied=640, errors=1)
    [gateway] = rows(cli(alice, "cluster gateway get -dstcluster newyork -json"))
    assert (gateway["batchesApplied"], gateway["messagesApplied"], gateway["bytesApplied"],
            gateway["errors"]) == (2, 20, 640, 1)
    assert (gateway["status"], gateway["lastHeartbeat"], gateway["heartbeatAge"]) == (
        "UNKNOWN", None, None)
    table = cli(alice, "cluster gateway get -dstcluster newyork").stdout
    assert "batchesApplied" in table and "messagesApplied" in table and "bytesApplied" in table


# --- consume reads every partition, as kcat does -------------------------------------------


def produce_spread(cli, token: str) -> None:
    """Topic clicks with 3 partitions; timestamps interleave across the partitions."""
    cli(token, f"stream topic create -path {SF} -topic clicks -partitions 3")
    records = [(2, 100, "c"), (0, 10, "a"), (1, 50, "b"), (0, 200, "d"), (2, 300, "e")]
    lines = "".join(json.dumps({"value": v, "partition": p, "timestamp": t}) + "\n"
                    for p, t, v in records)
    cli(token, f"produce -path {SF}:clicks -format json", stdin=lines)


def test_consume_without_partition_reads_every_partition_merged_by_timestamp(cli, alice):
    produce_spread(cli, alice)
    consumed = json_lines(cli(alice, f"consume -path {SF}:clicks"))
    assert [(r["value"], r["partition"], r["timestamp"]) for r in consumed] == [
        ("a", 0, 10), ("b", 1, 50), ("c", 2, 100), ("d", 0, 200), ("e", 2, 300)]


def test_consume_with_partition_reads_only_that_partition(cli, alice):
    produce_spread(cli, alice)
    consumed = json_lines(cli(alice, f"consume -path {SF}:clicks -partition 2"))
    assert [(r["partition"], r["offset"], r["value"]) for r in consumed] == [
        (2, 0, "c"), (2, 1, "e")]


def test_consume_limit_counts_messages_across_partitions(cli, alice):
    produce_spread(cli, alice)
    consumed = json_lines(cli(alice, f"consume -path {SF}:clicks -limit 3"))
    assert [r["value"] for r in consumed] == ["a", "b", "c"]


def test_consume_with_a_group_commits_and_resumes_each_partition(cli, alice, live_server):
    produce_spread(cli, alice)
    first = json_lines(cli(alice, f"consume -path {SF}:clicks -group billing -limit 3"))
    assert [r["value"] for r in first] == ["a", "b", "c"]
    client = Client(live_server.url, alice)
    assert client.committed_all(SF, "clicks", group="billing") == {0: 1, 1: 1, 2: 1}
    rest = json_lines(cli(alice, f"consume -path {SF}:clicks -group billing"))
    assert [r["value"] for r in rest] == ["d", "e"]
    assert client.committed_all(SF, "clicks", group="billing") == {0: 2, 1: 1, 2: 2}
    assert cli(alice, f"consume -path {SF}:clicks -group billing").stdout == ""


def test_consume_wait_sees_a_message_arriving_on_any_partition(cli, alice, live_server):
    import threading

    cli(alice, f"stream topic create -path {SF} -topic clicks -partitions 3")
    client = Client(live_server.url, alice)
    later = threading.Timer(1.0, client.produce, (SF, "clicks", [{"value": b"late",
                                                                  "partition": 2}]))
    later.start()
    try:
        consumed = json_lines(cli(alice, f"consume -path {SF}:clicks -wait 30000"))
    finally:
        later.join()
    assert [(r["partition"], r["value"]) for r in consumed] == [(2, "late")]


def test_outsider_cannot_consume_another_tenants_topic(cli, alice, live_server, outsider):
    produce_spread(cli, alice)
    done = streamgate(live_server.url, token_for(outsider), f"consume -path {SF}:clicks")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith(f"ERROR (2) - stream {SF} does not exist")


# --- stream purge and cluster gateway local from the command line --------------------------


def test_stream_purge_all_prints_what_it_purged_and_consume_goes_on(cli, alice):
    cli(alice, f"produce -path {SF}:clicks", stdin="one\ntwo\n")
    table = cli(alice, f"stream purge -path {SF} -all true").stdout.splitlines()
    assert table[0].split() == ["topic", "partition", "messagesPurged",
                                "messagesKeptForReplicas", "minoffset", "nextoffset"]
    assert table[1].split() == ["clicks", "0", "2", "0", "2", "2"]
    cli(alice, f"produce -path {SF}:clicks", stdin="three\n")
    [line] = json_lines(cli(alice, f"consume -path {SF}:clicks -offset 2"))
    assert (line["offset"], line["value"]) == (2, "three")


def test_stream_purge_by_a_member_without_adminperm_fails_with_the_reason(live_server, alice,
                                                                          cli, member):
    cli(alice, f"produce -path {SF}:clicks", stdin="one\n")
    done = streamgate(live_server.url, token_for(member), f"stream purge -path {SF} -all true")
    assert done.returncode == 1
    assert done.stderr.startswith("ERROR (1) - bob may not purge the stream")
    assert [r["value"] for r in json_lines(cli(alice, f"consume -path {SF}:clicks"))] == ["one"]


def test_cluster_gateway_local_prints_the_text_for_gateway_set(cli, clusters, operator, owner,
                                                               live_server):
    cli(token_for(operator), "cluster gateway set -dstcluster newyork -gateways 'gw1 gw2'")
    done = cli(token_for(owner), "cluster gateway local -cluster newyork -noheader")
    assert done.stdout.split() == ["newyork", "gw1", "gw2"]
    refused = streamgate(live_server.url, token_for(owner),
                         "cluster gateway local -cluster newyork -format dns")
    assert refused.returncode == 1 and "ERROR (95) - -format dns" in refused.stderr


def test_consume_after_a_purge_starts_at_the_first_retained_offset_unless_told(cli, alice,
                                                                                live_server):
    cli(alice, f"produce -path {SF}:clicks", stdin="one\ntwo\n")
    cli(alice, f"consume -path {SF}:clicks -group g -limit 1")  # committed at 1, now purged
    cli(alice, f"stream purge -path {SF} -all true")
    assert cli(alice, f"consume -path {SF}:clicks").stdout == ""
    cli(alice, f"produce -path {SF}:clicks", stdin="three\n")
    assert [(r["offset"], r["value"]) for r in json_lines(
        cli(alice, f"consume -path {SF}:clicks -group g"))] == [(2, "three")]
    told = streamgate(live_server.url, alice, f"consume -path {SF}:clicks -offset 0")
    assert told.returncode == 1 and "valid offsets are 2..3" in told.stderr
def test_cli_sets_and_lists_the_default_stream_for_plain_kafka_names(cli, clusters, owner,
                                                                     outsider):
    mine = token_for(owner)
    cli(mine, "tenant defaultstream set -cluster sanfrancisco -path /mapr/sanfrancisco/kafka")
    listed = cli(mine, "tenant defaultstream list -json")
    assert [(r["scope"], r["path"]) for r in rows(listed)] == [
        ("tenant", "/mapr/sanfrancisco/kafka")]
    assert rows(cli(token_for(outsider), "tenant defaultstream list -json")) == []


def test_cli_sets_and_lists_tenant_quotas_for_operators_only(cli, live_server, owner,
                                                             operator):
    set_by_ops = cli(token_for(operator),
                     "tenant quota set -tenant acme -producebytes 1048576 -requests 100 -json")
    quota = {"tenant": "acme", "producebytes": 1048576, "fetchbytes": 0, "requests": 100}
    assert rows(set_by_ops) == [quota]
    assert rows(cli(token_for(owner), "tenant quota list -json")) == [quota]
    told = streamgate(live_server.url, token_for(owner), "tenant quota set -tenant acme "
                      "-producebytes 0")
    assert told.returncode == 1 and "only operators set quotas" in told.stderr
    bad = streamgate(live_server.url, token_for(operator), "tenant quota set -tenant acme "
                     "-requests 99999999999")
    assert bad.returncode == 1 and "-requests 99999999999 is out of range" in bad.stderr
