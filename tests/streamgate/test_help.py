"""`streamgate help` and `-help` work with no server, from files shipped with the command
line, and those files cannot drift from the server's /rest registry."""

from __future__ import annotations

import json
import socket

import pytest

from portal.rest.clihelp import HELP_FILE, registry_rows, render
from portal.rest.commands import REGISTRY
from streamgate import help as helpdoc
from tests.streamgate.test_cli import streamgate


@pytest.fixture
def nowhere() -> str:
    """The address of a port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


def test_shipped_help_file_matches_the_server_registry():
    assert HELP_FILE.read_text() == render(registry_rows()), (
        "streamgate/commands.json differs from the /rest registry: run 'make clihelp' "
        "(python -m portal.rest.clihelp) and commit the file")


def test_every_server_command_is_described_offline():
    offline = {row["command"] for row in helpdoc.server_commands()}
    assert offline == {spec.name for spec in REGISTRY.values()}


def test_offline_usage_lines_match_the_servers_for_every_option():
    # usage_of (used for the CLI's own words) spells options as the server's Option.usage.
    for spec in REGISTRY.values():
        for option in spec.options:
            assert helpdoc.usage_of(option.describe()) == option.usage(), (spec.name, option)


@pytest.mark.parametrize("words", ["", "help", "help stream replica", "stream help",
                                   "stream replica"])
def test_help_lists_commands_with_no_server_running(nowhere, words):
    done = streamgate(nowhere, None, words)
    assert done.returncode == 0, done.stderr
    assert "stream replica add -path <stream path> -replica <stream path>" in done.stdout
    assert done.stderr == ""


def test_group_help_lists_only_that_group(nowhere):
    listed = streamgate(nowhere, None, "stream topic help").stdout
    assert "stream topic create" in listed and "stream replica add" not in listed
    assert "cluster create" not in streamgate(nowhere, None, "help stream").stdout


@pytest.mark.parametrize("words", ["stream replica add -help", "help stream replica add",
                                   "stream replica add -path /mapr/a/b -help"])
def test_command_help_describes_each_option_with_no_server(nowhere, words):
    done = streamgate(nowhere, None, words)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("stream replica add: Register a replica")
    assert any(line.split()[:2] == ["-paused", "true|false"] and "paused" in line
               for line in lines)
    assert any(line.split()[:1] == ["-path"] and "(required)" in line for line in lines)


def test_command_help_names_options_refused_and_why(nowhere):
    text = streamgate(nowhere, None, "stream create -help").stdout
    assert "-ischangelog <value>" in text and "change-data-capture" in text


def test_local_words_have_help_too(nowhere):
    text = streamgate(nowhere, None, "consume -help").stdout
    assert text.startswith("consume: ") and "-partition <number>" in text
    assert "merged by timestamp" in text
    assert "gateway run -cluster <text> -name <text>" in streamgate(nowhere, None, "help").stdout


def test_help_for_an_unknown_word_is_a_mapr_error(nowhere):
    done = streamgate(nowhere, None, "help frobnicate")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("ERROR (2) - no command starts with 'frobnicate'")
    typo = streamgate(nowhere, None, "help stream replica lsit")
    assert "no command starts with 'stream replica lsit': did you mean 'stream replica list'?" \
        in typo.stderr


@pytest.mark.parametrize(("words", "error_id", "text"), [
    ("help frobnicate -json", 2, "no command starts with 'frobnicate'"),
    ("consume -path /mapr/a/b -json", 22, "-topic is required"),
    ("stream info -json -path", 22, "option -path needs a value"),
])
def test_errors_found_by_the_command_line_print_the_error_envelope_with_json(
        nowhere, words, error_id, text):
    done = streamgate(nowhere, "x", words)
    assert done.returncode == 1 and done.stderr == ""
    envelope = json.loads(done.stdout)
    assert list(envelope) == ["timestamp", "timeofday", "status", "errors"]
    assert envelope["status"] == "ERROR" and envelope["errors"][0]["id"] == error_id
    assert text in envelope["errors"][0]["desc"]
